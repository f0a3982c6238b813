<?php
/** RedisQueue's production extras: attempts, backoff, dead letters, touch,
 *  payloads, batch reserve, one id in flight, stats, the worker loop, and
 *  legacy RedisQueue code on the same queue. */
require __DIR__ . '/helpers.php';

$r = legacy_redis();
$q = new RedisQueue(['url' => redis_url(), 'visibility' => 0.2, 'backoff' => 0.3,
                     'backoff_jitter' => 0, 'max_attempts' => 3]);

// The poison case: `bad` first, a consumer that acks all but `bad`.
$n = uniq('poison');
$q->enqueue($n, 'bad', 10, -1);
$q->enqueue($n, ['good1', 'good2']);
$served = [];
$until = microtime(true) + 10;
while ($q->stats($n)['dead'] === 0 && microtime(true) < $until) {
    $t = $q->reserve($n, null, 0.3);
    if ($t === false) {
        continue;
    }
    $served[] = $t['id'] . '#' . $t['attempts'];
    if ($t['id'] !== 'bad') {
        assert($q->ack($n, $t['id'], $t['receipt']) === true);
    }
}
assert(array_slice($served, 0, 3) === ['bad#1', 'good1#1', 'good2#1'], var_export($served, true));
assert(array_values(array_filter($served, fn($s) => str_starts_with($s, 'bad'))) === ['bad#1', 'bad#2', 'bad#3']);
$dead = $q->dead($n);
assert(count($dead) === 1 && $dead[0]['id'] === 'bad' && $dead[0]['attempts'] === 3);
$s = $q->stats($n);
assert($s['due'] === 0 && $s['delayed'] === 0 && $s['in_flight'] === 0 && $s['dead'] === 1, var_export($s, true));
assert(is_float($s['oldest_due_age']));
ok('poison task backs off, good ones served, then dead');

// Dead letters: retry some or all (attempts reset), purge.
$d = new RedisQueue(['max_attempts' => 1]);
$n = uniq('dead');
$d->enqueueWithPayloads($n, ['a' => "A\0"], 10, -2);
$d->enqueue($n, ['b', 'c'], 10, -1);
foreach ($d->reserve($n, 30, 0, 10) as $t) {
    assert($d->nack($n, $t['id'], $t['receipt']) === true);
}
assert(array_column($d->dead($n), 'id') === ['a', 'b', 'c']);
assert($d->dead($n)[0]['payload'] === "A\0");
assert(array_column($d->dead($n, 1, 1), 'id') === ['b']);
assert($d->retryDead($n, 'a') === 1);
$a = $d->reserve($n);
assert($a['id'] === 'a' && $a['attempts'] === 1 && $a['payload'] === "A\0");
assert($d->ack($n, 'a', $a['receipt']));
assert($d->purgeDead($n, ['b', 'zz']) === 1);
assert($d->retryDead($n) === 1);
assert($d->reserve($n)['id'] === 'c');
assert($d->purgeDead($n) === 0);
ok('dead letters: list, retry, purge');

// nack: backoff unless a delay is given; an explicit delay still counts the attempt.
$b = new RedisQueue(['backoff' => 5, 'backoff_jitter' => 0]);
$n = uniq('nack');
$b->enqueue($n, 't');
$t = $b->reserve($n);
assert($b->nack($n, 't', $t['receipt']) === true);
assert($b->top($n) === false && $b->stats($n)['delayed'] === 1);
$due = $r->zScore("Queue:$n", 't') - microtime(true);
assert($due > 4 && $due <= 5.1, "backoff: $due");
$b->dequeue($n, 't', $r->zScore("Queue:$n", 't'));
$b->enqueue($n, 'u');
$u = $b->reserve($n);
assert($b->nack($n, 'u', $u['receipt'], 0) === true);
assert($b->reserve($n)['attempts'] === 2);
ok('nack: backoff or an explicit delay');

// touch keeps a reservation; a receipt of another task is refused.
$t1 = new RedisQueue(['backoff' => 0]);
$n = uniq('touch');
$t1->enqueue($n, ['a', 'b']);
$a = $t1->reserve($n, 0.3);
$bb = $t1->reserve($n, 0.3);
for ($i = 0; $i < 5; $i++) {   // 5 × 0.2 s: three times its visibility
    usleep(200000);
    assert($t1->touch($n, 'a', $a['receipt']) === true);
}
assert($t1->touch($n, 'a', $a['receipt'], 10) === true);
$again = $t1->reserve($n);   // b was not touched: it came back; a is still ours
assert($again['id'] === 'b' && $again['attempts'] === 2, var_export($again, true));
assert($t1->reserve($n) === false);
expect_warning(fn() => $t1->ack($n, 'a', $again['receipt']), false, 'receipt');
expect_warning(fn() => $t1->touch($n, 'a', 'garbage'), false, 'receipt');
expect_warning(fn() => $t1->touch($n, 'a', $a['receipt'], -1), false, 'visibility');
assert($t1->ack($n, 'a', $a['receipt']) === true, 'nothing lost by the bad calls');
assert($t1->touch($n, 'a', $a['receipt']) === false, 'acked: not ours');
ok('touch; a receipt of another task refused');

