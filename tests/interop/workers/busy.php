<?php
/** Worker: keeps lock $name busy with RedisLock (lock, hold $hold_us, unlock)
 *  until the file $stop exists; prints how many times it held the lock.
 *  Usage: busy.php <lock name> <stop file> <hold_us> */
[, $name, $stop, $hold] = $argv;
$lock = new RedisLock();
$held = 0;
while (!file_exists($stop)) {
    if ($lock->lock($name, 10)) {
        usleep((int) $hold);
        $lock->unlock($name);
        $held++;
    }
}
echo "$held\n";
