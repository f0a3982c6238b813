<?php
/** Benchmark worker (PHP): $rounds critical sections on one lock.
 *  Each critical section does a non-atomic read-modify-write of a shared counter file
 *  (opened once, fixed width: one read and one write) and works (spins) until $csMs have
 *  passed since it got the lock.
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
// Opened once, unbuffered: the critical section should cost 2 ms of work, not file opens.
$fd = fopen($counter, 'r+');
stream_set_read_buffer($fd, 0);
stream_set_write_buffer($fd, 0);
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
    rewind($fd);
    $value = (int) fread($fd, 32); // deliberately non-atomic
    $end = $t1 + (int) ((float) $csMs * 1e6);
    while (hrtime(true) < $end) {
    }
    rewind($fd);
    fwrite($fd, str_pad((string) ($value + 1), 32));
    $t2 = hrtime(true);
    $lock->unlock($name);
    $waits[] = $t1 - $t0;
    $spans[] = [$t1, $t2];
}
echo json_encode(['waits' => $waits, 'spans' => $spans]), "\n";
fflush(STDOUT);
stream_get_contents(STDIN); // stay until every worker is done (the runner closes stdin)
