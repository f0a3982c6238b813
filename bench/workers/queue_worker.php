<?php
/**
 * Benchmark queue consumer (PHP), with queue_worker.py's protocol: prints
 * `ready` once connected, reads the start instant (monotonic ns: hrtime is
 * the same clock as Python's time.monotonic_ns on Linux) from stdin, then
 * consumes until the runner kills it; each job appends a record (enqueue
 * instant, start instant: two little-endian 64-bit integers) to
 * $BENCH_JOBS_FILE, as qjobs.record does.
 * Usage: queue_worker.php ferrolock-work-php|legacy-pop-php <url> <queue name>
 */
require __DIR__ . '/../../tests/php/legacy/LegacyRedis.php';
[, $system, $url, $name] = $argv;
putenv("REDIS_URL=$url");
$file = getenv('BENCH_JOBS_FILE');

function record(string $file, string $id): void {
    $started = hrtime(true);
    [, $enqueued] = explode(':', $id) + [1 => '0'];
    file_put_contents($file, pack('P2', (int) $enqueued, $started), FILE_APPEND);
}

function wait_for_start(): void {
    echo "ready\n";
    fflush(STDOUT);
    $startAt = (int) fgets(STDIN);
    while (hrtime(true) < $startAt) {
        usleep(200);
    }
}

if ($system === 'ferrolock-work-php') {
    $q = new RedisQueue($url);
    $q->len($name);
    wait_for_start();
    $q->work($name, fn(array $task) => record($file, $task['id']));
} elseif ($system === 'legacy-pop-php') {
    $q = new LegacyRedisQueue();
    legacy_redis()->ping();
    wait_for_start();
    while (true) {
        $task = $q->pop($name);
        if ($task === false) {
            usleep(1000);
            continue;
        }
        record($file, $task['id']);
    }
} else {
    fwrite(STDERR, "unknown system $system\n");
    exit(2);
}
