<?php
/**
 * Ferrolock\Metrics::snapshot(), Ferrolock\Events::onLockLost() and onEvent() (issue 21):
 * the figures move with the locks taken; a lock lost to DEBUG SLEEP (the
 * server, $REDIS_URL, sleeps past the TTL while this script waits in it) is
 * reported to the hook once, at the next call into the extension, without an
 * E_WARNING; a hook that throws goes to error_log(); a forced release reaches
 * onEvent's listener with the token it ended and its origin.
 */

require_once __DIR__ . '/helpers.php';

use Ferrolock\Events;
use Ferrolock\Lock;
use Ferrolock\Metrics;

$url = redis_url();
$port = (int)parse_url($url, PHP_URL_PORT);
$raw = new Redis();
$raw->connect('127.0.0.1', $port, 5.0);

// The figures' shape, and that they count what this process does.
$before = Metrics::snapshot();
assert(is_array($before['buckets']) && count($before['buckets']) > 5);
foreach (['lock_wait', 'lock_hold'] as $h) {
    assert(count($before[$h]['cumulative']) === count($before['buckets']) + 1, $h);
    assert(is_int($before[$h]['count']) && is_float($before[$h]['sum']));
}
foreach (['acquires_missed', 'locks_lost', 'forced_releases', 'dead_lettered', 'settlements_pending'] as $k) {
    assert(is_int($before[$k]), $k);
}
$name = uniq('ops');
$legacy = new RedisLock($url);
for ($i = 0; $i < 3; $i++) {
    assert($legacy->lock($name, 10) === true);
    usleep(10000);
    assert($legacy->unlock($name) === true);
}
$busy = new Lock($name, url: $url, autoRenew: false);
assert($busy->acquire(0) === true);
$other = new Lock($name, url: $url);
assert($other->acquire(0) === false);
$busy->release();
$after = Metrics::snapshot();
assert($after['lock_wait']['count'] >= $before['lock_wait']['count'] + 4);
assert($after['lock_hold']['count'] >= $before['lock_hold']['count'] + 4);
assert($after['lock_hold']['sum'] >= $before['lock_hold']['sum'] + 0.03);
assert($after['acquires_missed'] === $before['acquires_missed'] + 1);
assert(end($after['lock_hold']['cumulative']) === $after['lock_hold']['count'], '+Inf counts every hold');
ok('Metrics::snapshot counts waits, holds and misses');

// A lock lost to DEBUG SLEEP: the hook runs once, at the next call.
$calls = [];
Events::onLockLost(function (string $lost, string $message) use (&$calls) {
    $calls[] = [$lost, $message];
});
$lock = new Lock($name, url: $url . '?timeout=0.3&connect_timeout=0.3', ttl: 1);
assert($lock->acquire(0) === true);
[, $warnings] = with_warnings(function () use ($raw, &$calls) {
    $raw->rawCommand('DEBUG', 'SLEEP', '2.5'); // this script waits with the server
    usleep(1500000);                           // the watchdog finds the hold gone meanwhile
    assert($calls === [], 'never called outside a call into the extension');
    Events::dispatch();
});
assert($warnings === [], 'no E_WARNING: ' . var_export($warnings, true));
assert(count($calls) === 1, 'called once: ' . var_export($calls, true));
assert($calls[0][0] === $name && str_contains($calls[0][1], 'lost'), var_export($calls, true));
expect_throw(fn() => $lock->release(), Ferrolock\LockNotOwnedException::class);
Events::dispatch();
assert(count($calls) === 1, 'the release that found it lost does not call the hook again');
assert(Metrics::snapshot()['locks_lost'] >= $after['locks_lost'] + 1);
ok('a lock lost to DEBUG SLEEP calls the hook once, at the next call, without a warning');

// Any call into the extension dispatches: here the legacy class's lock().
$legacyRenewed = new RedisLock(['url' => $url, 'auto_renew' => true]);
$name2 = uniq('ops-taken');
assert($legacyRenewed->lock($name2, 0, 5) === true); // TTL 5 s: renewed every 1.7 s
$raw->set("Lock:$name2", 'someone-else');
usleep(3000000); // a renewal (every TTL/3) finds it taken
assert(count($calls) === 1);
$legacy->lock(uniq("unrelated"), 0, 5);
assert(count($calls) === 2 && $calls[1][0] === $name2, var_export($calls, true));
ok('the hook runs at the next call of any class');

// A hook that throws: logged with error_log(), nothing thrown to the caller.
Events::onLockLost(function () { throw new RuntimeException('hook-broke'); });
$name3 = uniq('ops-throw');
$lock3 = new Lock($name3, url: $url, ttl: 1);
assert($lock3->acquire(0) === true);
$raw->del("Lock:$name3");
usleep(1500000);
assert($lock3->locked() === false, 'the call went on');
ok('a hook that throws is logged');

// null removes it; a non-callable is a TypeError.
Events::onLockLost(null);
$name4 = uniq('ops-none');
$lock4 = new Lock($name4, url: $url, ttl: 1);
assert($lock4->acquire(0) === true);
$raw->del("Lock:$name4");
usleep(1500000);
Events::dispatch();
assert(count($calls) === 2);
expect_throw(fn() => Events::onLockLost(42), TypeError::class);
ok('onLockLost(null) removes the hook; a non-callable is refused');

// A forced release is an event: kind, name, the token it ended, its origin.
$seen = [];
Events::onEvent(function (array $event) use (&$seen) {
    $seen[] = $event;
});
$name5 = uniq('ops-forced');
$stuck = new Lock($name5, url: $url, autoRenew: false);
assert($stuck->acquire(0) === true);
$token = $stuck->token();
$forcedBefore = Metrics::snapshot()['forced_releases'];
[, $warnings] = with_warnings(function () use ($name5, $url) {
    assert((new Lock($name5, url: $url))->forceRelease() === true);
});
assert($warnings === [], 'no E_WARNING: ' . var_export($warnings, true));
Events::dispatch();
$forced = array_values(array_filter($seen, fn($e) => $e['kind'] === 'forced_release'));
assert(count($forced) === 1, var_export($seen, true));
assert($forced[0]['name'] === $name5 && $forced[0]['level'] === 'warning');
assert($forced[0]['holder'] === substr($token, 0, 8) . '…', var_export($forced, true));
assert($forced[0]['origin'] === 'lock');
assert(str_contains($forced[0]['message'], $forced[0]['holder']));
assert(is_float($forced[0]['at']) && abs($forced[0]['at'] - microtime(true)) < 60);
assert(Metrics::snapshot()['forced_releases'] === $forcedBefore + 1);
expect_throw(fn() => $stuck->release(), Ferrolock\LockNotOwnedException::class);
Events::onEvent(null);
$count = count($seen);
assert((new Lock($name5, url: $url))->acquire(0) === true);
assert((new Lock($name5, url: $url))->forceRelease() === true);
Events::dispatch();
assert(count($seen) === $count, 'removed: not called');
expect_throw(fn() => Events::onEvent('no-such-function'), TypeError::class);
ok('a forced release is an event with the token it ended and its origin');
