<?php

namespace {

/**
 * Stubs of the ferrolock PHP extension (for IDEs and static analysis).
 *
 * Kept in step with php/src/*.rs: the tests compare this file with the
 * reflection of the built extension (class, method and parameter names,
 * optionality and default values). The types here say what a method accepts
 * and returns; where reflection shows a wider one (`float` for an `int|float`
 * timeout, `mixed` for an id or a result), the extension converts by PHP's own
 * rules and returns exactly what is documented here.
 *
 * Two families of classes:
 * - the legacy classes RedisLock, RedisQueue and RedisLockException, drop-in
 *   replacements for hand-written ones (global namespace below). They are
 *   also named Ferrolock\RedisLock, Ferrolock\RedisQueue and
 *   Ferrolock\RedisLockException: aliases of the same classes while the ini
 *   setting `ferrolock.legacy_classes` is on (the default); with it off
 *   (php.ini or -d only), they exist only under those namespaced names, and
 *   the global names stay free for a legacy class file still `require`d
 *   during a migration (docs/migration.md);
 * - the modern classes Ferrolock\Lock, Ferrolock\Queue and Ferrolock\Task
 *   with the Python package's semantics (namespace Ferrolock below).
 *
 * Connection, for the legacy classes: `$param` is a URL (`redis://`, `rediss://`,
 * `unix://`, `redis+sentinel://`, `redis+cluster://`), or an array like the
 * legacy RedisFactory (`host`, `port`, `password`, `database`, plus `url`,
 * `username`, `timeout`, `tls`, `prefix`; RedisLock also `servers`, `fair`,
 * `auto_renew`, `min_replicas`, `legacy_interop`; RedisQueue also `lock_prefix`), or null: ini `ferrolock.url`,
 * else `$REDIS_URL`, else `redis://127.0.0.1:6379/0`. An array without `url`,
 * `host`, `port`, `password` or `database` means that default server, with its
 * `timeout`, `username` and `tls` applied. An array with `url` applies its
 * `database`, `password`, `username`, `timeout` and `tls` to that URL
 * (single-server URLs for `database` and `password`); `host` or `port`
 * besides `url`, or a database or password that differs from the URL's, throw
 * RedisLockException naming the keys. In an array, `port` must be an
 * integer from 1 to 65535 and `database` an integer >= 0 (integer strings
 * such as '6380' too), `timeout` a number of seconds >= 0, the other settings
 * strings; null means "not set". Any other value throws RedisLockException
 * naming the key, rather than connecting somewhere else. Connections are
 * opened lazily and reused across the requests of one worker.
 *
 * Names and ids: any bytes, 1 to 4096 of them ("0" is valid); longer or empty
 * ones are invalid arguments. Ints, floats and bools are converted as PHP's
 * (string) does (a float with the `precision` ini: 0.1 + 0.2 is "0.3"), so
 * they name the same key as legacy code's "Lock:$name".
 *
 * Optional numeric parameters also take null, read as 0, as the untyped
 * legacy methods read it (a legacy wrapper forwarding its own null default
 * keeps working).
 *
 * Errors: invalid arguments the legacy classes answered with false/[] give
 * the same value plus an E_WARNING; wrong types throw TypeError; Redis
 * unreachable or failing throws RedisLockException.
 */

/**
 * Redis could not be reached or answered with an error, or the connection
 * settings (URL or array) are invalid.
 */
class RedisLockException extends RuntimeException {}

/**
 * Distributed locks, a drop-in replacement for the legacy RedisLock class
 * (key `Lock:<name>`), without its bugs: acquiring is atomic, unlock and
 * expire only touch a lock this object holds, waits are woken by the
 * holder's unlock instead of polling.
 */
class RedisLock
{
    /**
     * @param string|array|null $param Redis URL, connection array, or null.
     *        Array extras: 'servers' => [url, ...] switches to Redlock over
     *        those (distinct) masters (waiters are woken by the release,
     *        each master has a tenth of the lifetime to answer a request,
     *        locks are not auto-renewed, and fewer than a majority answering
     *        throws RedisLockException (a waiting lock() asks again until
     *        its timeout first), as does a lock() that cannot succeed
     *        in time because masters that restarted less than one lifetime
     *        ago have no vote yet: see docs/deployment.md);
     *        'fair' => true serves waiters in arrival order; 'auto_renew' =>
     *        true renews held locks every expire/3 in the background (both
     *        for a single server only); 'min_replicas' => n confirms each
     *        lock() on n replicas (WAIT) or undoes it and throws
     *        RedisLockException, at once while the master has fewer replicas
     *        connected; 'prefix' => key prefix (default 'Lock:');
     *        'legacy_interop' => false stops leaving the key free now and
     *        then for legacy SETNX pollers under sustained contention (on by
     *        default for the prefix 'Lock:', single server only: Redlock
     *        gives no such turns; see docs/migration.md).
     */
    public function __construct(string|array|null $param = null) {}

