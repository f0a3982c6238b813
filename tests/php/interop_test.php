<?php
/** A legacy-style lock and RedisLock on the same name exclude each other. */
require __DIR__ . '/helpers.php';

$legacy = new LegacyRedisLock();
$ours = new RedisLock();

$n = uniq('interop');
assert($legacy->lock($n) === true);
assert($ours->lock($n) === false, 'RedisLock sees the legacy lock');
assert($ours->lock($n, 0.2) === false);
assert($legacy->unlock($n) === true);
assert($ours->lock($n) === true);
assert($legacy->lock($n) === false, 'the legacy lock sees RedisLock');
assert($ours->unlock($n) === true);
assert($legacy->lock($n) === true && $legacy->unlock($n));
ok('legacy and ferrolock locks exclude each other');

// RedisLock waiting on a legacy holder gets the lock when the legacy hold
// ends (a legacy DEL notifies nobody: $waitIntervalUs caps the re-check).
assert($legacy->lock($n) === true);
$r = legacy_redis();
$r->pexpire("Lock:$n", 200); // the legacy hold ends in 200 ms
$t = microtime(true);
assert($ours->lock($n, 5, 15, 20000) === true);
$waited = microtime(true) - $t;
assert($waited >= 0.15 && $waited < 2, "waited $waited");
$ours->unlock($n);
ok('RedisLock waits for a legacy holder');

// A legacy queue and RedisQueue share one queue.
$lq = new LegacyRedisQueue();
$q = new RedisQueue();
$n = uniq('shared');
assert($lq->enqueue($n, ['a', 'b']) === true);
assert($q->enqueue($n, ['b', 'c']) === true);
$t = $q->top($n, 10);
assert(array_column($t, 'id') === ['a', 'b', 'c'], var_export($t, true));
$first = $lq->pop($n);
assert($first['id'] === 'a');
assert($q->pop($n)['id'] === 'b');
assert($lq->pop($n, 5)[0]['id'] === 'c');
ok('legacy and ferrolock queues share one sorted set');
