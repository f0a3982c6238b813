<?php
/** Worker: keeps lock $name busy with RedisLock (lock, hold $hold_us, unlock)
 *  until $seconds have passed; prints how many times it held it.
 *  Usage: busy.php <lock name> <seconds> <hold_us> */
[, $name, $seconds, $hold] = $argv;
$lock = new RedisLock();
$until = microtime(true) + (float) $seconds;
$held = 0;
while (microtime(true) < $until) {
    if ($lock->lock($name, 10)) {
        usleep((int) $hold);
        $lock->unlock($name);
        $held++;
    }
}
echo "$held\n";
