<?php
/** Releases the Symfony lock whose serialized Key is in $argv[1] (base64): prints "released" or "not held". */
require __DIR__ . '/../bootstrap.php';

use Ferrolock\Bridge\Symfony\FerrolockStore;
use Symfony\Component\Lock\LockFactory;

$key = unserialize(base64_decode($argv[1]));
$lock = (new LockFactory(new FerrolockStore(redis_url())))->createLockFromKey($key, 30, false);
echo $lock->isAcquired() ? 'held' : 'not held', "\n";
$lock->release();
echo $lock->isAcquired() ? 'still held' : 'released', "\n";
