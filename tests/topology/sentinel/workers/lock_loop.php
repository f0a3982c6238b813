<?php
/**
 * A PHP lock worker for failover tests: lock($name, $timeout, 5) / unlock in
 * a loop for $seconds, one JSON line per try: {"t": unix time at its end,
 * "took": seconds, "ok": bool} or {"t", "took", "error": message}.
 * It stops early once the file <stop> exists.
 * Usage: lock_loop.php <url> <name> <seconds> [<min_replicas> [<timeout> [<stop>]]]
 */

[$_, $url, $name, $seconds] = $argv;
$minReplicas = (int)($argv[4] ?? 0);
$timeout = (float)($argv[5] ?? 5);
$stop = $argv[6] ?? null;
$lock = new RedisLock($minReplicas > 0 ? ['url' => $url, 'min_replicas' => $minReplicas] : $url);
$end = microtime(true) + (float)$seconds;
while (microtime(true) < $end && !($stop !== null && file_exists($stop))) {
    $start = microtime(true);
    try {
        $ok = $lock->lock($name, $timeout, 5);
        if ($ok) {
            usleep(2000);
            $lock->unlock($name);
        }
        echo json_encode(['t' => microtime(true), 'took' => microtime(true) - $start, 'ok' => $ok]), "\n";
    } catch (RedisLockException $e) {
        echo json_encode(['t' => microtime(true), 'took' => microtime(true) - $start,
                          'error' => $e->getMessage()]), "\n";
        usleep(10000);
    }
    if ($timeout == 0) {
        usleep(10000);
    }
}
