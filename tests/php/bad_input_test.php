<?php
/** Hostile input: the process survives, nothing is written, errors are the documented ones. */
require __DIR__ . '/helpers.php';

$r = legacy_redis();
$l = new RedisLock();
$q = new RedisQueue();
$r->set('precious', 'data');
$r->zAdd('Queue:precious', 1.5, 'task');
$before = $r->keys('*');

$names = ['', str_repeat('n', 1 << 20), "\x00", "\xff\xfe\xfd", "a\nb", '{x}', '}{', '名字'];
$numbers = [-1, 0, -PHP_INT_MAX - 1, PHP_INT_MAX, 1e308, -1e308, NAN, INF, -INF, 0.0001, '12', ' 7 ', '1e3'];
// As lock timeouts, only values that do not make the call wait for real (a
// huge timeout waits: see below).
$timeouts = [-1, 0, -PHP_INT_MAX - 1, -1e308, NAN, -INF, INF, 0.0001, '0', ' -3 '];
$types = [null, [], [[]], new stdClass(), true, false, 1.5, STDIN];

$outcomes = ['ok' => 0, 'warning' => 0, 'TypeError' => 0, 'ArgumentCountError' => 0, 'ValueError' => 0];
$calls = [];
foreach ($names as $n) {
    foreach ($numbers as $x) {
        $calls[] = fn() => $l->lock($n, 0, $x);
        $calls[] = fn() => $l->lock($n, 0, 15, $x);
        $calls[] = fn() => $l->expire($n, $x);
        $calls[] = fn() => $q->pop($n, $x);
        $calls[] = fn() => $q->top($n, $x);
        $calls[] = fn() => $q->dequeue($n, 'id', $x);
    }
    foreach ($timeouts as $x) {
        $calls[] = fn() => $l->lock($n, $x);
    }
}
foreach ($types as $t) {
    $calls[] = fn() => $l->lock($t);
    $calls[] = fn() => $l->lock('x', $t);
    $calls[] = fn() => $l->unlock($t);
    $calls[] = fn() => $l->isLocking($t);
    $calls[] = fn() => $q->enqueue('x', $t);
    $calls[] = fn() => $q->enqueue($t, 'x');
    $calls[] = fn() => $q->pop('x', $t);
    $calls[] = fn() => $q->dequeue('x', $t, 1.0);
    $calls[] = fn() => new RedisLock($t);
    $calls[] = fn() => new RedisQueue($t);
}
foreach ($calls as $call) {
    try {
        [$result, $warnings] = with_warnings($call);
        $outcomes[$warnings ? 'warning' : 'ok']++;
    } catch (TypeError $e) {
        $outcomes[get_class($e) === 'ArgumentCountError' ? 'ArgumentCountError' : 'TypeError']++;
    } catch (ValueError $e) {
        $outcomes['ValueError']++;
    }
}
echo json_encode($outcomes), "\n";
assert($outcomes['warning'] > 100 && $outcomes['TypeError'] > 10);
// The only keys written are the locks (and fencing counters) of valid names
// taken by valid calls, and the records of pops (what a pop took, for a
// lost reply: they expire); existing data is untouched.
$valid = array_filter($names, fn($n) => $n !== '' && strlen($n) <= 4096);
$valid = array_merge($valid, ['x', '1', '1.5']); // true and 1.5 are coerced to names, as PHP does
foreach (array_diff($r->keys('*'), $before) as $k) {
    $ok = false;
    foreach ($valid as $n) {
        $ok = $ok || $k === "Lock:$n" || $k === "Queue:$n" || str_ends_with($k, "Lock:$n:fence")
            || preg_match('/^\{[^}]*\}' . preg_quote("Queue:$n:r:", '/') . '[0-9a-f]{32}$/', $k); // a pop's record
    }
    assert($ok, 'unexpected key ' . bin2hex($k));
}
assert($r->get('precious') === 'data' && $r->zScore('Queue:precious', 'task') === 1.5);
$l->unlockAll();
ok('survived ' . count($calls) . ' hostile calls');