    /**
     * The same object for the whole request.
     *
     * @return RedisLock (declared without a return type in the extension:
     *         its class is named Ferrolock\RedisLock when the global names
     *         are off)
     */
    public static function instance() {}

    /**
     * Takes the lock `$name`.
     *
     * @param string $name Lock name: 1 to 4096 bytes, any bytes ("0" is valid).
     * @param int|float $timeout 0: try once; > 0: wait up to that many seconds
     *        (more than ten years, e.g. PHP_INT_MAX, waits ten years: as long
     *        as it takes). NAN, INF and -INF are invalid: false and an
     *        E_WARNING, the lock untouched.
     * @param int $expire Lifetime in seconds (at least 5, at most ten years);
     *        the lock frees itself after it unless renewed with expire().
     * @param int $waitIntervalUs Longest pause between re-checks while waiting
     *        (waits are woken by notification; this only caps re-checks).
     * @return bool True when acquired. Not reentrant: a second lock() of a name
     *         this object holds fails (or waits), as in the legacy class.
     */
    public function lock(string $name, int|float|null $timeout = 0, ?int $expire = 15, ?int $waitIntervalUs = 100000): bool {}

    /** Releases `$name` if this object holds it; false if it does not (anymore). */
    public function unlock(string $name): bool {}

    /** Releases every lock this object holds; true when all were still held. */
    public function unlockAll(): bool {}

    /** Sets the remaining lifetime of a held lock to max(`$expire`, 1) seconds. */
    public function expire(string $name, int $expire): bool {}

    /** True when this object holds `$name` (checked in Redis). */
    public function isLocking(string $name): bool {}

    /**
     * Extra: the fencing token of this object's current hold of `$name`: an
     * integer that strictly increases per name across all holders. False when
     * this object has not acquired `$name` or released it, or knows the hold
     * is lost (auto_renew or Redlock found it gone, expire() found it taken,
     * or this call did). An uncontended lock() draws no token; the first call
     * for a hold draws it in one round trip that also checks the hold is still
     * ours (later lock() calls of this name in this process then draw it
     * themselves). Later calls for the same hold do not ask Redis: without
     * auto_renew, a hold that expired and was taken by someone else still
     * returns its token; use isLocking() for that.
     */
    public function fencingToken(string $name): int|false {}
}

/**
 * A task queue, a drop-in replacement for the legacy RedisQueue class (sorted
 * set `Queue:<name>`, score = due unix time). Every operation is one atomic
 * script; a legacy client holding `Lock:Queue:<name>` is waited for.
 *
 * The extras make it a production queue (docs/queue.md): reserved tasks
 * count attempts, back off when they fail (min(backoff_cap,
 * backoff * 2^(attempts - 1)) seconds, cut by up to backoff_jitter), go to a
 * dead set after max_attempts, can carry a payload, are kept alive by
 * touch(); an id is never in flight twice; work() is a worker loop that takes
 * one round trip per job.
 */
class RedisQueue
{
    /**
     * @param string|array|null $param Redis URL, connection array, or null.
     *        Array extras: 'prefix' (default 'Queue:'), 'lock_prefix'
     *        (default 'Lock:'), and for every queue of this object:
     *        'visibility' (seconds a reservation lasts, default 30),
     *        'max_attempts' (reservations a task gets before the dead set,
     *        default 10; null: unlimited), 'backoff' (seconds, default 1),
     *        'backoff_cap' (default 300), 'backoff_jitter' (0 to 1, default
     *        0.5). These settings travel with each reservation.
     *        'min_replicas' (default 0): an enqueue or ack returns once that
     *        many replicas confirmed it (WAIT); a master with fewer refuses
     *        at once with RedisLockException, writing nothing.
     */
    public function __construct(string|array|null $param = null) {}

