<?php
/**
 * Holds Symfony lock $argv[1] through FerrolockStore for $argv[2] seconds:
 * prints "held" once acquired, then "released <unix time>" after releasing.
 */
require __DIR__ . '/../bootstrap.php';

use Ferrolock\Bridge\Symfony\FerrolockStore;
use Symfony\Component\Lock\LockFactory;

$lock = (new LockFactory(new FerrolockStore(redis_url())))->createLock($argv[1], 30);
$lock->acquire(true);
echo "held\n";
flush();
usleep((int) ((float) $argv[2] * 1e6));
$lock->release();
printf("released %.6f\n", microtime(true));
