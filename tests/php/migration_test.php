<?php
/**
 * Run with -d ferrolock.legacy_classes=0: the app's legacy class file and the
 * extension's classes in one script, on the same keys.
 */
require __DIR__ . '/helpers.php';
require_once __DIR__ . '/legacy/RedisLock.php';

assert(ini_get('ferrolock.legacy_classes') === '0');
assert(ini_set('ferrolock.legacy_classes', '1') === false, 'not changeable at run time');

// The global names are the app's own classes; the extension's are namespaced.
assert(get_class(new RedisLock()) === 'RedisLock' && new RedisLock() instanceof LegacyRedisLock);
assert(new RedisQueue() instanceof LegacyRedisQueue);
assert((new ReflectionClass('RedisLockException'))->isInternal() === false);
$ext = new Ferrolock\RedisLock();
assert(get_class($ext) === 'Ferrolock\RedisLock' && !($ext instanceof RedisLock));
assert((new ReflectionClass($ext))->isInternal());
assert(Ferrolock\RedisLock::instance() === Ferrolock\RedisLock::instance());
assert(get_class(Ferrolock\RedisLock::instance()) === 'Ferrolock\RedisLock');
assert((new ReflectionClass('Ferrolock\RedisLockException'))->getParentClass()->getName() === 'RuntimeException');
ok('legacy class file and Ferrolock\RedisLock load side by side');

// The same drop-in methods, on the same keys: they exclude each other.
$old = new RedisLock();
$n = uniq('migrate');
assert($old->lock($n) === true);
assert($ext->lock($n) === false, 'the extension sees the legacy lock');
assert($old->unlock($n) === true);
assert($ext->lock($n, 0, 5) === true && $ext->isLocking($n) === true);
assert($old->lock($n) === false, 'the legacy class sees the extension lock');
assert($ext->expire($n, 30) === true && $ext->unlock($n) === true);
$modern = new Ferrolock\Lock($n);
assert($modern->acquire(0) && $old->lock($n) === false && $ext->lock($n) === false);
$modern->release();
ok('the legacy class and the extension share Lock:<name>');

$oldQ = new RedisQueue();
$extQ = new Ferrolock\RedisQueue();
$q = uniq('migrate-q');
assert($oldQ->enqueue($q, ['a', 'b']) === true);
assert($extQ->pop($q)['id'] === 'a');
assert($extQ->enqueue($q, 'c') === true);
$rest = $oldQ->pop($q, 5);
assert(array_column($rest, 'id') === ['b', 'c'], json_encode($rest));
ok('the legacy class and the extension share Queue:<name>');

// Errors of the namespaced classes: TypeError messages name the class as PHP
// shows it; Redis trouble is Ferrolock\RedisLockException (the global name
// being the app's own exception).
$e = expect_throw(fn() => $ext->lock([]), TypeError::class);
assert(str_starts_with($e->getMessage(), 'Ferrolock\RedisLock::lock(): Argument #1 ($name)'), $e->getMessage());
$e = expect_throw(fn() => new Ferrolock\RedisQueue(['port' => 0]), Ferrolock\RedisLockException::class);
assert(!($e instanceof RedisLockException));
expect_warning(fn() => $ext->lock($n, NAN), false, 'Ferrolock\RedisLock::lock(): timeout must be a finite number');
ok('errors of the namespaced legacy classes');
