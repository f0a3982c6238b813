<?php
/** RedisLock: every legacy method and return shape, and the extras. */
require __DIR__ . '/helpers.php';

$r = legacy_redis();

// instance(): one object per request.
assert(RedisLock::instance() === RedisLock::instance());
assert(RedisLock::instance() instanceof RedisLock);
ok('instance() is a per-request singleton');

// lock(): try once by default; not reentrant; unlock; "0" is a valid name.
$a = new RedisLock();
$b = new RedisLock(redis_url());
$n = uniq('lock');
assert($a->lock($n) === true);
assert($r->get("Lock:$n") !== false, 'the legacy key layout');
assert($a->lock($n) === false, 'not reentrant: a second lock() of a held name fails');
assert($b->lock($n) === false);
assert($a->isLocking($n) === true && $b->isLocking($n) === false);
assert($b->unlock($n) === false, 'only the holder unlocks');
assert($a->unlock($n) === true);
assert($a->unlock($n) === false);
assert($a->isLocking($n) === false);
assert($r->exists("Lock:$n") === 0);
assert($a->lock('0') === true && $a->unlock('0') === true);
ok('lock/unlock/isLocking basics, "0" is a name');

// $expire is clamped to >= 5 s; expire() replaces the TTL with max($expire, 1).
$n = uniq('expire');
assert($a->lock($n, 0, 1) === true);
$pttl = $r->pttl("Lock:$n");
assert($pttl > 4000 && $pttl <= 5000, "clamped to 5 s, got $pttl");
assert($a->expire($n, 100) === true);
assert($r->pttl("Lock:$n") > 99000);
assert($a->expire($n, 0) === true);
$pttl = $r->pttl("Lock:$n");
assert($pttl > 0 && $pttl <= 1000, "max(0, 1) = 1 s, got $pttl");
assert($b->expire($n, 100) === false, 'expire() of a lock not held');
$a->unlock($n);
assert($a->expire($n, 100) === false);
ok('expire clamping and expire()');

// $timeout > 0 waits; the holder's unlock wakes the waiter.
$n = uniq('wait');
assert($a->lock($n, 0, 1) === true); // expires after 5 s
$t = microtime(true);
assert($b->lock($n, 0.3) === false);
$waited = microtime(true) - $t;
assert($waited >= 0.28 && $waited < 2, "waited $waited");
$t = microtime(true);
assert($b->lock($n, 10) === true, 'gets it when the 5 s lifetime ends');
$waited = microtime(true) - $t;
assert($waited < 6, "waited $waited");
assert($a->isLocking($n) === false && $b->isLocking($n) === true);
$b->unlock($n);
ok('waiting lock() with timeout');

// Named arguments and numeric strings, as PHP allows.
$n = uniq('named');
assert($a->lock($n, waitIntervalUs: 5000, expire: 20) === true);
assert($r->pttl("Lock:$n") > 19000);
assert($a->unlock(name: $n) === true);
assert($a->lock($n, "0", "30") === true && $a->unlock($n));
ok('named arguments, numeric strings');

// unlockAll(): releases everything this object holds.
$a->unlockAll(); // forget the hold that expired in the waiting test
$names = [uniq('all'), uniq('all'), uniq('all')];
foreach ($names as $x) assert($a->lock($x));
assert($a->unlockAll() === true);
foreach ($names as $x) assert($r->exists("Lock:$x") === 0);
assert($a->lock($names[0]));
$r->del("Lock:{$names[0]}"); // lost behind our back
assert($a->unlockAll() === false);
assert($a->unlockAll() === true, 'nothing left');
ok('unlockAll()');

// Fencing tokens increase across holders.
$n = uniq('fence');
$last = 0;
for ($i = 0; $i < 10; $i++) {
    $l = $i % 2 ? $a : $b;
    assert($l->lock($n));
    $f = $l->fencingToken($n);
    assert(is_int($f) && $f > $last);
    $last = $f;
    $l->unlock($n);
    assert($l->fencingToken($n) === false);
}
ok('fencingToken()');