    /**
     * Adds `$id` (or an array of ids) due `$afterInterval` seconds from now.
     * Ids already queued keep their score. An id is 1 to 4096 bytes. An id in
     * flight (reserved) is not handed to a second consumer: it is queued
     * again when its reservation ends (after an ack, as a new task).
     *
     * @param int $timeout Seconds to wait for a legacy client's queue lock.
     */
    public function enqueue(string $name, string|int|array $id, ?int $timeout = 10, int|float|null $afterInterval = 0): bool {}

    /**
     * Extra: adds tasks with payloads, `[id => payload, ...]` (binary-safe
     * strings), like enqueue(). A payload replaces the one the task had (a
     * queued id keeps its score; an id in flight gets it with its next run).
     * Payloads are deleted when the task is acked, popped, dequeued or purged.
     */
    public function enqueueWithPayloads(string $name, array $tasks, ?int $timeout = 10, int|float|null $afterInterval = 0): bool {}

    /** Removes `$id` (and its payload) if its score is still exactly `$score`. */
    public function dequeue(string $name, string|int $id, float $score, ?int $timeout = 10): bool {}

    /**
     * Takes up to `$count` due tasks, lowest score first.
     *
     * @return array|false `$count == 1`: ['id' => string, 'score' => float]
     *         (plus 'payload' => string when the task has one) or false;
     *         `$count > 1`: a list of those (maybe empty).
     */
    public function pop(string $name, ?int $count = 1, ?int $timeout = 10): array|false {}

    /** The tasks pop() would take, without taking them (same shapes). */
    public function top(string $name, ?int $count = 1): array|false {}

    /**
     * Extra: reserves up to `$count` due tasks for `$visibility` seconds
     * (null: the object's, 30 s by default), waiting up to `$wait` seconds
     * for one (woken by enqueues; more than ten years waits ten years; NAN or
     * INF: false and an E_WARNING). A
     * task not acked in time returns to the queue after its backoff (or goes
     * to the dead set at its last attempt).
     *
     * @return array|false `$count == 1`: ['id' => string, 'score' => float,
     *         'receipt' => string, 'attempts' => int (this reservation
     *         included), 'payload' => string when it has one] or false;
     *         `$count > 1`: a list of those (maybe empty).
     */
    public function reserve(string $name, int|float|null $visibility = null, int|float|null $wait = 0, ?int $count = 1): array|false {}

    /**
     * Extra: acknowledges a reserved task; false when the reservation was
     * lost. A receipt of another task is refused (warning, false, nothing
     * changes).
     */
    public function ack(string $name, string|int $id, string $receipt): bool {}

    /**
     * Extra: gives a reserved task back, due after `$delay` seconds, or after
     * its backoff when null; at its last attempt it goes to the dead set.
     * False when the reservation was lost.
     */
    public function nack(string $name, string|int $id, string $receipt, int|float|null $delay = null): bool {}

    /**
     * Extra: extends a reservation (a heartbeat): it now runs out
     * `$visibility` seconds from now (null: the visibility it was reserved
     * with). False when it is no longer ours.
     */
    public function touch(string $name, string|int $id, string $receipt, int|float|null $visibility = null): bool {}

    /**
     * Extra: up to `$count` dead tasks from `$offset` on, the oldest death
     * first.
     *
     * @return array A list of ['id' => string, 'score' => float (when it
     *         died), 'attempts' => int, 'payload' => string when it has one].
     */
    public function dead(string $name, ?int $count = 100, ?int $offset = 0): array {}

    /**
     * Extra: puts dead tasks back into the queue, due now, attempts reset,
     * payloads kept: those of `$ids` that are dead, or all when null.
     * Returns how many.
     */
    public function retryDead(string $name, string|int|array|null $ids = null): int {}

