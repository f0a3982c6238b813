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
$seven = $legacy->top($n) ?: null;
assert($seven === false || $seven === null, 'not due');
assert($q->dequeue(7, $r->zScore("Queue:$n", '7')) === true && count($q) === 0);
assert($legacy->enqueue($n, 'x') === true && $q->pop()->id() === 'x', 'shared with RedisQueue');
ok('Queue enqueue/pop/top/dequeue/count');

$q->enqueue(['r1', 'r2']);
$task = $q->reserve();
assert($task->id() === 'r1' && is_string($task->receipt()) && $task->deadline() > microtime(true));
assert(count($q) === 1, 'a reserved task is not queued');
assert($task->ack() === true && $task->ack() === false);
$task = $q->reserve(visibility: 0.2);
assert($task->id() === 'r2' && $task->nack(0) === true);
$task = $q->reserve(wait: 1, visibility: 0.2);
assert($task->id() === 'r2');
// Back once its visibility ran out and its backoff (2 s at most for a second
// attempt, with the default 1 s base) passed.
$again = $q->reserve(wait: 5);
assert($again !== null && $again->id() === 'r2', 'back after its visibility ran out');
assert($task->ack() === false, 'the expired reservation is lost');
assert($again->ack() === true);
assert($q->reserve(wait: 0.1) === null);
$q->enqueue('p');
$popped = $q->pop();
expect_throw(fn() => $popped->ack(), LogicException::class);
expect_throw(fn() => $popped->nack(), LogicException::class);
expect_throw(fn() => new Task(), Exception::class);
ok('Queue reserve/ack/nack');

// Queue settings and bad input.
$n2 = uniq('qopts');
$q2 = new Queue($n2, ['prefix' => 'Jobs:', 'visibility' => 0.5], url: redis_url());
$q2->enqueue('j');
assert($r->zScore("Jobs:$n2", 'j') !== false);
$j = $q2->reserve();
assert($j->deadline() - microtime(true) <= 0.5);
$j->ack();
foreach ([NAN, INF, -1] as $bad) {
    expect_throw(fn() => $q->pop(wait: $bad), ValueError::class);
    expect_throw(fn() => $q->reserve(visibility: $bad), ValueError::class);
    expect_throw(fn() => new Queue($n, visibility: $bad), ValueError::class);
}
expect_throw(fn() => $q->enqueue('x', NAN), ValueError::class);
expect_throw(fn() => $q->enqueue(''), ValueError::class);
expect_throw(fn() => $q->enqueue([[]]), TypeError::class);
expect_throw(fn() => $q->pop(0), ValueError::class);
expect_throw(fn() => $q->top(-1), ValueError::class);
expect_throw(fn() => $q->dequeue('x', NAN), ValueError::class);
expect_throw(fn() => new Queue(''), ValueError::class);
expect_throw(fn() => new Queue($n, ['visibilty' => 1]), ValueError::class);
ok('Queue settings and bad input');

// Hostile input to every method: only the documented errors, no crash.
$values = [null, true, -1, 0, 1.5, NAN, INF, -INF, PHP_INT_MAX, '', 'x', '1e3', [], [[]], new stdClass(), STDIN];
$lock = new Lock(uniq('hostile'));
assert($lock->acquire(0)); // extend() works on it
$queue = new Queue(uniq('hostile'));
$calls = 0;
$outcomes = [];
foreach ($values as $v) {
    foreach ([
        fn() => new Lock($v), fn() => new Lock('h', $v), fn() => new Lock('h', ttl: $v),
        fn() => new Lock('h', timeout: $v), fn() => new Lock('h', autoRenew: $v),
        fn() => new Lock('h', connection: $v), fn() => new Lock('h', prefix: $v),
        fn() => new Lock('h', ['ttl' => $v]), fn() => new Lock('h', ['connection' => $v]),
        fn() => (new Lock(uniq('h')))->acquire($v), fn() => $lock->extend($v), fn() => Lock::restore('h', $v),
        fn() => new Queue($v), fn() => new Queue('h', $v), fn() => new Queue('h', visibility: $v),
        fn() => $queue->enqueue($v), fn() => $queue->enqueue('x', $v), fn() => $queue->pop($v),
        // (waits: with a task due, so that a long one returns at once)
        fn() => $queue->enqueue('w') + 1 && $queue->pop(1, $v), fn() => $queue->top($v), fn() => $queue->dequeue($v, 1.0),
        fn() => $queue->dequeue('x', $v), fn() => $queue->enqueue('w') + 1 && $queue->reserve($v),
        fn() => $queue->reserve(0, $v),
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