// An uncontended hold's token is drawn on its first read, only while held.
$n = uniq('fence-late');
assert($a->lock($n));
$r->del("Lock:$n"); // as if it expired
assert($b->lock($n));
assert($a->fencingToken($n) === false, 'a lost hold draws no token');
$f = $b->fencingToken($n);
assert(is_int($f) && $b->fencingToken($n) === $f);
assert($a->unlock($n) === false && $b->unlock($n) === true);
ok('fencingToken() is drawn while held');

// Invalid arguments: legacy value + E_WARNING; wrong types: TypeError.
expect_warning(fn() => $a->lock(''), false, 'must not be empty');
expect_warning(fn() => $a->unlock(''), false, 'must not be empty');
expect_warning(fn() => $a->isLocking(''), false, 'must not be empty');
expect_warning(fn() => $a->expire('', 5), false, 'must not be empty');
expect_warning(fn() => $a->lock(str_repeat('x', 5000)), false, '5000 bytes');
expect_warning(fn() => $a->lock('x', 0, PHP_INT_MAX), false, 'expire');
$free = uniq('free');
[$got, $warnings] = with_warnings(fn() => $a->lock($free, 1e300)); // may wait "forever"
assert($got === true && $warnings === [] && $a->unlock($free));
expect_throw(fn() => $a->lock([]), TypeError::class);
expect_throw(fn() => $a->lock('x', []), TypeError::class);
expect_throw(fn() => $a->lock('x', 'soon'), TypeError::class);
expect_throw(fn() => $a->lock('x', 0, new stdClass()), TypeError::class);
expect_throw(fn() => new RedisLock(42), TypeError::class);
expect_throw(fn() => $a->lock('x', 0, 15, 1, 'extra'), ArgumentCountError::class);
ok('bad input: warnings and TypeErrors');

// Binary names work and are binary-safe.
$bin = "\xff\x00\xfe" . uniq('bin');
assert($a->lock($bin) === true);
assert($r->exists("Lock:$bin") === 1);
assert($a->unlock($bin) === true);
ok('binary-safe names');

// Array connection parameters, like the legacy RedisFactory.
$u = parse_url(redis_url());
$c = new RedisLock(['host' => $u['host'], 'port' => $u['port'], 'database' => 0, 'timeout' => 2]);
$n = uniq('array');
assert($c->lock($n) && $a->lock($n) === false && $c->unlock($n));
ok('array parameters');

// Redis unreachable: RedisLockException (a RuntimeException) naming the cause.
$dead = new RedisLock('redis://127.0.0.1:1/0?connect_timeout=0.5');
$e = expect_throw(fn() => $dead->lock('x'), RedisLockException::class);
assert($e instanceof RuntimeException);
assert(str_contains($e->getMessage(), 'connection'), $e->getMessage());
// A plain exception class: it knows where it was thrown, serializes, and user
// code can throw its own.
assert($e->getFile() === __FILE__ && $e->getLine() > 0 && $e->getTrace() !== []);
assert(unserialize(serialize($e))->getMessage() === $e->getMessage());
$mine = new RedisLockException('mine', 7);
assert($mine->getMessage() === 'mine' && $mine->getCode() === 7);
ok('RedisLockException');

// Extras: auto-renewal (opt-in, legacy locks had fixed lifetimes) and fair mode.
$renewing = new RedisLock(['url' => redis_url(), 'auto_renew' => true, 'fair' => true]);
$n = uniq('renew');
assert($renewing->lock($n, 0, 5) === true);
sleep(2); // a renewal is due every 5/3 s
$pttl = $r->pttl("Lock:$n");
assert($pttl > 4000, "renewed in the background, PTTL $pttl");
assert($a->lock($n) === false);
assert($renewing->unlock($n) === true);
ok('auto_renew and fair options');