// NaN and the infinities are bad input (issue 26.5): false and a warning,
// and the lock stays free. (Before, NAN read as "try once" and took it.)
foreach ([NAN, INF, -INF] as $i => $timeout) {
    $n = uniq("nan-inf-$i");
    expect_warning(fn() => $l->lock($n, $timeout), false, 'timeout must be a finite number of seconds');
    assert($r->exists("Lock:$n") === 0, "lock($n, $timeout) took the lock");
}
ok('lock() with a NAN or INF timeout warns and takes nothing');

// A finite wait timeout over the longest duration (ten years) waits as long
// as it takes: a free lock is taken at once, without a warning (the legacy
// class took a free lock whatever the timeout), a held one is waited for.
foreach ([PHP_INT_MAX, 1e9, 1e300, '1e300'] as $i => $timeout) {
    $n = uniq("long-wait-$i");
    [$got, $warnings] = with_warnings(fn() => $l->lock($n, $timeout));
    assert($got === true && $warnings === [], "timeout $timeout: " . var_export([$got, $warnings], true));
    assert($l->unlock($n) === true);
}
$n = uniq('long-wait-held');
assert((new RedisLock())->lock($n, 0, 5) === true);
$r->pexpire("Lock:$n", 200); // the other hold ends in 200 ms
assert($l->lock($n, PHP_INT_MAX, 15, 20000) === true, 'waited for the holder');
assert($l->unlock($n) === true);
// A lifetime over ten years stays an invalid argument.
expect_warning(fn() => $l->lock(uniq('long-ttl'), 0, PHP_INT_MAX), false, 'expire');
// The same for a queue's waits: reserve's $wait, the legacy-lock $timeouts.
$n = uniq('long-wait-q');
assert($q->enqueue($n, ['a', 'b', 'c'], PHP_INT_MAX) === true);
[$task, $warnings] = with_warnings(fn() => $q->reserve($n, 30, 1e12));
assert(is_array($task) && $task['id'] === 'a' && $warnings === [], var_export([$task, $warnings], true));
[$task, $warnings] = with_warnings(fn() => $q->reserve($n, 30, 1e300));
assert(is_array($task) && $task['id'] === 'b' && $warnings === [], var_export([$task, $warnings], true));
expect_warning(fn() => $q->reserve($n, 30, INF), false, 'wait must be a finite number');
expect_warning(fn() => $q->reserve($n, 30, NAN), false, 'wait must be a finite number');
assert($q->pop($n, 1, PHP_INT_MAX)['id'] === 'c');
assert($q->enqueue($n, 'd', PHP_INT_MAX) === true);
assert($q->dequeue($n, 'd', $q->top($n)['score'], PHP_INT_MAX) === true);
expect_warning(fn() => $q->reserve($n, 1e12), false, 'visibility');
$r->del("Queue:$n");
ok('huge finite wait timeouts wait, INF and NAN waits and huge lifetimes are refused');

// null in an optional parameter reads as 0, as the untyped legacy methods
// read it (a legacy wrapper forwarding its own null default keeps working):
// lock() tries once with the 5 s minimum lifetime; dequeue() tries its queue
// lock once; enqueue() with a 0 timeout and pop()/top() with a 0 count answer
// false/[] as legacy did.
$n = uniq('null-args');
assert($l->lock($n, null, null, null) === true && $r->pttl("Lock:$n") <= 5000);
assert($l->lock($n, null) === false && $l->unlock($n) === true);
expect_warning(fn() => $q->enqueue($n, 'a', null), false, 'timeout');
assert($q->enqueue($n, 'a', 10, null) === true);
expect_warning(fn() => $q->pop($n, null), [], 'count');
expect_warning(fn() => $q->top($n, null), [], 'count');
assert($q->top($n)['id'] === 'a' && $q->dequeue($n, 'a', $q->top($n)['score'], null) === true);
assert($q->enqueue($n, 'b') === true && $q->pop($n, 1, null)['id'] === 'b');
$r->del("Queue:$n");
ok('null in optional parameters reads as 0, as in the legacy classes');

