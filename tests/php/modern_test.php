<?php
/** Ferrolock\Lock, Ferrolock\Queue, Ferrolock\Task: the Python API's semantics. */
require __DIR__ . '/helpers.php';

use Ferrolock\ConnectionException;
use Ferrolock\FerrolockException;
use Ferrolock\Lock;
use Ferrolock\LockException;
use Ferrolock\LockNotOwnedException;
use Ferrolock\Queue;
use Ferrolock\Task;

$r = legacy_redis();

// Basics: try once, owned/locked, token, release, NotOwned on a second release.
$n = uniq('modern');
$a = new Lock($n);
$b = new Lock($n);
assert($a->acquire(0) === true);
assert($r->get("Lock:$n") === $a->token(), 'key Lock:<name> holds the token');
assert(is_string($a->token()) && strlen($a->token()) >= 32);
assert($b->acquire(0) === false && $b->token() === null);
assert($a->owned() && !$b->owned() && $a->locked() && $b->locked());
$e = expect_throw(fn() => $b->release(), LockNotOwnedException::class);
assert($e instanceof LockException && $e instanceof FerrolockException && $e instanceof RuntimeException);
assert(str_contains($e->getMessage(), $n), $e->getMessage());
$a->release();
assert(!$a->locked() && !$a->owned() && $a->token() === null);
expect_throw(fn() => $a->release(), LockNotOwnedException::class);
assert($a->name() === $n && $a->ttl() === 30.0 && $a->timeout() === null);
ok('acquire/release/owned/locked/token');

// TTL in seconds as a float, no 5 s floor: 0.2 s expires in 0.2 s.
$n = uniq('ttl');
$a = new Lock($n, ttl: 0.2, autoRenew: false);
$b = new Lock($n, ['ttl' => 0.2, 'autoRenew' => false]);
assert($a->acquire(0));
$pttl = $r->pttl("Lock:$n");
assert($pttl > 100 && $pttl <= 200, "ttl 0.2 s, got $pttl ms");
usleep(300000);
assert($b->acquire(0) === true, 'expired after 0.2 s');
expect_throw(fn() => $a->release(), LockNotOwnedException::class);
assert($a->lost() === true);
$b->extend(5.5);
$pttl = $r->pttl("Lock:$n");
assert($pttl > 5000 && $pttl <= 5500, "extend(5.5): $pttl");
$b->extend();
assert($r->pttl("Lock:$n") <= 200, 'extend(): back to the lock ttl');
$b->release();
expect_throw(fn() => $b->extend(), LockNotOwnedException::class);
ok('ttl is float seconds without a floor; extend');

// Waiting: timeout 0 tries once, > 0 waits, null takes the lock's default.
$n = uniq('wait');
$holder = new Lock($n, ttl: 0.6, autoRenew: false);
assert($holder->acquire());
$w = new Lock($n, timeout: 0.2);
$t = microtime(true);
assert($w->acquire() === false);
$waited = microtime(true) - $t;
assert($waited >= 0.18 && $waited < 1.5, "default timeout 0.2 s: waited $waited");
$t = microtime(true);
assert($w->acquire(0) === false && microtime(true) - $t < 0.5, 'acquire(0) tries once');
$forever = new Lock($n); // timeout null: as long as it takes
$t = microtime(true);
assert($forever->acquire() === true, 'gets it when the holder expires');
assert(microtime(true) - $t < 3);
$forever->release();
ok('acquire timeouts');

// The holder's release wakes a waiter in another process at once.
$n = uniq('wake');
$holder = new Lock($n);
assert($holder->acquire());
$cmd = sprintf('%s %s %s', php_cmd(), escapeshellarg(__DIR__ . '/workers/modern_waiter.php'), escapeshellarg($n));
$proc = proc_open($cmd, [1 => ['pipe', 'w']], $pipes, null, ['REDIS_URL' => redis_url()]);
usleep(400000);
$released = microtime(true);
$holder->release();
$out = stream_get_contents($pipes[1]);
fclose($pipes[1]);
assert(proc_close($proc) === 0, $out);
[$got, $at] = explode(' ', trim($out));
assert($got === 'acquired', $out);
assert((float) $at - $released < 1.0, 'woken by the release, not by a poll: ' . ((float) $at - $released));
ok('a release wakes a waiter in another process');

// Auto-renewal (the default) keeps a short lock alive; off, it expires.
$n = uniq('renew');
$a = new Lock($n, ttl: 0.3);
assert($a->acquire(0));
usleep(900000);
assert($a->owned() && !$a->lost(), 'renewed past three TTLs');
$a->release();
$a = new Lock($n, ttl: 0.3, autoRenew: false);
assert($a->acquire(0));
usleep(500000);
assert(!$a->owned());
ok('autoRenew');

