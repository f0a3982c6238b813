<?php
/** Uncontended lock+unlock pairs per second from PHP.
 *  Usage: uncontended.php ferrolock|legacy <url> <seconds> */
require __DIR__ . '/common.php';
[, $impl, $url, $seconds] = $argv;
putenv("REDIS_URL=$url");
$lock = $impl === 'legacy' ? new LegacyRedisLock() : new RedisLock($url);
$name = "bench-uncontended-$impl-" . getmypid();
for ($i = 0; $i < 1000; $i++) { $lock->lock($name); $lock->unlock($name); } // warm-up
$n = 0;
$end = hrtime(true) + (int) ((float) $seconds * 1e9);
$start = hrtime(true);
while (hrtime(true) < $end) {
    for ($i = 0; $i < 100; $i++) {
        $lock->lock($name);
        $lock->unlock($name);
    }
    $n += 100;
}
echo json_encode(['pairs_per_s' => $n / ((hrtime(true) - $start) / 1e9)]), "\n";
