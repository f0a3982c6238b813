<?php

declare(strict_types=1);

namespace Ferrolock\Bridge\Laravel;

use Ferrolock\Lock;
use Ferrolock\LockNotOwnedException;

/**
 * The methods of FerrolockLock (which adds Laravel's contract interface when
 * illuminate/contracts is installed): Laravel's Illuminate\Cache\Lock
 * semantics on Ferrolock\Lock.
 *
 * @internal use FerrolockLock
 */
abstract class LockBase
{
    /** The Ferrolock\Lock of the current (or last) hold taken or restored here. */
    private ?Lock $lock = null;

    /**
     * @param string $name the lock's name (key `<prefix><name>`, default `Lock:<name>`)
     * @param int|float $seconds how long the lock lives once acquired; 0: no
     *        expiry, as in Laravel (ten years: release it, or forceRelease())
     * @param string|null $owner the owner token of a hold taken elsewhere
     *        (restoreLock); null for a new lock, whose owner is the token of
     *        its hold once acquired
     * @param array $options Ferrolock\Lock settings: connection, url, prefix, fair
     */
    public function __construct(
        protected string $name,
        protected int|float $seconds = 0,
        protected ?string $owner = null,
        protected array $options = [],
    ) {
        if ($seconds < 0 || is_nan((float) $seconds)) {
            throw new \ValueError("lock seconds must be >= 0, got $seconds");
        }
    }

    /**
     * Tries to acquire the lock once; with a callback, runs it while holding
     * the lock and releases after (returning the callback's result).
     *
     * @return mixed
     */
    public function get($callback = null)
    {
        $result = $this->acquire();
        if ($result && is_callable($callback)) {
            try {
                return $callback();
            } finally {
                $this->release();
            }
        }

        return $result;
    }

    /**
     * Waits up to `$seconds` for the lock (woken by the holder's release, not
     * by polling); then as get(). Throws Laravel's LockTimeoutException
     * (Ferrolock\LockTimeoutException without Laravel) when it ran out.
     *
     * @return mixed
     */
    public function block($seconds, $callback = null)
    {
        $lock = $this->newLock();
        if (!$lock->acquire(max(0.0, (float) $seconds))) {
            $class = class_exists(\Illuminate\Contracts\Cache\LockTimeoutException::class)
                ? \Illuminate\Contracts\Cache\LockTimeoutException::class
                : \Ferrolock\LockTimeoutException::class;
            throw new $class(sprintf('Lock "%s" not acquired within %s seconds.', $this->name, $seconds));
        }
        $this->held($lock);
        if (is_callable($callback)) {
            try {
                return $callback();
            } finally {
                $this->release();
            }
        }

        return true;
    }

    /** Releases the lock if this owner holds it; false otherwise. */
    public function release(): bool
    {
        $lock = $this->ownLock();
        if ($lock === null) {
            return false;
        }
        try {
            $lock->release();

            return true;
        } catch (LockNotOwnedException) {
            return false;
        } finally {
            $this->lock = null;
        }
    }

    /** Releases the lock whoever holds it. */
    public function forceRelease(): void
    {
        $this->newLock()->forceRelease();
        $this->lock = null;
    }

    /**
     * The owner token: the hold's once acquired (hand it to restoreLock() in
     * another process), or the one this lock was restored with; '' before.
     */
    public function owner(): string
    {
        return $this->owner ?? '';
    }

    /** True when this lock's owner holds it (checked in Redis). */
    public function isOwnedByCurrentProcess(): bool
    {
        return $this->ownLock()?->owned() ?? false;
    }

    /** True when `$owner` holds the lock. */
    public function isOwnedBy($owner): bool
    {
        try {
            return Lock::restore($this->name, (string) $owner, $this->options)->owned();
        } catch (LockNotOwnedException | \ValueError) {
            return false;
        }
    }

    /**
     * Accepted for compatibility: waits are woken by the release, so there is
     * no polling interval to set.
     *
     * @return $this
     */
    public function betweenBlockedAttemptsSleepFor($milliseconds)
    {
        return $this;
    }

    protected function acquire(): bool
    {
        $lock = $this->newLock();
        if (!$lock->acquire(0)) {
            return false;
        }
        $this->held($lock);

        return true;
    }

    private function held(Lock $lock): void
    {
        $this->lock = $lock;
        $this->owner = $lock->token();
    }

    /** The lock object holding this owner's hold, if any (restored by token). */
    private function ownLock(): ?Lock
    {
        if ($this->lock !== null && $this->lock->token() !== null) {
            return $this->lock;
        }
        if ($this->owner === null || $this->owner === '') {
            return null;
        }
        try {
            return $this->lock = Lock::restore($this->name, $this->owner, $this->settings());
        } catch (LockNotOwnedException | \ValueError) {
            return null;
        }
    }

    private function newLock(): Lock
    {
        return new Lock($this->name, $this->settings());
    }

    private function settings(): array
    {
        // Laravel's seconds = 0: no expiry; ten years is the longest TTL.
        $ttl = $this->seconds > 0 ? (float) $this->seconds : 10 * 365 * 24 * 3600.0;

        return ['ttl' => $ttl, 'autoRenew' => false] + $this->options;
    }
}