// Reentrant: nested acquires count up; Redis is released by the last release.
$n = uniq('reentrant');
$a = new Lock($n, reentrant: true);
assert($a->acquire(0) && $a->acquire(0) && $a->acquire());
$a->release();
$a->release();
assert($a->locked());
$a->release();
assert(!$a->locked());
$plain = new Lock($n);
assert($plain->acquire(0) && $plain->acquire(0) === false, 'not reentrant by default');
$plain->release();
ok('reentrant');

// Fencing tokens strictly increase across holders.
$n = uniq('fence');
$tokens = [];
foreach ([new Lock($n), new Lock($n, fair: true), new Lock($n)] as $l) {
    assert($l->acquire(0));
    $tokens[] = $l->fencingToken();
    $l->release();
    assert($l->fencingToken() === null);
}
assert($tokens[0] < $tokens[1] && $tokens[1] < $tokens[2], json_encode($tokens));
ok('fencing tokens');

// restore(): another object adopts the hold by its token (Laravel's
// restoreLock, a serialized Symfony key); a stale token is refused.
$n = uniq('restore');
$a = new Lock($n, ttl: 20);
assert($a->acquire(0));
$token = $a->token();
$b = Lock::restore($n, $token);
assert($b->token() === $token && $b->owned());
$b->release();
assert(!$a->locked());
$e = expect_throw(fn() => Lock::restore($n, $token), LockNotOwnedException::class);
assert(str_contains($e->getMessage(), 'not owned'), $e->getMessage());
expect_throw(fn() => Lock::restore($n, ''), ValueError::class);
$c = new Lock($n, prefix: 'Other:');
assert($c->acquire(0));
$d = Lock::restore($n, $c->token(), ['prefix' => 'Other:', 'ttl' => 5]);
assert($d->owned() && $d->ttl() === 5.0);
$d->release();
ok('restore()');

// forceRelease(): an operator frees any hold (legacy ones too).
$n = uniq('force');
$stuck = new Lock($n);
$op = new Lock($n);
assert($op->forceRelease() === false, 'free: nothing to end');
assert($stuck->acquire(0));
assert($op->forceRelease() === true && !$op->locked());
expect_throw(fn() => $stuck->release(), LockNotOwnedException::class);
$legacy = new LegacyRedisLock();
assert($legacy->lock($n));
assert($op->forceRelease() === true && $legacy->isLocking($n) === false);
ok('forceRelease()');

// The same key as RedisLock (and the legacy classes): they exclude each other.
$n = uniq('interop');
$old = new RedisLock();
$new = new Lock($n);
assert($old->lock($n) === true && $new->acquire(0) === false);
assert($old->unlock($n) && $new->acquire(0) && $old->lock($n) === false);
$new->release();
ok('Ferrolock\Lock and RedisLock share Lock:<name>');

// Connections: URL, connection array, url, the ini default.
$n = uniq('conn');
foreach ([
    ['connection' => redis_url()],
    ['url' => redis_url()],
    ['connection' => ['url' => redis_url(), 'timeout' => 2]],
    [],
] as $i => $opts) {
    $l = new Lock("$n-$i", $opts);
    assert($l->acquire(0) && $r->exists("Lock:$n-$i") === 1, json_encode($opts));
    $l->release();
}
$e = expect_throw(fn() => (new Lock($n, connection: 'redis://127.0.0.1:1/0?timeout=0.5&connect_timeout=0.5'))->acquire(0), ConnectionException::class);
assert($e instanceof FerrolockException);
expect_throw(fn() => new Lock($n, connection: 'http://x'), ValueError::class);
expect_throw(fn() => new Lock($n, connection: redis_url(), url: redis_url()), ValueError::class);
expect_throw(fn() => new Lock($n, connection: ['servers' => [redis_url()]]), ValueError::class);
expect_throw(fn() => new Lock($n, connection: ['url' => redis_url(), 'host' => 'h']), ValueError::class);
ok('connections');

