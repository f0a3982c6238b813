<?php

declare(strict_types=1);

namespace Ferrolock\Bridge\Symfony;

use Ferrolock\Lock;
use Ferrolock\LockNotOwnedException;
use Symfony\Component\Lock\BlockingStoreInterface;
use Symfony\Component\Lock\Exception\InvalidArgumentException;
use Symfony\Component\Lock\Exception\InvalidTtlException;
use Symfony\Component\Lock\Exception\LockConflictedException;
use Symfony\Component\Lock\Exception\LockExpiredException;
use Symfony\Component\Lock\Key;
use Symfony\Component\Lock\PersistingStoreInterface;

/**
 * A symfony/lock store on Ferrolock\Lock (the ferrolock PHP extension).
 *
 * Against Symfony's own RedisStore: a blocked `$lock->acquire(true)` is woken
 * by the holder's release (no 100 ms polling: Symfony calls waitAndSave()),
 * TTLs are exact to the millisecond, and the key is ferrolock's `Lock:<name>`,
 * so a Symfony lock excludes a Python `ferrolock.Lock`, a `RedisLock` or a
 * legacy hand-written lock on the same name (and is woken by their release).
 *
 * The owner token lives in the Key's state, so a serialized Key (handed to
 * another process) still releases or refreshes the lock there.
 *
 * Shared (read) locks are not offered: ferrolock's core has exclusive locks
 * only, and a reader count faked here would lose the notification-driven
 * waits and the fair queue. Symfony falls back to an exclusive lock for
 * `acquireRead()` on a store without SharedLockStoreInterface.
 */
final class FerrolockStore implements PersistingStoreInterface, BlockingStoreInterface
{
    /** Settings passed on to every Ferrolock\Lock. */
    private const OPTIONS = ['prefix', 'fair', 'minReplicas', 'min_replicas', 'legacyInterop', 'legacy_interop',
        'connection', 'url'];

    private array $options;

    /** @var \WeakMap<Key, Lock> the lock object of each key seen by this store */
    private \WeakMap $locks;

    /**
     * @param string|array|null $connection a Redis URL, a connection array (host,
     *        port, password, database, url, timeout, …) or null (ini
     *        ferrolock.url, else $REDIS_URL, else redis://127.0.0.1:6379/0)
     * @param float $initialTtl seconds a lock lives after save() (Symfony's
     *        Lock then sets its own ttl with putOffExpiration())
     * @param array $options prefix (default 'Lock:'), fair (waiters served in
     *        arrival order), minReplicas, legacyInterop (false: no turns for
     *        legacy SETNX pollers; default: on for the prefix 'Lock:')
     */
    public function __construct(
        string|array|null $connection = null,
        private float $initialTtl = 300.0,
        array $options = [],
    ) {
        if ($initialTtl <= 0) {
            throw new InvalidTtlException(sprintf('"%s()" expects a strictly positive TTL. Got %d.', __METHOD__, $initialTtl));
        }
        $unknown = array_diff(array_keys($options), self::OPTIONS);
        if ($unknown) {
            throw new InvalidArgumentException(sprintf('Unknown option(s) "%s" (known: %s).', implode('", "', $unknown), implode(', ', self::OPTIONS)));
        }
        if ($connection !== null) {
            $options['connection'] = $connection;
        }
        $this->options = $options + ['ttl' => $initialTtl, 'autoRenew' => false];
        $this->locks = new \WeakMap();
        try {
            new Lock('ferrolock-store-settings-check', $this->options); // settings checked now
        } catch (\ValueError $e) {
            throw new InvalidArgumentException($e->getMessage(), 0, $e);
        }
    }

    public function save(Key $key): void
    {
        $key->reduceLifetime($this->initialTtl);
        $lock = $this->lockOf($key);
        if ($lock->token() !== null && $lock->owned()) {
            $lock->extend($this->initialTtl); // saved again by its key: refreshed
        } elseif (!$lock->acquire(0)) {
            throw new LockConflictedException();
        }
        $this->remember($key, $lock);
        $this->checkNotExpired($key);
    }

    /**
     * Waits as long as it takes (Symfony's blocking acquire has no timeout),
     * woken by the holder's release or expiry, whatever process or language
     * held it.
     */
    public function waitAndSave(Key $key): void
    {
        $lock = $this->lockOf($key);
        if ($lock->token() !== null && $lock->owned()) {
            $lock->extend($this->initialTtl);
        } else {
            $lock->acquire(null);
        }
        $key->reduceLifetime($this->initialTtl);
        $this->remember($key, $lock);
        $this->checkNotExpired($key);
    }

    public function putOffExpiration(Key $key, float $ttl): void
    {
        if ($ttl <= 0) {
            throw new InvalidTtlException(sprintf('"%s()" expects a TTL greater or equals to 0. Got %s.', __METHOD__, $ttl));
        }
        $key->reduceLifetime($ttl);
        $lock = $this->lockOf($key);
        if ($lock->token() === null) {
            throw new LockConflictedException();
        }
        try {
            $lock->extend($ttl);
        } catch (LockNotOwnedException $e) {
            throw new LockConflictedException($e->getMessage(), 0, $e);
        }
        $this->checkNotExpired($key);
    }

    public function delete(Key $key): void
    {
        $lock = $this->lockOf($key);
        if ($lock->token() !== null) {
            try {
                $lock->release();
            } catch (LockNotOwnedException) {
                // expired or taken over: nothing of ours left to delete
            }
        }
        $key->removeState(self::class);
        unset($this->locks[$key]);
    }

    public function exists(Key $key): bool
    {
        $lock = $this->lockOf($key);

        return $lock->token() !== null && $lock->owned();
    }

    /**
     * The lock object of `$key`: the one this store used for it, else one
     * adopting the token in the key's state (a key unserialized in another
     * process), else a new one.
     */
    private function lockOf(Key $key): Lock
    {
        if (isset($this->locks[$key])) {
            return $this->locks[$key];
        }
        try {
            if ($key->hasState(self::class)) {
                try {
                    return $this->locks[$key] = Lock::restore((string) $key, $key->getState(self::class), $this->options);
                } catch (LockNotOwnedException) {
                    $key->removeState(self::class); // its hold is gone
                }
            }

            return $this->locks[$key] = new Lock((string) $key, $this->options);
        } catch (\ValueError $e) {
            throw new InvalidArgumentException($e->getMessage(), 0, $e);
        }
    }

    private function remember(Key $key, Lock $lock): void
    {
        $this->locks[$key] = $lock;
        $key->setState(self::class, $lock->token());
    }

    /** Symfony's ExpiringStoreTrait::checkNotExpired (a trait of 5.4 and later). */
    private function checkNotExpired(Key $key): void
    {
        if ($key->isExpired()) {
            try {
                $this->delete($key);
            } catch (\Exception) {
                // swallow exception to not hide the original issue
            }
            throw new LockExpiredException(sprintf('Failed to store the "%s" lock.', $key));
        }
    }
}
