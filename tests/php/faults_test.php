<?php
/**
 * RedisLock when Redis stops answering mid-call (issues 18.1 and 18.3): the
 * server (pid $REDIS_PID, URL $REDIS_URL, started with DEBUG enabled) is
 * paused with SIGSTOP, CLIENT PAUSE or DEBUG SLEEP past the client's timeout
 * in the middle of lock(), a wait, and unlock(). Every call ends within its
 * timeout plus one command timeout; afterwards no lock is held by a token
 * nobody has, and a fresh lock() succeeds at once.
 */

require_once __DIR__ . '/helpers.php';

$pid = (int)getenv('REDIS_PID');
$base = redis_url();
$url = $base . '?timeout=0.3&connect_timeout=0.3';
$port = (int)parse_url($base, PHP_URL_PORT);

function raw(int $port): Redis {
    $r = new Redis();
    $r->connect('127.0.0.1', $port, 2.0);
    return $r;
}

function pause_server(int $pid): void {
    posix_kill($pid, SIGSTOP);
    // Wait until it is stopped (a signal takes effect asynchronously).
    for ($i = 0; $i < 5000; $i++) {
        $stat = file_get_contents("/proc/$pid/stat");
        $state = explode(' ', trim(substr($stat, strrpos($stat, ')') + 1)))[0];
        if ($state === 'T' || $state === 't') return;
        usleep(1000);
    }
    throw new RuntimeException("redis-server $pid did not stop");
}

function resume_server(int $pid): void {
    posix_kill($pid, SIGCONT);
}

/** In a forked child: after $after seconds, $fault for $for seconds. */
function fault_later(string $fault, int $pid, int $port, float $after, float $for): int {
    $child = pcntl_fork();
    if ($child === 0) {
        usleep((int)($after * 1e6));
        if ($fault === 'sigstop') {
            pause_server($pid);
            usleep((int)($for * 1e6));
            resume_server($pid);
        } elseif ($fault === 'client-pause') {
            raw($port)->rawCommand('CLIENT', 'PAUSE', (string)(int)($for * 1000), 'ALL');
        } else {
            raw($port)->rawCommand('DEBUG', 'SLEEP', (string)$for);
        }
        exit(0);
    }
    return $child;
}

/** Nothing held under a token nobody has, and a fresh lock() works at once. */
function nothing_left(int $port, string $name, string $url): void {
    usleep(300000); // what the server received while paused runs first
    $r = raw($port);
    $until = microtime(true) + 10;
    while ($r->exists("Lock:$name")) {
        assert(microtime(true) < $until, "Lock:$name is still held by " . var_export($r->get("Lock:$name"), true));
        usleep(20000);
    }
    $fresh = new RedisLock($url);
    assert($fresh->lock($name, 0) === true, 'a fresh lock() succeeds at once');
    assert($fresh->unlock($name) === true);
}

/** Runs $call, returns [result or exception, seconds]. */
function timed(callable $call): array {
    $start = microtime(true);
    try {
        $result = $call();
    } catch (Throwable $e) {
        $result = $e;
    }
    return [$result, microtime(true) - $start];
}

// 1. lock() with the server paused: a try-once within one command timeout,
//    a wait within its timeout plus one (issue 18.3: 6.1 s and 9.5 s before).
$name = uniq('paused');
$lock = new RedisLock($url);
assert($lock->isLocking('warm') === false);
pause_server($pid);
[$r0, $t0] = timed(fn() => $lock->lock($name, 0));
[$r2, $t2] = timed(fn() => $lock->lock($name, 2));
resume_server($pid);
assert($r0 instanceof RedisLockException, 'lock($n, 0) fails: ' . var_export($r0, true));
assert(str_contains($r0->getMessage(), 'timed out') && str_contains($r0->getMessage(), '0.300 s'), $r0->getMessage());
assert($t0 < 0.3 + 0.4, "lock(\$n, 0) within one command timeout: $t0 s");
assert($r2 instanceof RedisLockException || $r2 === false, 'lock($n, 2): ' . var_export($r2, true));
assert($t2 < 2 + 0.3 + 0.5, "lock(\$n, 2) within its timeout plus one command timeout: $t2 s");
nothing_left($port, $name, $base);
ok('lock() on a paused server ends in time and leaves nothing behind');

// 2. A wait with the server paused in its middle, three ways.
foreach (['sigstop', 'client-pause', 'debug-sleep'] as $fault) {
    $name = uniq("mid-wait-$fault");
    $holder = new RedisLock($base);
    assert($holder->lock($name, 0, 15) === true);
    $waiter = new RedisLock($url);
    assert($waiter->isLocking('warm') === false);
    $child = fault_later($fault, $pid, $port, 0.4, 2.5);
    [$got, $took] = timed(fn() => $waiter->lock($name, 1.5));
    pcntl_waitpid($child, $status);
    assert($got !== true, "$fault: " . var_export($got, true));
    assert($took < 1.5 + 0.3 + 0.7, "$fault: within its timeout plus one command timeout: $took s");
    assert($holder->unlock($name) === true);
    nothing_left($port, $name, $base);
}
ok('a wait through a pause (SIGSTOP, CLIENT PAUSE, DEBUG SLEEP) ends in time and leaves nothing behind');

// 3. unlock() with the server paused: the object forgets the hold, the
//    release is completed once the server answers.
$name = uniq('unlock');
$lock = new RedisLock($url);
assert($lock->lock($name, 0, 30) === true);
pause_server($pid);
[$r, $t] = timed(fn() => $lock->unlock($name));
resume_server($pid);
assert($r instanceof RedisLockException && str_contains($r->getMessage(), 'completed in the background'),
    var_export($r, true));
assert($t < 0.3 + 0.4, "unlock() within one command timeout: $t s");
nothing_left($port, $name, $base);
assert($lock->lock($name, 0) === true, 'the same object locks again at once');
assert($lock->unlock($name) === true);
ok('unlock() on a paused server forgets the hold and is completed when the server answers');

// 4. A wait that rides out a short pause and gets the lock.
$name = uniq('ride-out');
$holder = new RedisLock($base);
assert($holder->lock($name, 0, 15) === true);
$child = fault_later('sigstop', $pid, $port, 0.3, 1.0);
$releaser = pcntl_fork();
if ($releaser === 0) {
    usleep(1800000);
    // The holder's token is the parent's: release it the way its TTL would.
    raw($port)->del("Lock:$name");
    exit(0);
}
$waiter = new RedisLock($url);
[$got, $took] = timed(fn() => $waiter->lock($name, 6));
pcntl_waitpid($child, $status);
pcntl_waitpid($releaser, $status);
assert($got === true, 'the wait rode out the pause: ' . var_export($got, true));
assert($waiter->unlock($name) === true);
$holder->unlockAll();
ok('a wait rides out a short pause and gets the lock');

// 5. The error names the problem when the URL points at an HTTP server.
$http = stream_socket_server('tcp://127.0.0.1:0');
$httpPort = (int)explode(':', stream_socket_get_name($http, false))[1];
$server = pcntl_fork();
if ($server === 0) {
    while ($c = @stream_socket_accept($http, 5)) {
        fread($c, 4096);
        fwrite($c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        fclose($c);
    }
    exit(0);
}
$e = expect_throw(fn() => (new RedisLock("redis://127.0.0.1:$httpPort"))->lock('x', 0), RedisLockException::class);
assert(str_contains($e->getMessage(), 'does not speak the Redis protocol'), $e->getMessage());
posix_kill($server, SIGTERM);
pcntl_waitpid($server, $status);
ok('a URL pointing at an HTTP server says the peer does not speak the Redis protocol');
