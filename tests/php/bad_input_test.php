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
// As lock timeouts, only values that do not make the call wait for real.
$timeouts = [-1, 0, -PHP_INT_MAX - 1, PHP_INT_MAX, 1e308, -1e308, NAN, INF, -INF, 0.0001, '0', ' -3 '];
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
// taken by valid calls; existing data is untouched.
$valid = array_filter($names, fn($n) => $n !== '' && strlen($n) <= 4096);
$valid = array_merge($valid, ['x', '1', '1.5']); // true and 1.5 are coerced to names, as PHP does
foreach (array_diff($r->keys('*'), $before) as $k) {
    $ok = false;
    foreach ($valid as $n) {
        $ok = $ok || $k === "Lock:$n" || $k === "Queue:$n" || str_ends_with($k, "Lock:$n:fence");
    }
    assert($ok, 'unexpected key ' . bin2hex($k));
}
assert($r->get('precious') === 'data' && $r->zScore('Queue:precious', 'task') === 1.5);
$l->unlockAll();
ok('survived ' . count($calls) . ' hostile calls');
