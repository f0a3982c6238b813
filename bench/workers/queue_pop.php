<?php
/** Single pops per second from PHP. Usage: queue_pop.php ferrolock|legacy <url> <queue> <seconds> */
require __DIR__ . '/../../tests/php/legacy/LegacyRedis.php';
[, $impl, $url, $name, $seconds] = $argv;
putenv("REDIS_URL=$url");
$q = $impl === 'legacy' ? new LegacyRedisQueue() : new RedisQueue($url);
$n = 0;
$start = hrtime(true);
$end = $start + (int) ((float) $seconds * 1e9);
while (hrtime(true) < $end) {
    if ($q->pop($name) === false) {
        fwrite(STDERR, "queue ran dry\n");
        exit(1);
    }
    $n++;
}
echo json_encode(['pops_per_s' => $n / ((hrtime(true) - $start) / 1e9)]), "\n";
