<?php
/** A legacy-style lock and RedisLock on the same name exclude each other. */
require __DIR__ . '/../php/helpers.php';

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

// Float names and ids are converted as PHP's (string) does (the `precision`
// ini), so a legacy "Lock:$name" and RedisLock($name) are the same key.
$r = legacy_redis();
foreach ([14, 17, -1] as $precision) {
    ini_set('precision', (string) $precision);
    $f = random_int(1, 1 << 30) + 1 / 3; // PHP: 14 significant digits by default
    assert($legacy->lock($f) === true);
    assert($ours->lock($f) === false, "RedisLock sees the legacy lock on float name $f");
    assert($legacy->unlock($f) === true);
    assert($ours->lock($f) === true);
    assert($r->exists("Lock:$f") === 1, "key Lock:$f");
    assert($legacy->lock($f) === false, "the legacy lock sees RedisLock on float name $f");
    assert($ours->isLocking((string) $f) === true, 'the float and its string are one name');
    assert($ours->unlock($f) === true);
}
ini_restore('precision');
$p = uniq('fl') . ':';
$prefixed = new RedisLock(['prefix' => $p]);
foreach ([0.1 + 0.2, 1e20, INF, -INF, NAN, -0.0, 2.5, true, 42] as $v) {
    assert($prefixed->lock($v) === true);
    assert($r->exists($p . $v) === 1, "key $p$v for " . var_export($v, true));
    assert($prefixed->unlock($v) === true);
}
$n = uniq('float-ids');
$id = random_int(1, 1 << 30) + 1 / 3;
assert($q->enqueue($n, [$id, 0.1 + 0.2]) === true);
assert($lq->enqueue($n, ["$id", '0.3']) === true); // already queued: no new member
assert($r->zCard("Queue:$n") === 2);
assert($r->zScore("Queue:$n", "$id") !== false && $r->zScore("Queue:$n", '0.3') !== false);
assert($q->dequeue($n, $id, $r->zScore("Queue:$n", "$id")) === true);
$r->del("Queue:$n");
ok('float names and ids convert as PHP does');
