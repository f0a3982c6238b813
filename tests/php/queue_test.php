<?php
/** RedisQueue: every legacy method and return shape, and the extras. */
require __DIR__ . '/helpers.php';

$r = legacy_redis();
$q = new RedisQueue();

// enqueue: one id, an array, ints and strings; the first score wins.
$n = uniq('q');
assert($q->enqueue($n, 'a') === true);
assert($q->enqueue($n, [1, 'b', 3]) === true);
$first = $r->zScore("Queue:$n", 'a');
usleep(20000);
assert($q->enqueue($n, 'a') === true);
assert($r->zScore("Queue:$n", 'a') === $first, 'enqueue keeps the first score');
assert($q->len($n) === 4);
assert(abs($first - microtime(true)) < 5, 'score is the unix time');
ok('enqueue');

// top/pop shapes: count 1 → array|false; count > 1 → list.
$t = $q->top($n);
assert(is_array($t) && array_keys($t) === ['id', 'score'] && is_string($t['id']) && is_float($t['score']));
assert($t['id'] === 'a');
$all = $q->top($n, 10);
assert(array_column($all, 'id') === ['a', '1', 'b', '3'] || count($all) === 4);
$p = $q->pop($n);
assert($p['id'] === 'a');
$two = $q->pop($n, 2);
assert(is_array($two) && count($two) === 2 && isset($two[0]['id'], $two[1]['score']));
$rest = $q->pop($n, 5);
assert(count($rest) === 1);
assert($q->pop($n) === false && $q->top($n) === false);
assert($q->pop($n, 3) === [] && $q->top($n, 3) === []);
ok('pop/top return shapes');

// Order: lowest score first, ties by id.
$n = uniq('order');
$q->enqueue($n, ['m', 'k'], 10, -3);
$q->enqueue($n, ['z', 'a'], 10, -2);
assert(array_column($q->pop($n, 10), 'id') === ['k', 'm', 'a', 'z']);
ok('order');

// $afterInterval delays; delayed tasks are invisible until due.
$n = uniq('delay');
assert($q->enqueue($n, 'later', 10, 0.3) === true);
assert($q->pop($n) === false && $q->len($n) === 1);
usleep(400000);
assert($q->pop($n)['id'] === 'later');
ok('afterInterval');

// dequeue: exact score only.
$n = uniq('dequeue');
$q->enqueue($n, 7);
$t = $q->top($n);
assert($q->dequeue($n, 7, $t['score'] + 0.001) === false);
assert($q->dequeue($n, '7', $t['score']) === true);
assert($q->dequeue($n, 7, $t['score']) === false);
ok('dequeue');

// "0" is a valid queue name and id (legacy empty() rejected it).
assert($q->enqueue('0', '0') === true);
assert($q->pop('0')['id'] === '0');
assert($q->enqueue(uniq('zero'), 0) === true);
ok('"0" names and ids');

// Reliable extras: reserve / ack / nack.
$n = uniq('reserve');
$q = new RedisQueue(['backoff' => 0]); // a timed-out task is due again at once
$q->enqueue($n, ['a', 'b']);
$a = $q->reserve($n, 0.3);
assert($a['id'] === 'a' && $a['attempts'] === 1 && preg_match('/^[0-9a-f]{32}-[0-9a-f]{8}$/', $a['receipt']));
assert($q->top($n)['id'] === 'b', 'reserved tasks are invisible to top/pop');
usleep(400000);
assert(array_column($q->top($n, 5), 'id') === ['b', 'a'], 'a came back after the visibility timeout');
assert($q->ack($n, 'a', $a['receipt']) === false, 'late ack refused');
$b = $q->reserve($n);
$again = $q->reserve($n, 30);
assert($again['id'] === 'a' && $again['attempts'] === 2);
assert($q->ack($n, 'a', $again['receipt']) === true);
assert($q->nack($n, $b['id'], $b['receipt'], 0) === true);
assert($q->pop($n)['id'] === 'b');
assert($q->reserve($n) === false);
$t = microtime(true);
assert($q->reserve($n, 30, 0.2) === false);
assert(microtime(true) - $t >= 0.18);
ok('reserve/ack/nack');

// Invalid arguments: legacy values + warnings; wrong types: TypeError.
expect_warning(fn() => $q->enqueue('', 'a'), false, 'queue name');
expect_warning(fn() => $q->enqueue('x', []), false, 'no task id');
expect_warning(fn() => $q->enqueue('x', ''), false, 'task id');
expect_warning(fn() => $q->enqueue('x', 'a', 0), false, 'timeout');
expect_warning(fn() => $q->enqueue('x', 'a', -5), false, 'timeout');
expect_warning(fn() => $q->pop('', 1), [], 'queue name');
expect_warning(fn() => $q->pop('x', 0), [], 'count');
expect_warning(fn() => $q->pop('x', -1), [], 'count');
expect_warning(fn() => $q->top('x', 0), [], 'count');
expect_warning(fn() => $q->dequeue('', 'a', 1.0), false, 'queue name');
expect_warning(fn() => $q->enqueue('x', 'a', 10, NAN), false, 'afterInterval');
expect_throw(fn() => $q->enqueue('x', [[1]]), TypeError::class);
expect_throw(fn() => $q->enqueue('x', null), TypeError::class);
expect_throw(fn() => $q->enqueue('x', new stdClass()), TypeError::class);
expect_throw(fn() => $q->pop('x', 'many'), TypeError::class);
expect_throw(fn() => $q->dequeue('x', [], 1.0), TypeError::class);
expect_throw(fn() => new RedisQueue(3.5), TypeError::class);
assert($r->exists('Queue:x') === 0, 'nothing written by bad calls');
ok('bad input');

// A legacy client holding the queue lock makes us wait, then give up with false.
$n = uniq('legacylock');
$r->set("Lock:Queue:$n", '123', ['px' => 300]);
$t = microtime(true);
assert($q->enqueue($n, 'a', 5) === true);
assert(microtime(true) - $t >= 0.25, 'waited for the legacy queue lock');
$r->set("Lock:Queue:$n", '123', ['px' => 5000]);
expect_warning(fn() => $q->enqueue($n, 'b', 1), false, 'legacy client');
expect_warning(fn() => $q->pop($n, 1, 1), false, 'legacy client');
$r->del("Lock:Queue:$n");
assert($q->pop($n)['id'] === 'a');
ok('legacy queue lock respected');