    /**
     * Extra: deletes dead tasks and their payloads: those of `$ids` that are
     * dead, or all when null. Returns how many.
     */
    public function purgeDead(string $name, string|int|array|null $ids = null): int {}

    /**
     * Extra: what the queue holds, in one round trip without a scan.
     *
     * @return array|false ['due' => int, 'delayed' => int, 'in_flight' => int,
     *         'dead' => int, 'oldest_due_age' => float (seconds the oldest due
     *         task has been due; 0.0 when none is)]
     */
    public function stats(string $name): array|false {}

    /**
     * Extra: a worker loop for CLI workers. Calls `$handler($task)` for each
     * task (the array reserve() gives): returning acks it, throwing nacks it
     * (backoff, or the dead set at its last attempt; the exception is logged
     * with error_log()). One round trip per job: the ack of a task reserves
     * the next. The reservation is kept alive while the handler runs.
     * Connection errors are logged and ridden out. Stops after the task at
     * hand on RedisQueue::stop(), on SIGTERM or SIGINT when pcntl is loaded
     * (a second SIGINT kills), after 'max_jobs', or when nothing came within
     * 'wait'.
     *
     * @param array $options 'wait' => seconds to wait for work (null, the
     *        default: forever; 0: drain what is due), 'visibility' => seconds,
     *        'heartbeat' => bool (default true), 'max_jobs' => int (0: no limit).
     * @return int How many tasks were handled.
     */
    public function work(string $name, callable $handler, ?array $options = null): int {}

    /**
     * Extra: asks every work() loop of this process to stop after the task at
     * hand. work() installs it as the pcntl handler of SIGTERM and SIGINT
     * (hence its parameters).
     */
    public static function stop(?int $signal = null, mixed $info = null): void {}

    /** Extra: number of queued tasks, due or delayed (reserved ones excluded). */
    public function len(string $name): int {}
}

} // namespace

namespace Ferrolock {

/**
 * Base class of every failure of the modern classes (Python: FerrolockError).
 * Bad arguments are \TypeError (wrong type) and \ValueError (bad value: NAN,
 * a negative or over-ten-years duration, an empty or over-4096-byte name, an
 * unknown option, an invalid URL or connection array), as PHP's own
 * functions report them.
 */
class FerrolockException extends \RuntimeException {}

/** A lock operation failed (Python: LockError). */
class LockException extends FerrolockException {}

/**
 * A lock (or a legacy client's queue lock) was not acquired within the
 * timeout (Python: LockTimeout).
 */
class LockTimeoutException extends LockException {}

/**
 * Release or extend of a lock this object does not hold: never acquired,
 * released, expired, or taken over (Python: LockNotOwnedError).
 */
class LockNotOwnedException extends LockException {}

/**
 * A hold turned out to be lost (expired or taken over) when its fencing token
 * was first read (Python: LockLostError).
 */
class LockLostException extends LockException {}

/**
 * Redis could not be reached, did not answer in time, or refused the
 * credentials (Python: ConnectionError).
 */
class ConnectionException extends FerrolockException {}

/**
 * A distributed lock on one Redis deployment (server, Sentinel master or
 * Cluster), with the Python package's semantics: key `<prefix><name>`
 * (default `Lock:<name>`, shared with RedisLock, the legacy classes and
 * Python), TTL in seconds as a float (no 5 s floor), notification-driven
 * waits, fencing tokens, optional fairness, reentrancy and auto-renewal.
 *
 * The owner is the object (its token), not the process: hand `token()` to
 * another process, which adopts the hold with `Lock::restore()`. Destroying
 * the object does not release the lock (its key expires by its TTL; renewal
 * stops).
 *
 * Settings come as named arguments or in `$options` (or both, each setting
 * once; `$options` also takes `auto_renew`, `min_replicas` and `legacy_interop`):
 * - ttl (int|float, default 30): lifetime of the key in seconds, from 0.001;
 * - timeout (int|float|null, default null): acquire()'s default wait; null
 *   waits as long as it takes, 0 tries once;
 * - autoRenew (bool, default true): renew the TTL every ttl/3 in the
 *   background while held (lost() turns true if that fails);
 * - reentrant (bool, default false): nested acquires by this object count up;
 * - fair (bool, default false): waiters are served in arrival order;
 * - connection (string|array|null): a URL or a connection array as the legacy
 *   classes take it (host, port, password, database, url, username, timeout,
 *   tls); `url` (string): a URL; neither: ini ferrolock.url, else
 *   $REDIS_URL, else redis://127.0.0.1:6379/0;
 * - prefix (string, default 'Lock:'): key prefix;
 * - minReplicas (int, default 0): confirm each acquire on that many replicas;
 * - legacyInterop (bool|null, default null): give legacy SETNX pollers (the
 *   hand-rolled RedisLock) a turn now and then under sustained contention (a
 *   release leaves the key free for 150 ms at most once every 2 s); null: on
 *   for the prefix 'Lock:', off otherwise (docs/migration.md).
 */
final class Lock
{
    /**
     * Nothing is sent to Redis until the first operation.
     *
     * @param string $name 1 to 4096 bytes, any bytes.
     * @param array|null $options Settings (see the class).
     * @throws \ValueError for a bad setting.
     */
    public function __construct(
        string $name,
        ?array $options = null,
        int|float|null $ttl = null,
        int|float|null $timeout = null,
        ?bool $autoRenew = null,
        ?bool $reentrant = null,
        ?bool $fair = null,
        string|array|null $connection = null,
        ?string $url = null,
        ?string $prefix = null,
        ?int $minReplicas = null,
        ?bool $legacyInterop = null,
    ) {}

