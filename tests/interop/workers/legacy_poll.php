<?php
/** The legacy client of a migration: LegacyRedisLock (SETNX every 100 ms)
 *  asks for lock $name $tries times, each with a $timeout s timeout, holding
 *  it 20 ms when it gets it and pausing 300 ms between tries. Prints one
 *  line per try: "got <seconds>" or "timeout <seconds>".
 *  Usage: legacy_poll.php <lock name> <tries> <timeout> */
require __DIR__ . '/../../php/helpers.php';
[, $name, $tries, $timeout] = $argv;
$lock = new LegacyRedisLock();
for ($i = 0; $i < (int) $tries; $i++) {
    $t = microtime(true);
    $ok = $lock->lock($name, (int) $timeout);
    $took = microtime(true) - $t;
    if ($ok) {
        usleep(20000);
        $lock->unlock($name);
    }
    printf("%s %.3f\n", $ok ? 'got' : 'timeout', $took);
    usleep(300000);
}
