<?php
/**
 * Pops one task at a time from PHP, for <seconds> from <start_at_ns> (hrtime;
 * 0: now), and prints the rate and the ids it got, so that the bench can
 * count tasks handed to two consumers.
 * Usage: queue_pop.php ferrolock|legacy <url> <queue> <seconds> [<start_at_ns>]
 */
require __DIR__ . '/common.php';
[, $impl, $url, $name, $seconds] = $argv;
$startAt = (int) ($argv[5] ?? 0);
putenv("REDIS_URL=$url");
$q = $impl === 'legacy' ? new LegacyRedisQueue() : new RedisQueue($url);
while (hrtime(true) < $startAt) {
    usleep(200);
}
$ids = [];
$start = hrtime(true);
$end = $start + (int) ((float) $seconds * 1e9);
while (hrtime(true) < $end) {
    $task = $q->pop($name);
    if ($task === false) {
        fwrite(STDERR, "queue ran dry, or its lock timed out\n");
        exit(1);
    }
    $ids[] = $task['id'];
}
$elapsed = (hrtime(true) - $start) / 1e9;
echo json_encode(['pops_per_s' => count($ids) / $elapsed, 'ids' => $ids]), "\n";