    /**
     * Adopts the hold of `$token` (another object's or process's `token()`:
     * Laravel's restoreLock, a serialized Symfony key): a lock that holds it
     * (checked in Redis, its TTL left as it is), with the same settings as the
     * constructor. With `autoRenew` the watchdog renews it from there: at once
     * when less than two thirds of the TTL are left. Its fencing token is
     * drawn anew when first read.
     *
     * @throws LockNotOwnedException when the token holds nothing (anymore).
     */
    public static function restore(
        string $name,
        string $token,
        ?array $options = null,
        int|float|null $ttl = null,
        int|float|null $timeout = null,
        ?bool $autoRenew = null,
        ?bool $reentrant = null,
        ?bool $fair = null,
        string|array|null $connection = null,
        ?string $url = null,
        ?string $prefix = null,
        ?int $minReplicas = null,
        ?bool $legacyInterop = null,
    ): Lock {}

    /**
     * Takes the lock. True when acquired, false when the wait ran out.
     *
     * @param int|float|null $timeout null: the lock's timeout (null there too:
     *        wait as long as it takes); 0: try once; else up to that many
     *        seconds (at most ten years; NAN, INF or negative: \ValueError).
     */
    public function acquire(int|float|null $timeout = null): bool {}

    /**
     * Releases the lock (a reentrant one: the last nested release does).
     *
     * @throws LockNotOwnedException when this object does not hold it.
     */
    public function release(): void {}

    /**
     * Sets the remaining TTL of the hold to `$ttl` seconds (null: the lock's
     * ttl); replaces, does not add.
     *
     * @throws LockNotOwnedException when not held.
     */
    public function extend(int|float|null $ttl = null): void {}

    /** True when anyone holds the lock. */
    public function locked(): bool {}

    /** True when this object holds the lock (checked in Redis). */
    public function owned(): bool {}

    /** The owner token of the current hold (null when not held). */
    public function token(): ?string {}

    /**
     * The fencing token of the current hold: an integer that strictly
     * increases per name across all holders (null when not held). The first
     * read of a hold taken uncontended asks Redis.
     *
     * @throws LockLostException when that read finds the hold gone.
     */
    public function fencingToken(): ?int {}

    /** True once the hold was lost (renewal failed, release/extend found it taken). */
    public function lost(): bool {}

    /**
     * Frees the lock whoever holds it (for operators: a stuck holder); the
     * oldest waiter gets it, as on a release. True when a hold was ended.
     * Reported as a `forced_release` event (Events::onEvent) naming the
     * shortened token of the hold it ended.
     */
    public function forceRelease(): bool {}

    /** The lock's name. */
    public function name(): string {}

    /** The lock's ttl in seconds. */
    public function ttl(): float {}

