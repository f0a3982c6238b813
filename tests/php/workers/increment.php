<?php
/** Worker: $rounds non-atomic increments of $counter under a lock.
 *  Usage: increment.php ferrolock|legacy <lock name> <counter key> <rounds> */
require __DIR__ . '/../helpers.php';
[, $mode, $name, $counter, $rounds] = $argv;
$r = legacy_redis();
$lock = $mode === 'legacy' ? new LegacyRedisLock() : new RedisLock();
for ($i = 0; $i < (int) $rounds; $i++) {
    // Legacy polls; give it a short interval so the test does not take minutes.
    if (!$lock->lock($name, 60, 15, 1000)) {
        fwrite(STDERR, "lock timed out\n");
        exit(1);
    }
    $v = (int) $r->get($counter);
    $r->set($counter, $v + 1);
    $lock->unlock($name);
}