// Bad input: ValueError or TypeError naming the argument, never a lock taken.
$n = uniq('bad');
foreach ([NAN, INF, -INF, -1, 0, 1e12, 0.0001] as $ttl) {
    $e = expect_throw(fn() => new Lock($n, ttl: $ttl), ValueError::class);
    assert(str_contains($e->getMessage(), 'ttl'), $e->getMessage());
    expect_throw(fn() => new Lock($n, ['ttl' => $ttl]), ValueError::class);
}
foreach ([NAN, INF, -INF, -1, 1e12] as $timeout) {
    $e = expect_throw(fn() => new Lock($n, timeout: $timeout), ValueError::class);
    assert(str_contains($e->getMessage(), 'timeout'), $e->getMessage());
    $e = expect_throw(fn() => (new Lock($n))->acquire($timeout), ValueError::class);
    assert(str_contains($e->getMessage(), 'Ferrolock\Lock::acquire(): timeout'), $e->getMessage());
    expect_throw(fn() => (new Lock($n))->extend($timeout), ValueError::class); // checked before ownership
}
assert($r->exists("Lock:$n") === 0, 'no lock taken by bad input');
$e = expect_throw(fn() => new Lock(''), ValueError::class);
assert(str_contains($e->getMessage(), 'lock name must not be empty'), $e->getMessage());
expect_throw(fn() => new Lock(str_repeat('x', 4097)), ValueError::class);
$e = expect_throw(fn() => new Lock($n, ttl: 'abc'), TypeError::class);
assert(str_contains($e->getMessage(), 'Argument #3 ($ttl)'), $e->getMessage());
$e = expect_throw(fn() => new Lock($n, ['ttl' => 'abc']), TypeError::class);
assert(str_contains($e->getMessage(), "'ttl'"), $e->getMessage());
$e = expect_throw(fn() => new Lock($n, ['tll' => 1]), ValueError::class);
assert(str_contains($e->getMessage(), 'unknown option "tll"'), $e->getMessage());
$e = expect_throw(fn() => new Lock($n, ['ttl' => 1], ttl: 2), ValueError::class);
assert(str_contains($e->getMessage(), 'given twice'), $e->getMessage());
expect_throw(fn() => new Lock($n, 'not an array'), TypeError::class);
expect_throw(fn() => new Lock($n, minReplicas: -1), ValueError::class);
expect_throw(fn() => new Lock($n, connection: 42), TypeError::class);
expect_throw(fn() => new Lock([]), TypeError::class);
expect_throw(fn() => new Lock(), ArgumentCountError::class);
expect_throw(fn() => new Lock($n, bogus: 1), Error::class); // PHP: unknown named parameter
assert((new Lock($n, ttl: '2.5'))->ttl() === 2.5, 'numeric strings, as PHP coerces them');
assert((new Lock($n, ['auto_renew' => 0, 'min_replicas' => 0]))->ttl() === 30.0, 'snake_case option keys');
ok('bad input to Lock: ValueError / TypeError');

// legacyInterop: a release passes the keys of the legacy pollers' turns (6
// keys, not 4) only while it is on: by default for the prefix Lock:, else
// as set (release_keys.php).
require_once __DIR__ . '/release_keys.php';
$n = uniq('interop');
foreach ([
    'default (Lock:)' => [new Lock($n), 6],
    'legacyInterop: false' => [new Lock($n, legacyInterop: false), 4],
    "'legacy_interop' => false" => [new Lock($n, ['legacy_interop' => false]), 4],
    'another prefix' => [new Lock($n, prefix: 'App:'), 4],
    'another prefix, legacyInterop: true' => [new Lock($n, prefix: 'App:', legacyInterop: true), 6],
] as $case => [$lock, $keys]) {
    assert($lock->acquire(0));
    $got = release_keys($r, fn() => $lock->release());
    assert($got === $keys, "$case: the release passed $got keys, not $keys");
}
$held = new Lock($n, legacyInterop: false);
assert($held->acquire(0));
$same = Lock::restore($n, $held->token(), legacyInterop: false);
assert(release_keys($r, fn() => $same->release()) === 4, 'restore takes it too');
foreach ([[[], 6], [['legacy_interop' => false], 4], [['legacy_interop' => null], 6]] as [$param, $keys]) {
    $old = new RedisLock($param ?: null);
    assert($old->lock($n, 0, 30));
    $got = release_keys($r, fn() => $old->unlock($n));
    assert($got === $keys, 'RedisLock ' . json_encode($param) . ": $got keys, not $keys");
}
ok('legacyInterop (legacy_interop): on for Lock:, off when set so');

// Queue: the Python API's shapes over Queue:<name>, shared with RedisQueue.
$n = uniq('q');
$q = new Queue($n);
assert($q->enqueue(['a', 'b', 'c']) === 3 && $q->enqueue('a') === 0, 'first enqueue wins');
assert($q->enqueue(7, delay: 60) === 1 && count($q) === 4 && $q->count() === 4);
$top = $q->top();
assert($top instanceof Task && $top->id() === 'a' && $top->receipt() === null);
assert(count($q->top(10)) === 3, 'delayed tasks are not due');
$t = $q->pop();
assert($t instanceof Task && $t->id() === 'a' && is_float($t->score()) && abs($t->score() - microtime(true)) < 5);
$list = $q->pop(10);
assert(is_array($list) && array_map(fn($t) => $t->id(), $list) === ['b', 'c']);
assert($q->pop() === null && $q->pop(3) === []);
$t = microtime(true);
assert($q->pop(wait: 0.2) === null && microtime(true) - $t >= 0.18, 'pop waits');
assert($q->dequeue('7', 1.0) === false && count($q) === 1);
$legacy = new RedisQueue();
assert($legacy->top($n) === false, 'not due');
assert($q->dequeue(7, $r->zScore("Queue:$n", '7')) === true && count($q) === 0);
assert($legacy->enqueue($n, 'x') === true && $q->pop()->id() === 'x', 'shared with RedisQueue');
ok('Queue enqueue/pop/top/dequeue/count');