    /** acquire()'s default wait in seconds (null: as long as it takes). */
    public function timeout(): ?float {}
}

/**
 * A task queue (sorted set `<prefix><name>`, default `Queue:<name>`, score =
 * due unix time), shared with RedisQueue, legacy clients and Python, with the
 * Python package's semantics: reservations that count attempts, back off
 * when they fail, end in a dead set after `maxAttempts`, can be kept alive,
 * carry payloads, and never put one id in two consumers' hands
 * (docs/queue.md). `count($queue)` counts the queued tasks. Creating one
 * sends nothing to Redis.
 *
 * Settings come as named arguments or in `$options` (or both, each setting
 * once; `$options` also takes the snake_case keys `lock_prefix`,
 * `max_attempts`, `backoff_cap`, `backoff_jitter`, `min_replicas`):
 * - connection / url: as for Lock;
 * - prefix (string, default 'Queue:'): key prefix;
 * - visibility (int|float, default 30): seconds a reservation lasts without
 *   an ack or a touch, from 0.001;
 * - maxAttempts (?int, default 10): reservations a task gets before it goes
 *   to the dead set; null: unlimited (in `$options` too);
 * - backoff (int|float, default 1), backoffCap (default 300), backoffJitter
 *   (0 to 1, default 0.5): a failed task is due again after
 *   min(backoffCap, backoff * 2^(attempts - 1)) seconds, cut by a random
 *   fraction of up to backoffJitter;
 * - minReplicas (int, default 0): an enqueue or ack returns once that many
 *   replicas confirmed it (WAIT); a master with fewer refuses at once
 *   (LockException), writing nothing;
 * - lockPrefix (string, default 'Lock:'): prefix of the legacy queue lock
 *   `<lockPrefix><prefix><name>`.
 *
 * While a legacy client holds that queue lock, calls that change the queue
 * wait for it up to 10 s, then throw LockTimeoutException.
 */
final class Queue implements \Countable
{
    /** @throws \ValueError for a bad setting. */
    public function __construct(
        string $name,
        ?array $options = null,
        string|array|null $connection = null,
        ?string $url = null,
        ?string $prefix = null,
        int|float|null $visibility = null,
        ?string $lockPrefix = null,
        ?int $maxAttempts = 10,
        int|float|null $backoff = null,
        int|float|null $backoffCap = null,
        int|float|null $backoffJitter = null,
        ?int $minReplicas = null,
    ) {}

    /**
     * Adds tasks in one round trip, due `$delay` seconds from now (negative:
     * earlier). Ids (1 to 4096 bytes) already queued keep their score; an id
     * in flight is not handed to a second consumer, it is queued again when
     * its reservation ends. Returns how many were new (such an id counts).
     *
     * `$ids` is one id, a list of ids, or an array of id => payload (binary
     * safe strings; a payload replaces the one the task had, ids given
     * without one keep theirs). An array is told apart by `$payloads`:
     * - null (default): by its keys. Keys 0, 1, 2, ... in order: a list of
     *   ids. At least one string key: id => payload. Integer keys that are
     *   not a list (`[42 => 'data']`, or a list with gaps from array_filter):
     *   \ValueError, since PHP turns the string key '42' into the int 42 and
     *   both readings are plausible; say which with `$payloads`.
     * - true: id => payload, whatever the keys (numeric ids: `[42 => $json]`;
     *   and ids '0', '1', ... which the default reads as a list).
     * - false: the values are ids, the keys are ignored (RedisQueue's rule).
     *
     * @throws \TypeError for a payload that is not a string.
     * @throws LockTimeoutException while a legacy client holds the queue lock
     *         for more than 10 s.
     */
    public function enqueue(mixed $ids, int|float|null $delay = 0, ?bool $payloads = null): int {}

    /**
     * Takes due tasks, lowest score first (ties by id), waiting up to `$wait`
     * seconds for one (woken by enqueues). Popped tasks are gone from the
     * queue, payloads included.
     *
     * @return Task|list<Task>|null `$count` null: a Task or null; an int >= 1:
     *         a list of up to that many (maybe empty).
     */
    public function pop(?int $count = null, int|float|null $wait = 0): Task|array|null {}

