<?php

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
 * Connection, for both classes: `$param` is a URL (`redis://`, `rediss://`,
 * `unix://`, `redis+sentinel://`, `redis+cluster://`), or an array like the
 * legacy RedisFactory (`host`, `port`, `password`, `database`, plus `url`,
 * `username`, `timeout`, `tls`, `prefix`; RedisLock also `servers`, `fair`,
 * `auto_renew`; RedisQueue also `lock_prefix`), or null: ini `ferrolock.url`,
 * else `$REDIS_URL`, else `redis://127.0.0.1:6379/0`. An array without `url`,
 * `host`, `port`, `password` or `database` means that default server, with its
 * `timeout`, `username` and `tls` applied. In an array, `port` must be an
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
     *        throws RedisLockException, as does a lock() that cannot succeed
     *        in time because masters that restarted less than one lifetime
     *        ago have no vote yet: see docs/deployment.md);
     *        'fair' => true serves waiters in arrival order; 'auto_renew' =>
     *        true renews held locks every expire/3 in the background (both
     *        for a single server only); 'prefix' => key prefix (default 'Lock:').
     */
    public function __construct(string|array|null $param = null) {}

    /** The same object for the whole request. */
    public static function instance(): RedisLock {}

    /**
     * Takes the lock `$name`.
     *
     * @param string $name Lock name: 1 to 4096 bytes, any bytes ("0" is valid).
     * @param int|float $timeout 0: try once; > 0: wait up to that many seconds
     *        (more than ten years, e.g. PHP_INT_MAX or INF, waits ten years:
     *        as long as it takes).
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
 */
class RedisQueue
{
    /** @param string|array|null $param Redis URL, connection array, or null. */
    public function __construct(string|array|null $param = null) {}

    /**
     * Adds `$id` (or an array of ids) due `$afterInterval` seconds from now.
     * Ids already queued keep their score. An id is 1 to 4096 bytes.
     *
     * @param int $timeout Seconds to wait for a legacy client's queue lock.
     */
    public function enqueue(string $name, string|int|array $id, ?int $timeout = 10, int|float|null $afterInterval = 0): bool {}

    /** Removes `$id` if its score is still exactly `$score`. */
    public function dequeue(string $name, string|int $id, float $score, ?int $timeout = 10): bool {}

    /**
     * Takes up to `$count` due tasks, lowest score first.
     *
     * @return array|false `$count == 1`: ['id' => string, 'score' => float] or
     *         false; `$count > 1`: a list of those (maybe empty).
     */
    public function pop(string $name, ?int $count = 1, ?int $timeout = 10): array|false {}

    /** The tasks pop() would take, without taking them (same shapes). */
    public function top(string $name, ?int $count = 1): array|false {}

    /**
     * Extra: reserves one due task for `$visibility` seconds (default: the
     * core's visibility timeout, 30 s), waiting up to `$wait` seconds for one
     * (woken by enqueues; more than ten years waits ten years). If it is not
     * acked in time it returns to the queue.
     *
     * @return array|false ['id' => string, 'score' => float, 'receipt' => string]
     */
    public function reserve(string $name, int|float|null $visibility = 30, int|float|null $wait = 0): array|false {}

    /** Extra: acknowledges a reserved task; false when the reservation was lost. */
    public function ack(string $name, string|int $id, string $receipt): bool {}

    /** Extra: gives a reserved task back, due after `$delay` seconds. */
    public function nack(string $name, string|int $id, string $receipt, int|float|null $delay = 0): bool {}

    /** Extra: number of queued tasks, due or delayed (reserved ones excluded). */
    public function len(string $name): int {}
}