$q->enqueue(['r1', 'r2']);
$task = $q->reserve();
assert($task->id() === 'r1' && is_string($task->receipt()) && $task->deadline() > microtime(true));
assert($task->attempts() === 1 && $task->payload() === null);
assert(count($q) === 1, 'a reserved task is not queued');
assert($task->ack() === true && $task->ack() === false);
$task = $q->reserve(visibility: 0.2);
assert($task->id() === 'r2' && $task->nack(0) === true);
$task = $q->reserve(wait: 1, visibility: 0.2);
assert($task->id() === 'r2' && $task->attempts() === 2);
// Back once its visibility ran out and its backoff (2 s at most for a second
// attempt, with the default 1 s base) passed.
$again = $q->reserve(wait: 5);
assert($again !== null && $again->id() === 'r2' && $again->attempts() === 3, 'back after its visibility ran out');
assert($task->ack() === false, 'the expired reservation is lost');
assert($task->touch() === false, 'and cannot be touched');
assert($again->ack() === true);
assert($q->reserve(wait: 0.1) === null && $q->reserve(3) === []);
expect_throw(fn() => new Task(), Exception::class);
ok('Queue reserve/ack/nack');

// What ack()/nack()/touch() mean for tasks that were not reserved, as in Python.
$q->enqueue(['p1']);
$q->enqueue(['p2' => 'data']);
$popped = $q->pop(2);
assert($popped[0]->ack() === true, 'popped: nothing left to do');
assert($popped[1]->nack(30) === true, 'popped: enqueued again');
assert($q->stats()['delayed'] === 1 && $r->zScore("Queue:$n", 'p2') > microtime(true) + 25);
assert($q->dequeue('p2', $r->zScore("Queue:$n", 'p2')) === true);
$q->enqueue(['p3' => 'kept']);
$p3 = $q->pop();
assert($p3->nack() === true && $q->pop()->payload() === 'kept', 'a popped task goes back with its payload');
$q->enqueue('peek');
$peek = $q->top();
assert($peek->nack() === false && $peek->touch() === false && $peek->attempts() === 0);
assert($peek->ack() === true && count($q) === 0, 'read: ack() dequeues it');
ok('ack/nack of popped and read tasks');

// Settings: snake_case keys, maxAttempts null (unlimited) or the default 10.
$n2 = uniq('qopts');
$q2 = new Queue($n2, ['prefix' => 'Jobs:', 'visibility' => 0.5, 'max_attempts' => 2, 'backoff_jitter' => 0,
                      'backoff_cap' => 0, 'min_replicas' => 0, 'lock_prefix' => 'L:'], url: redis_url());
$q2->enqueue('j');
assert($r->zScore("Jobs:$n2", 'j') !== false);
$j = $q2->reserve();
assert($j->deadline() - microtime(true) <= 0.5);
assert($j->nack() === true && $q2->reserve()->nack() === true, 'backoff_cap 0: due at once');
assert($q2->stats()['dead'] === 1, 'max_attempts 2');
foreach (['unlimited' => new Queue(uniq('unl'), maxAttempts: null, backoff: 0),
          'in options' => new Queue(uniq('unl'), ['maxAttempts' => null, 'backoff' => 0]),
          'default' => new Queue(uniq('ten'), backoff: 0)] as $what => $qq) {
    $qq->enqueue('t');
    for ($i = 1; $i <= 12 && ($t = $qq->reserve()) !== null; $i++) {
        assert($t->attempts() === $i);
        $t->nack();
    }
    $dead = $qq->stats()['dead'];
    assert($what === 'default' ? $dead === 1 && $i === 11 : $dead === 0 && $i === 13, "$what: $dead dead after $i");
}
ok('Queue settings: maxAttempts (null: unlimited), backoff, prefixes');