    /**
     * The tasks pop() would take, without taking them (same shapes).
     *
     * @return Task|list<Task>|null
     */
    public function top(?int $count = null): Task|array|null {}

    /** Removes `$id` (and its payload) if its score is still exactly `$score`. */
    public function dequeue(string|int $id, float $score): bool {}

    /**
     * Reserves due tasks for `$visibility` seconds (null: the queue's),
     * waiting up to `$wait` seconds for one; each reserve counts an attempt.
     * ack() each when done; one not acked (or touched) in time returns to the
     * queue after its backoff, or goes to the dead set at its last attempt.
     *
     * @return Task|list<Task>|null `$count` null: a Task or null; an int >= 1:
     *         a list of up to that many (one round trip; maybe empty).
     */
    public function reserve(?int $count = null, int|float|null $wait = 0, int|float|null $visibility = null): Task|array|null {}

    /**
     * Up to `$count` dead tasks (they used their last attempt) from `$offset`
     * on, the oldest death first: Tasks whose score() is when they died, with
     * their attempts() and payload().
     *
     * @return list<Task>
     */
    public function dead(int $count = 100, int $offset = 0): array {}

    /**
     * Puts dead tasks back into the queue, due now, attempts reset, payloads
     * kept: those of `$ids` (one id or an array of ids) that are dead, or all
     * when null (a thousand per round trip). Returns how many.
     */
    public function retryDead(string|int|array|null $ids = null): int {}

    /**
     * Deletes dead tasks and their payloads: those of `$ids` that are dead,
     * or all when null. Returns how many.
     */
    public function purgeDead(string|int|array|null $ids = null): int {}

    /**
     * One round trip, never a scan: ['due' => int (queued, due now),
     * 'delayed' => int (queued, due later), 'in_flight' => int (reserved, not
     * acked), 'dead' => int, 'oldest_due_age' => float (seconds the oldest due
     * task has been due; 0.0 when none is)].
     *
     * @return array{due: int, delayed: int, in_flight: int, dead: int, oldest_due_age: float}
     */
    public function stats(): array {}

    /**
     * The worker loop, for CLI workers: reserves a task, calls
     * `$handler(Task $task)`, acks the task when the handler returns and
     * nacks it when it throws (backoff, or the dead set at its last attempt;
     * the exception is logged with error_log()). Each step is one round trip
     * (the ack of a task reserves the next); while the handler runs the
     * reservation is kept alive (`$heartbeat`). Connection errors never end
     * the loop: they are logged and the step is tried again after a pause.
     *
     * It stops taking tasks, finishes the one at hand, and returns how many
     * tasks it handled: when Queue::stop() is called (by the handler, say), on
     * SIGTERM or SIGINT when pcntl is loaded (a second SIGINT kills, as
     * without a handler; the previous handlers are restored after), after
     * `$maxJobs` tasks, or when nothing came within `$wait` seconds (null:
     * wait for work until stopped; 0: drain what is due and return).
     *
     * @param int|float|null $visibility of each reservation (null: the queue's).
     */
    public function work(
        callable $handler,
        int|float|null $wait = null,
        int|float|null $visibility = null,
        ?bool $heartbeat = true,
        ?int $maxJobs = null,
    ): int {}

    /**
     * Asks every work() loop of this process (RedisQueue's too) to stop after
     * the task at hand. work() installs it as the pcntl handler of SIGTERM and
     * SIGINT, hence its parameters: on SIGINT it restores the default handler,
     * so that a second one kills the process.
     */
    public static function stop(?int $signal = null, mixed $info = null): void {}

    /** Number of queued tasks, due or delayed (reserved ones not counted). */
    public function count(): int {}

    /** The queue's name. */
    public function name(): string {}
}

/**
 * A task taken from (or read in) a Queue; made by Queue methods only. What
 * ack() and nack() do depends on where it came from, as in Python:
 * reserve() or work() (reserved), pop(), top() or dead().
 */
final class Task
{
    /** @throws \Exception always: tasks come from Queue methods. */
    public function __construct() {}

    /** The task id. */
    public function id(): string {}

    /** Its score: the unix time (seconds, float) at which it was due; for a dead task, when it died. */
    public function score(): float {}