// Once read, fencingToken() asks no one again, but turns false once
// auto-renew finds the hold lost (here: the key deleted, as if it expired,
// and taken by someone else).
$n = uniq('fence-lost');
$renewing = new RedisLock(['url' => redis_url(), 'auto_renew' => true]);
assert($renewing->lock($n, 0, 5) === true);
assert(is_int($renewing->fencingToken($n)));
$r->del("Lock:$n");
assert($b->lock($n) === true);
$deadline = microtime(true) + 6; // the watchdog renews every 5/3 s
while ($renewing->fencingToken($n) !== false && microtime(true) < $deadline) {
    usleep(20000);
}
assert($renewing->fencingToken($n) === false, 'the lost hold has no fencing token');
assert(is_int($b->fencingToken($n)));
assert($renewing->unlock($n) === false && $b->unlock($n) === true);
ok('fencingToken() after auto-renew lost the hold');

// pcntl_fork() with the watchdog running: a child reconnects, does not own its parent's
// locks, cannot release them, and its exit leaves them alone. (Forks racing the watchdog's
// bookkeeping are stressed by tests/python/test_processes.py: same core.)
if (function_exists('pcntl_fork')) {
    $parent = new RedisLock(['url' => redis_url(), 'auto_renew' => true]);
    $names = [];
    for ($i = 0; $i < 200; $i++) {
        $names[] = $x = uniq('fork');
        assert($parent->lock($x, 0, 5) === true);
    }
    for ($k = 0; $k < 20; $k++) {
        $pid = pcntl_fork();
        assert($pid !== -1, 'fork failed');
        if ($pid === 0) {
            $ok = $parent->unlock($names[$k]) === false
                && $parent->lock($names[$k]) === false
                && (new RedisLock())->lock($child = uniq('child'), 0, 5)
                && RedisLock::instance()->lock($child) === false;
            exit($ok ? 0 : 1);
        }
        $deadline = microtime(true) + 10;
        while (($done = pcntl_waitpid($pid, $status, WNOHANG)) === 0 && microtime(true) < $deadline) {
            usleep(1000);
        }
        if ($done === 0) {
            posix_kill($pid, SIGKILL);
            pcntl_waitpid($pid, $status);
        }
        assert($done === $pid, "child $k hung");
        assert(pcntl_wexitstatus($status) === 0, "child $k failed");
    }
    foreach ($names as $x) {
        assert($r->exists("Lock:$x") === 1, 'a child released a lock of its parent');
        assert($parent->unlock($x) === true);
    }
    ok('pcntl_fork: children start afresh, the parent keeps its locks');
}

// The object keeps no locks at request end (legacy locks outlived the script).
$n = uniq('outlive');
(function () use ($n) { $x = new RedisLock(); assert($x->lock($n, 0, 30)); })();
assert($r->exists("Lock:$n") === 1, 'still locked after the object is gone');
$r->del("Lock:$n");
ok('locks outlive their object');

// A signal whose handler does not restart system calls (pcntl_signal with
// $restart_syscalls = false; SIGALRM from pcntl_alarm) arriving while lock()
// and unlock() wait for their replies: the read goes on, the calls succeed,
// and the handler runs (issue 24.1: no signal mask around round trips).
if (function_exists('pcntl_signal') && function_exists('pcntl_alarm')) {
    $n = uniq('alarm');
    $alarms = 0;
    pcntl_async_signals(true);
    $previous = pcntl_signal_get_handler(SIGALRM);
    pcntl_signal(SIGALRM, function () use (&$alarms) { $alarms++; }, false);
    $l = new RedisLock();
    foreach (['lock', 'unlock'] as $call) {
        $r->rawCommand('CLIENT', 'PAUSE', '1300', 'WRITE'); // the reply takes 1.3 s
        pcntl_alarm(1);
        $t0 = microtime(true);
        $got = $call === 'lock' ? $l->lock($n, 0, 30) : $l->unlock($n);
        assert($got === true, "$call failed under SIGALRM");
        assert(microtime(true) - $t0 > 1.0, "$call waited for the paused server");
        if ($call === 'lock') {
            assert(strlen((string)$r->get("Lock:$n")) > 0, 'the lock is held');
        }
    }
    assert($alarms === 2, "the handler ran for each alarm ($alarms)");
    assert($r->exists("Lock:$n") === 0, 'released');
    pcntl_signal(SIGALRM, $previous);
    ok('a signal during a round trip neither fails the call nor loses its effect');
}