// The poison case: `bad` first; a consumer that acks all but `bad`.
$n = uniq('poison');
$pq = new Queue($n, visibility: 0.2, backoff: 0.3, backoffJitter: 0, maxAttempts: 3);
$pq->enqueue('bad', delay: -1);
$pq->enqueue(['good1', 'good2']);
$served = [];
$until = microtime(true) + 10;
while ($pq->stats()['dead'] === 0 && microtime(true) < $until) {
    $t = $pq->reserve(wait: 0.3);
    if ($t === null) {
        continue;
    }
    $served[] = $t->id() . '#' . $t->attempts();
    if ($t->id() !== 'bad') {
        assert($t->ack() === true);
    }
}
assert(array_slice($served, 0, 3) === ['bad#1', 'good1#1', 'good2#1'], var_export($served, true));
assert(array_values(array_filter($served, fn($s) => str_starts_with($s, 'bad'))) === ['bad#1', 'bad#2', 'bad#3']);
$dead = $pq->dead();
assert(count($dead) === 1 && $dead[0] instanceof Task && $dead[0]->id() === 'bad' && $dead[0]->attempts() === 3);
assert($dead[0]->ack() === false && $dead[0]->nack() === false && $dead[0]->receipt() === null);
$s = $pq->stats();
assert($s === ['due' => 0, 'delayed' => 0, 'in_flight' => 0, 'dead' => 1, 'oldest_due_age' => 0.0], var_export($s, true));
ok('poison task backs off, good ones served, then dead after maxAttempts');

// Dead letters: list with offset, retry some or all (attempts reset, payload kept), purge.
$n = uniq('dead');
$d = new Queue($n, maxAttempts: 1);
$d->enqueue(['a' => "A\0"], delay: -2);
$d->enqueue(['b', 'c'], delay: -1);
foreach ($d->reserve(10) as $t) {
    assert($t->nack() === true);
}
assert(array_map(fn($t) => $t->id(), $d->dead()) === ['a', 'b', 'c']);
assert($d->dead()[0]->payload() === "A\0" && abs($d->dead()[0]->score() - microtime(true)) < 5);
assert(array_map(fn($t) => $t->id(), $d->dead(1, offset: 1)) === ['b']);
assert($d->dead(10, 3) === []);
assert($d->retryDead('a') === 1);
$a = $d->reserve();
assert($a->id() === 'a' && $a->attempts() === 1 && $a->payload() === "A\0");
assert($a->ack());
assert($d->purgeDead(['b', 'zz']) === 1);
assert($d->retryDead() === 1 && $d->reserve()->id() === 'c');
assert($d->purgeDead() === 0 && $d->retryDead([]) === 0);
ok('dead letters: list, retry, purge');

// Payloads: binary safe, how enqueue() tells a list from id => payload, gone when done.
$n = uniq('payload');
$p = new Queue($n);
assert($p->enqueue(['a' => "\x00\xff", 'b' => '{"x":1}', 'empty' => '']) === 3, 'a string key: id => payload');
assert($p->enqueue([42 => 'forty-two', 0 => 'zero'], payloads: true) === 2, 'numeric ids with payloads');
assert($p->enqueue(['k1' => 'plain1', 'k2' => 'plain2'], payloads: false) === 2, 'payloads: false: values are ids');
assert($p->enqueue(['0', 'plain3']) === 1, 'a list: ids (0 is queued already, and keeps its payload)');
$e = expect_throw(fn() => $p->enqueue([5 => 'x', 9 => 'y']), ValueError::class);
assert(str_contains($e->getMessage(), 'Argument #1 ($ids)') && str_contains($e->getMessage(), 'payloads: true'), $e->getMessage());
expect_throw(fn() => $p->enqueue([1 => 'x', 0 => 'y']), ValueError::class);
$e = expect_throw(fn() => $p->enqueue(['ok' => 'x', 'bad' => 5]), TypeError::class);
assert(str_contains($e->getMessage(), 'the payload of id "bad"'), $e->getMessage());
expect_throw(fn() => $p->enqueue(['ok' => 'x', 'bad' => null]), TypeError::class);
expect_throw(fn() => $p->enqueue(['ok' => 'x', 'bad' => ['nested']]), TypeError::class);
expect_throw(fn() => $p->enqueue('x', payloads: true), ValueError::class);
expect_throw(fn() => $p->enqueue(['ok', null], payloads: false), TypeError::class);
expect_throw(fn() => $p->enqueue(['' => 'x']), ValueError::class);
assert(count($p) === 8 && $p->top(20) !== [] && !in_array('ok', array_map(fn($t) => $t->id(), $p->top(20))), 'nothing from the bad calls');
$byId = [];
foreach ($p->top(20) as $t) {
    $byId[$t->id()] = $t->payload();
}
$expected = ['0' => 'zero', '42' => 'forty-two', 'a' => "\x00\xff", 'b' => '{"x":1}', 'empty' => '',
             'plain1' => null, 'plain2' => null, 'plain3' => null];
ksort($byId, SORT_STRING);
ksort($expected, SORT_STRING);
assert($byId === $expected, var_export($byId, true));
assert($p->enqueue(['a' => 'newer']) === 0, 'a queued id keeps its score and takes the new payload');
assert($p->enqueue(['a']) === 0);
$legacyRows = array_column((new RedisQueue())->top($n, 20), null, 'id');
assert($legacyRows['a']['payload'] === 'newer' && array_keys($legacyRows['plain1']) === ['id', 'score'],
       'RedisQueue sees the payloads; ids without one keep the legacy shape');