    /** The receipt of a reserved task (null for the others). */
    public function receipt(): ?string {}

    /** For a reserved task: the unix time after which it returns to the queue (as of the reserve). */
    public function deadline(): ?float {}

    /**
     * How many times it has been reserved, this reservation included (popped,
     * read and dead tasks: the reservations they had).
     */
    public function attempts(): int {}

    /** The data enqueued with it (binary safe), or null. */
    public function payload(): ?string {}

    /**
     * Done with the task. Reserved: removed for good if the reservation is
     * still ours (false when it ran out and the task went back to the queue);
     * an id enqueued again while in flight is queued now. Popped: nothing
     * left to do, true. From top(): dequeue(id, score). Dead: false (see
     * retryDead()/purgeDead()).
     */
    public function ack(): bool {}

    /**
     * Gives the task back. Reserved: due again after `$delay` seconds, or
     * after its backoff when null; at its last attempt it goes to the dead
     * set instead (true either way; false when the reservation was lost).
     * Popped: enqueued again with its payload (`$delay` null: due now). From
     * top() or dead(): false.
     */
    public function nack(int|float|null $delay = null): bool {}

    /**
     * Extends the reservation (a heartbeat): it now runs out `$visibility`
     * seconds from now (null: the visibility it was reserved with). False
     * when it is no longer ours, or the task was not reserved.
     */
    public function touch(int|float|null $visibility = null): bool {}

    /**
     * PHP's `with task:`: runs `$callback($task)` while the reservation is
     * kept alive in the background (a touch every third of its visibility),
     * then acks the task and returns what the callback returned; when the
     * callback throws, nacks it (backoff, or the dead set at its last
     * attempt) and rethrows. A task that was not reserved gets ack() or
     * nack() as above, without a heartbeat.
     */
    public function run(callable $callback): mixed {}
}

/**
 * This process's lock figures, for an application's own exporter (Python:
 * ferrolock.metrics). Counted since the process started: a PHP-FPM worker
 * counts across its requests. Queue figures: RedisQueue::stats($name),
 * Queue::stats().
 */
final class Metrics {
    /**
     * `buckets`: the histograms' upper bounds (seconds); `lock_wait` (acquires
     * that got the lock) and `lock_hold` (acquire to release), each
     * `['cumulative' => int[] (one per bucket, then +Inf), 'count' => int,
     * 'sum' => float]`; `acquires_missed`, `locks_lost`, `forced_releases`,
     * `dead_lettered`, `settlements_pending` (ints).
     */
    public static function snapshot(): array {}
}

/**
 * What happened in the background, told to the application (Python: the
 * `ferrolock` logger and `Lock(on_lost=...)`). No E_WARNING is raised for it.
 */
final class Events {
    /**
     * `$hook(string $name, string $message)` is called once for each hold that
     * auto-renewal finds lost (expired or taken while held, or no renewal
     * succeeded within its TTL): at the next call into the extension (any
     * method of its classes, or Events::dispatch()), on the request's thread,
     * never from a background thread. What it throws goes to error_log().
     * null removes it; it is dropped at the end of the request. A release or
     * extend that finds its lock lost throws there instead.
     */
    public static function onLockLost(?callable $hook): void {}

    /**
     * `$hook(array $event)` is called for every event of this process that
     * happened where no caller could be told: `kind` (`lock_lost`,
     * `renewal_failed`, `slow_acquire`, `forced_release`, `dead_lettered`,
     * `settlement_deferred`, `settlement_done`, `settlement_expired`),
     * `level` (`info`, `warning`, `error`), `message`, `name`, `at` (unix
     * seconds), `seconds` (a slow acquire's wait), `holder` and `origin` (a
     * forced release: the shortened token of the hold it ended, and `lock` or
     * `inspector`), `lock_id`. Called as onLockLost's hook is (at the next call
     * into the extension, on the request's thread; what it throws goes to
     * error_log()). null removes it; it is dropped at the end of the request.
     */
    public static function onEvent(?callable $hook): void {}

    /**
     * Calls the hooks for what happened since the last call into the
     * extension (for a long computation that makes no other call).
     */
    public static function dispatch(): void {}
}

} // namespace Ferrolock
