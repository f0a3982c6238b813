<?php
/** Benchmark worker (PHP): $rounds critical sections on one lock; the twin of contend.py
 *  (same arguments, protocol and output; see there).
 *  sleep: usleep(cs_ms) then GET + SET of a counter key through phpredis;
 *  busy: non-atomic read-modify-write of a counter file, then spin until cs_ms have passed.
 *  Usage: contend.php <impl> <url> <lock name> <rounds> <sleep|busy> <cs_ms> <pause_ms> <counter>
 *  impl: ferrolock | ferrolock-fair | legacy */
require __DIR__ . '/common.php';
[, $impl, $url, $name, $rounds, $mode, $csMs, $pauseMs, $counter] = $argv;
putenv("REDIS_URL=$url");
$lock = match ($impl) {
    'ferrolock' => new RedisLock($url),
    'ferrolock-fair' => new RedisLock(['url' => $url, 'fair' => true]),
    'legacy' => new LegacyRedisLock(),
};
$csNs = (int) ((float) $csMs * 1e6);
$pauseUs = (int) ((float) $pauseMs * 1000);
if ($mode === 'sleep') {
    $r = bench_phpredis($url);
    $r->get($counter); // connected before the start
} else {
    // Opened once, unbuffered: the critical section should cost its work, not file opens.
    $fd = fopen($counter, 'r+');
    stream_set_read_buffer($fd, 0);
    stream_set_write_buffer($fd, 0);
}
if ($lock instanceof RedisLock) {
    $lock->isLocking("$name-warm-up"); // connected before the start
}
echo "ready\n";
fflush(STDOUT);
$startAt = (int) fgets(STDIN);
while (hrtime(true) < $startAt) {
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
    if ($mode === 'sleep') {
        usleep(intdiv($csNs, 1000));
        $value = (int) $r->get($counter); // deliberately non-atomic
        $r->set($counter, (string) ($value + 1));
    } else {
        rewind($fd);
        $value = (int) fread($fd, 32); // deliberately non-atomic
        $end = $t1 + $csNs;
        while (hrtime(true) < $end) {
        }
        rewind($fd);
        fwrite($fd, str_pad((string) ($value + 1), 32));
    }
    $t2 = hrtime(true);
    $lock->unlock($name);
    $waits[] = $t1 - $t0;
    $spans[] = [$t1, $t2];
    if ($pauseUs > 0) {
        usleep($pauseUs);
    }
}
echo json_encode(['waits' => $waits, 'spans' => $spans]), "\n";
fflush(STDOUT);
stream_get_contents(STDIN); // stay until every worker is done (the runner closes stdin)