foreach ($p->reserve(20) as $t) {
    assert($t->ack());
}
assert($r->keys("*Queue:$n:payloads") === [] && $p->stats()['in_flight'] === 0, 'payloads gone with the acks');
ok('payloads: list vs id => payload, binary safe, deleted when done');

// Heartbeats: run() keeps a reservation alive past 5x its visibility; touch().
$n = uniq('beat');
$h = new Queue($n, visibility: 0.3, backoff: 0);
$other = new Queue($n, visibility: 0.3);
$h->enqueue(['long', 'short']);
$long = $h->reserve();
$steals = [];
$result = $long->run(function (Task $t) use ($other, &$steals, $long) {
    assert($t === $long, 'the task itself is passed');
    $until = microtime(true) + 1.5;   // 5x its visibility
    while (microtime(true) < $until) {
        $got = $other->reserve(wait: 0.1);
        if ($got !== null) {
            $steals[] = $got->id();
            $got->ack();
        }
    }
    return 'done';
});
assert($result === 'done');
assert($steals === ['short'], 'long was never handed out again: ' . json_encode($steals));
assert($long->ack() === false, 'run() acked it');
assert($h->stats() === ['due' => 0, 'delayed' => 0, 'in_flight' => 0, 'dead' => 0, 'oldest_due_age' => 0.0]);
$h->enqueue('touched');
$t = $h->reserve();
for ($i = 0; $i < 5; $i++) {
    usleep(150000);
    assert($t->touch() === true);
}
assert($t->touch(10) === true && $t->deadline() < microtime(true) + 1, 'deadline() is as of the reserve');
assert($other->reserve() === null, 'still ours');
assert($t->ack() === true && $t->touch() === false);
// run(): a throwing callback nacks (backoff) and the exception goes on.
$h->enqueue('fails');
$t = $h->reserve();
$e = expect_throw(fn() => $t->run(function () { throw new DomainException('nope', 7); }), DomainException::class);
assert($e->getMessage() === 'nope' && $e->getCode() === 7, 'the same exception');
$back = $h->reserve(wait: 2);
assert($back !== null && $back->id() === 'fails' && $back->attempts() === 2, 'nacked, due again after its backoff');
assert($back->run(fn() => 42) === 42 && $h->stats()['in_flight'] === 0);
$h->enqueue('popped');
assert($h->pop()->run(fn($t) => $t->id()) === 'popped', 'run() on a popped task');
expect_throw(fn() => $h->enqueue('x') + 1 && $h->reserve()->run('no such function'), TypeError::class);
ok('heartbeats: run() past 5x the visibility, touch(), a throwing callback');

// Batch reserve; one id never in flight twice; the second run after the ack.
$n = uniq('batch');
$b = new Queue($n);
$b->enqueue(['a', 'b', 'c']);
$got = $b->reserve(2);
assert(array_map(fn($t) => $t->id(), $got) === ['a', 'b'] && $got[0]->receipt() !== $got[1]->receipt());
assert(array_map(fn($t) => $t->id(), $b->reserve(5)) === ['c'] && $b->reserve(5) === []);
assert($b->enqueue('a') === 1, 'an id in flight counts as new');
assert($b->reserve() === null, 'a is in flight: not handed out twice');
assert($got[0]->ack() === true);
$again = $b->reserve();
assert($again->id() === 'a' && $again->attempts() === 1, 'the second run, after the ack');
ok('batch reserve; one id in flight');

// Legacy RedisQueue code (the extension's and a hand-written one) on the same queue.
$n = uniq('legacy');
$mq = new Queue($n);
$ext = new RedisQueue();
$hand = new LegacyRedisQueue();
$mq->enqueue(['job' => 'data']);
$job = $ext->reserve($n);
assert($job['payload'] === 'data' && $job['attempts'] === 1);
$hand->enqueue($n, ['job', 'other']);        // a legacy producer, unaware of reservations
$next = $mq->reserve();
assert($next->id() === 'other', 'the id in flight is not handed out twice');
assert($hand->pop($n) === false && $ext->pop($n) === false, 'nothing due for the legacy consumers either');
assert($ext->ack($n, 'job', $job['receipt']) && $next->ack());
assert($hand->pop($n)['id'] === 'job', 'the second run, for a hand-written consumer');
$ext->enqueueWithPayloads($n, ['e' => 'from RedisQueue']);
$e = $mq->reserve();
assert($e->id() === 'e' && $e->payload() === 'from RedisQueue' && $e->ack());
ok('legacy RedisQueue code and Ferrolock\Queue on one queue');

