<?php
/** restoreLock($argv[1], $argv[2])->release() in another process: prints true/false. */
require __DIR__ . '/../bootstrap.php';

use Ferrolock\Bridge\Laravel\FerrolockLockProvider;

var_export((new FerrolockLockProvider(redis_url()))->restoreLock($argv[1], $argv[2])->release());
echo "\n";
