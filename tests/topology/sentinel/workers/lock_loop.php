<?php
/**
 * A PHP lock worker for failover tests: lock($name, 5, 5) / unlock in a loop
 * for $seconds, one JSON line per section ({"t": unix time, "ok": true}) or
 * error ({"t": ..., "error": message}).
 * Usage: lock_loop.php <url> <name> <seconds>
 */

[$_, $url, $name, $seconds] = $argv;
$lock = new RedisLock($url);
$end = microtime(true) + (float)$seconds;
while (microtime(true) < $end) {
    try {
        if ($lock->lock($name, 5, 5)) {
            usleep(2000);
            $released = $lock->unlock($name);
            echo json_encode(['t' => microtime(true), 'ok' => true, 'released' => $released]), "\n";
        }
    } catch (RedisLockException $e) {
        echo json_encode(['t' => microtime(true), 'error' => $e->getMessage()]), "\n";
        usleep(10000);
    }
}