// The worker loop: failures nacked, dead at the last attempt, maxJobs, stop().
$n = uniq('work');
$w = new Queue($n, backoff: 0.01, maxAttempts: 2);
$w->enqueue(['ok1', 'bad', 'ok2' => 'payload'], payloads: false);
$w->enqueue(['ok2' => 'payload']);
$runs = [];
$done = $w->work(function (Task $task) use (&$runs) {
    $runs[] = $task->id() . '#' . $task->attempts() . ($task->payload() === null ? '' : '+' . $task->payload());
    if ($task->id() === 'bad') {
        throw new RuntimeException('bad task');
    }
}, wait: 1);
sort($runs);
assert($runs === ['bad#1', 'bad#2', 'ok1#1', 'ok2#1+payload', 'payload#1'], var_export($runs, true));
assert($done === 5);
assert(array_map(fn($t) => $t->id(), $w->dead()) === ['bad']);
$n = uniq('work-max');
$w = new Queue($n);
$w->enqueue(['a', 'b', 'c', 'd']);
assert($w->work(fn($t) => null, wait: 0, maxJobs: 2) === 2);
assert(count($w) === 2 && $w->stats()['in_flight'] === 0);
assert($w->work(function (Task $t) { Queue::stop(); }, wait: 0) === 1, 'stop() from the handler');
assert(count($w) === 1 && $w->stats()['in_flight'] === 0, 'the task at hand was acked');
assert($w->work(fn($t) => null, wait: 0, visibility: 5, heartbeat: false) === 1 && count($w) === 0);
$t = microtime(true);
assert($w->work(fn($t) => null, wait: 0.3) === 0 && microtime(true) - $t >= 0.25, 'waits for work');
expect_throw(fn() => $w->work('no such function'), TypeError::class);
$e = expect_throw(fn() => $w->work(fn($t) => null, wait: -1), ValueError::class);
assert(str_contains($e->getMessage(), 'wait'), $e->getMessage());
$e = expect_throw(fn() => $w->work(fn($t) => null, maxJobs: 0), ValueError::class);
assert(str_contains($e->getMessage(), 'maxJobs'), $e->getMessage());
expect_throw(fn() => $w->work(fn($t) => null, visibility: 0), ValueError::class);
expect_throw(fn() => $w->work(fn($t) => null, heartbeat: []), TypeError::class);
ok('work(): failures nacked, dead at the last attempt, maxJobs, stop()');

// Bad input: ValueError or TypeError naming the argument; nothing lost or taken.
$n = uniq('qbad');
$q = new Queue($n);
$q->enqueue('keep');
foreach ([NAN, INF, -1] as $bad) {
    expect_throw(fn() => $q->pop(wait: $bad), ValueError::class);
    $e = expect_throw(fn() => $q->reserve(visibility: $bad), ValueError::class);
    assert(str_contains($e->getMessage(), 'Ferrolock\Queue::reserve(): visibility'), $e->getMessage());
    expect_throw(fn() => $q->reserve(wait: $bad), ValueError::class);
    expect_throw(fn() => new Queue($n, visibility: $bad), ValueError::class);
    expect_throw(fn() => new Queue($n, backoff: $bad), ValueError::class);
    expect_throw(fn() => new Queue($n, backoffCap: $bad), ValueError::class);
    expect_throw(fn() => new Queue($n, backoffJitter: $bad), ValueError::class);
}
expect_throw(fn() => $q->enqueue('x', NAN), ValueError::class);
expect_throw(fn() => $q->enqueue(''), ValueError::class);
expect_throw(fn() => $q->enqueue([[]]), TypeError::class);
expect_throw(fn() => $q->enqueue(null), TypeError::class);
expect_throw(fn() => $q->enqueue(true), TypeError::class);
$e = expect_throw(fn() => $q->pop(0), ValueError::class);
assert(str_contains($e->getMessage(), 'count must be >= 1'), $e->getMessage());
expect_throw(fn() => $q->reserve(0), ValueError::class);
expect_throw(fn() => $q->top(-1), ValueError::class);
expect_throw(fn() => $q->dequeue('x', NAN), ValueError::class);
expect_throw(fn() => $q->dead(0), ValueError::class);
$e = expect_throw(fn() => $q->dead(1, -1), ValueError::class);
assert(str_contains($e->getMessage(), 'offset'), $e->getMessage());
expect_throw(fn() => $q->retryDead(['']), ValueError::class);
expect_throw(fn() => $q->purgeDead(new stdClass()), TypeError::class);
$held = $q->reserve();
$e = expect_throw(fn() => $held->nack(NAN), ValueError::class);
assert(str_contains($e->getMessage(), 'Ferrolock\Task::nack(): delay'), $e->getMessage());
expect_throw(fn() => $held->touch(-1), ValueError::class);
expect_throw(fn() => $held->touch('soon'), TypeError::class);
expect_throw(fn() => $held->run(42), TypeError::class);
assert($held->id() === 'keep' && $held->ack() === true, 'nothing lost by the bad calls');
expect_throw(fn() => new Queue(''), ValueError::class);
expect_throw(fn() => new Queue($n, ['visibilty' => 1]), ValueError::class);
expect_throw(fn() => new Queue($n, maxAttempts: 0), ValueError::class);
$e = expect_throw(fn() => new Queue($n, maxAttempts: 'many'), TypeError::class);
assert(str_contains($e->getMessage(), 'Argument #8 ($maxAttempts)'), $e->getMessage());
expect_throw(fn() => new Queue($n, ['maxAttempts' => 1.5]), TypeError::class);
$e = expect_throw(fn() => new Queue($n, ['max_attempts' => 2], maxAttempts: 3), ValueError::class);
assert(str_contains($e->getMessage(), 'given twice'), $e->getMessage());
expect_throw(fn() => new Queue($n, backoffJitter: 1.5), ValueError::class);
expect_throw(fn() => new Queue($n, minReplicas: -1), ValueError::class);
assert($q->stats()['in_flight'] === 0 && count($q) === 0 && $q->stats()['dead'] === 0);
ok('Queue settings and bad input');