// Connection arrays: a value out of range or of the wrong type throws
// RedisLockException naming the key (never a silent default, which could be
// another server or database).
$bad = [
    [['host' => '127.0.0.1', 'port' => 70000], 'port'],
    [['port' => 'abc'], 'port'],
    [['port' => 0], 'port'],
    [['port' => 6379.5], 'port'],
    [['port' => '6379abc'], 'port'],
    [['database' => 'two'], 'database'],
    [['db' => -1], 'db'],
    [['password' => ['x']], 'password'],
    [['auth' => true], 'auth'],
    [['host' => ['x']], 'host'],
    [['url' => new stdClass()], 'url'],
    [['timeout' => 'soon'], 'timeout'],
    [['timeout' => -1], 'timeout'],
    [['prefix' => []], 'prefix'],
];
foreach ($bad as [$param, $key]) {
    foreach (['RedisLock', 'RedisQueue'] as $class) {
        $e = expect_throw(fn() => new $class($param), RedisLockException::class);
        assert(str_contains($e->getMessage(), "'$key' must be"), $e->getMessage());
    }
}
$e = expect_throw(fn() => new RedisLock(['port' => 'x', 'password' => ['hunter2']]), RedisLockException::class);
assert(!str_contains($e->getMessage(), 'hunter2'));
$e = expect_throw(fn() => new RedisLock(['host' => '127.0.0.1', 'port' => 70000]), RedisLockException::class);
assert(str_contains($e->getMessage(), '1 to 65535'), $e->getMessage());
// Integer strings, integral floats and null (not set) are still accepted.
$u = parse_url(redis_url());
foreach ([(string) $u['port'], " {$u['port']} ", (float) $u['port']] as $port) {
    $c = new RedisLock(['host' => $u['host'], 'port' => $port, 'database' => '0', 'timeout' => '2']);
    $n = uniq('array-port');
    assert($c->lock($n) === true && $l->lock($n) === false && $c->unlock($n) === true);
}
$c = new RedisQueue(['host' => $u['host'], 'port' => $u['port'], 'database' => null, 'password' => null]);
assert($c->len(uniq('array-null')) === 0);
// Values held by reference count as the values they refer to.
$config = ['host' => $u['host'], 'port' => $u['port'], 'database' => null];
foreach ($config as &$value) {
}
unset($value);
$host = $u['host'];
$config['host'] = &$host;
$c = new RedisLock($config);
$n = uniq('array-ref');
assert($c->lock($n) === true && $c->unlock($n) === true);
ok('connection arrays: bad values throw RedisLockException naming the key');

// Every parameter of every method, given a value no parameter takes, is a
// TypeError naming its method, position and name, as PHP's own messages do
// (the extension numbers them with an argument reader, not by hand).
$checked = 0;
foreach (['RedisLock' => $l, 'RedisQueue' => $q] as $class => $object) {
    foreach ((new ReflectionClass($class))->getMethods() as $m) {
        $params = $m->getParameters();
        foreach ($params as $i => $p) {
            $args = array_map(fn($q) => match ((string) $q->getType()) {
                'int', '?int' => 1, 'float', '?float' => 1.0, 'array', '?array' => [],
                'callable' => 'strlen', default => 'x',
            }, $params);
            $args[$i] = new stdClass();
            $call = $m->getName() === '__construct'
                ? fn() => new $class(...$args)
                : fn() => $object->{$m->getName()}(...$args);
            $e = expect_throw($call, TypeError::class);
            $want = "$class::{$m->getName()}(): Argument #" . ($i + 1) . " (\${$p->getName()}) must be of type ";
            assert(str_starts_with($e->getMessage(), $want), "$want: " . $e->getMessage());
            $checked++;
        }
    }
}
assert($checked >= 30, "only $checked parameters checked");
ok("TypeErrors name the method, position and name of each of $checked parameters");