// Payloads: binary safe, with pop/reserve/top, gone when done; ids without payloads as before.
$p = new RedisQueue();
$n = uniq('payload');
assert($p->enqueueWithPayloads($n, ['a' => "\x00\xff", 'b' => '{"x":1}', 7 => '']) === true);
$p->enqueue($n, 'plain');
$top = $p->top($n, 10);
assert(array_column($top, 'id') === ['7', 'a', 'b', 'plain'] || count($top) === 4);
$byId = array_column($top, null, 'id');
assert($byId['a']['payload'] === "\x00\xff" && $byId['7']['payload'] === '' && !isset($byId['plain']['payload']));
assert(array_keys($byId['plain']) === ['id', 'score'], 'legacy shape for ids without payloads');
$popped = $p->pop($n, 10);
assert(count($popped) === 4);
assert($r->keys("*Queue:$n:payloads") === [], 'payloads gone with the pop');
expect_throw(fn() => $p->enqueueWithPayloads($n, ['x' => [1]]), TypeError::class);
expect_throw(fn() => $p->enqueueWithPayloads($n, 'x'), TypeError::class);
expect_warning(fn() => $p->enqueueWithPayloads($n, []), false, 'no task id');
assert($p->len($n) === 0, 'nothing from the bad calls');
ok('payloads');

// Batch reserve, one id never in flight twice.
$n = uniq('batch');
$p->enqueue($n, ['a', 'b', 'c']);
$got = $p->reserve($n, 30, 0, 2);
assert(array_column($got, 'id') === ['a', 'b'] && count(array_unique(array_column($got, 'receipt'))) === 2);
assert($p->reserve($n, 30, 0, 5)[0]['id'] === 'c');
assert($p->reserve($n, 30, 0, 5) === []);
expect_warning(fn() => $p->reserve($n, 30, 0, 0), [], 'count');
expect_warning(fn() => $p->reserve($n, -1), false, 'visibility');
assert($p->enqueue($n, 'a') === true);
assert($p->reserve($n) === false, 'a is in flight: not handed out twice');
assert($p->ack($n, 'a', $got[0]['receipt']) === true);
$again = $p->reserve($n);
assert($again['id'] === 'a' && $again['attempts'] === 1, 'the second run, after the ack');
ok('batch reserve; one id in flight');

// Legacy RedisQueue code on the same queue as the new features.
$legacy = new LegacyRedisQueue();
$n = uniq('legacy');
$p->enqueueWithPayloads($n, ['job' => 'data']);
$job = $p->reserve($n);
assert($job['payload'] === 'data');
$legacy->enqueue($n, ['job', 'other']);         // a legacy producer, unaware of reservations
$next = $p->reserve($n);
assert($next['id'] === 'other', 'the id in flight is not handed out twice');
assert($legacy->pop($n) === false, 'nothing due for the legacy consumer either');
assert($p->ack($n, 'job', $job['receipt']));
assert($p->ack($n, 'other', $next['receipt']));
$second = $legacy->pop($n);                     // the second run of job, for a legacy consumer
assert($second['id'] === 'job');
assert($q->enqueue($n, 'plain') === true && $legacy->pop($n)['id'] === 'plain');
ok('legacy RedisQueue code and the new features on one queue');

// The worker loop: one round trip per job, failures nacked, max_jobs, wait.
$w = new RedisQueue(['backoff' => 0.01, 'max_attempts' => 2]);
$n = uniq('work');
$w->enqueue($n, ['ok1', 'bad', 'ok2']);
$runs = [];
$done = $w->work($n, function (array $task) use (&$runs) {
    $runs[] = $task['id'] . '#' . $task['attempts'];
    if ($task['id'] === 'bad') {
        throw new RuntimeException('bad task');
    }
}, ['wait' => 1]);
sort($runs);
assert($runs === ['bad#1', 'bad#2', 'ok1#1', 'ok2#1'], var_export($runs, true));
assert($done === 4);
assert(array_column($w->dead($n), 'id') === ['bad']);
$n = uniq('work-max');
$w->enqueue($n, ['a', 'b', 'c']);
assert($w->work($n, fn($t) => null, ['max_jobs' => 2, 'wait' => 0]) === 2);
assert($w->len($n) === 1 && $w->stats($n)['in_flight'] === 0);
expect_throw(fn() => $w->work($n, 'no such function'), TypeError::class);
expect_warning(fn() => $w->work($n, fn($t) => null, ['nope' => 1]), 0, 'unknown option');
expect_warning(fn() => $w->work($n, fn($t) => null, ['wait' => -1]), 0, 'wait');
ok('work(): failures nacked, dead at the last attempt, max_jobs');