// Hostile input to every method: only the documented errors, no crash.
$values = [null, true, -1, 0, 1.5, NAN, INF, -INF, PHP_INT_MAX, '', 'x', '1e3', [], [[]], new stdClass(), STDIN];
$lock = new Lock(uniq('hostile'));
assert($lock->acquire(0)); // extend() works on it
$queue = new Queue(uniq('hostile'), backoff: 0);
$due = function (): Queue {
    $q = new Queue(uniq('due'));
    $q->enqueue('w');
    return $q;
};
$calls = 0;
$outcomes = [];
foreach ($values as $v) {
    $heldQueue = new Queue(uniq('held'));
    $heldQueue->enqueue('held');
    $held = $heldQueue->reserve(visibility: 60);
    foreach ([
        fn() => new Lock($v), fn() => new Lock('h', $v), fn() => new Lock('h', ttl: $v),
        fn() => new Lock('h', timeout: $v), fn() => new Lock('h', autoRenew: $v),
        fn() => new Lock('h', connection: $v), fn() => new Lock('h', prefix: $v),
        fn() => new Lock('h', ['ttl' => $v]), fn() => new Lock('h', ['connection' => $v]),
        fn() => (new Lock(uniq('h')))->acquire($v), fn() => $lock->extend($v), fn() => Lock::restore('h', $v),
        fn() => new Queue($v), fn() => new Queue('h', $v), fn() => new Queue('h', visibility: $v),
        fn() => new Queue('h', maxAttempts: $v), fn() => new Queue('h', ['maxAttempts' => $v]),
        fn() => new Queue('h', backoff: $v), fn() => new Queue('h', backoffJitter: $v),
        fn() => new Queue('h', minReplicas: $v),
        fn() => $queue->enqueue($v), fn() => $queue->enqueue('x', $v), fn() => $queue->enqueue($v, payloads: true),
        fn() => $queue->enqueue(['k' => $v]), fn() => $queue->enqueue(['x'], payloads: $v), fn() => $queue->pop($v),
        // (waits: on a queue of their own with a task due, so that a long one
        // returns at once; on $queue, 'w' may be in flight from an earlier call)
        fn() => $due()->pop(1, $v), fn() => $queue->top($v), fn() => $queue->dequeue($v, 1.0),
        fn() => $queue->dequeue('x', $v), fn() => $due()->reserve($v),
        fn() => $due()->reserve(1, $v), fn() => $queue->reserve(1, 0, $v),
        fn() => $queue->dead($v), fn() => $queue->dead(1, $v), fn() => $queue->retryDead($v),
        fn() => $queue->purgeDead($v),
        fn() => $queue->work($v, wait: 0), fn() => $due()->work(fn($t) => null, $v, maxJobs: 1),
        fn() => $queue->work(fn($t) => null, 0, $v), fn() => $queue->work(fn($t) => null, 0, heartbeat: $v),
        fn() => $queue->work(fn($t) => null, 0, maxJobs: $v),
        fn() => $held->nack($v), fn() => $held->touch($v), fn() => $held->run($v),
    ] as $call) {
        $calls++;
        try {
            $call();
            $outcomes['ok'] = ($outcomes['ok'] ?? 0) + 1;
        } catch (TypeError | ValueError | FerrolockException $e) {
            $outcomes[get_class($e)] = ($outcomes[get_class($e)] ?? 0) + 1;
        }
    }
}
echo json_encode($outcomes), "\n";
assert(!isset($outcomes['Ferrolock\ConnectionException']), 'no connection trouble from bad input');
ok("survived $calls hostile calls to the modern classes");
