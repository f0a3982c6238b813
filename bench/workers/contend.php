<?php
/** Benchmark worker (PHP): $rounds critical sections on one lock.
 *  Each critical section does a non-atomic read-modify-write of a shared counter file
 *  and works (spins) until $csMs have passed since it got the lock.
 *  Usage: contend.php <impl> <url> <lock name> <counter file> <rounds> <start_at_ns> <cs_ms>
 *  impl: ferrolock | ferrolock-fair | legacy */
require __DIR__ . '/../../tests/php/legacy/LegacyRedis.php';
[, $impl, $url, $name, $counter, $rounds, $startAt, $csMs] = $argv;
putenv("REDIS_URL=$url");
$lock = match ($impl) {
    'ferrolock' => new RedisLock($url),
    'ferrolock-fair' => new RedisLock(['url' => $url, 'fair' => true]),
    'legacy' => new LegacyRedisLock(),
};
while (hrtime(true) < (int) $startAt) {
    usleep(500);
}
$waits = [];
$spans = [];
for ($i = 0; $i < (int) $rounds; $i++) {
    $t0 = hrtime(true);
    // legacy: default 100 ms polling, as the hand-rolled class ships
    if (!$lock->lock($name, 120, 30)) {
        fwrite(STDERR, "lock timed out\n");
        exit(1);
    }
    $t1 = hrtime(true);
    $value = (int) file_get_contents($counter);
    $end = $t1 + (int) ((float) $csMs * 1e6);
    while (hrtime(true) < $end) {
    }
    file_put_contents($counter, (string) ($value + 1));
    $t2 = hrtime(true);
    $lock->unlock($name);
    $waits[] = $t1 - $t0;
    $spans[] = [$t1, $t2];
}
echo json_encode(['waits' => $waits, 'spans' => $spans]), "\n";
