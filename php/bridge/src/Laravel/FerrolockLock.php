<?php

declare(strict_types=1);

namespace Ferrolock\Bridge\Laravel;

/*
 * A lock with Laravel's Illuminate\Cache\Lock semantics on Ferrolock\Lock:
 * get($callback = null), block($seconds, $callback = null), release(),
 * owner(), forceRelease(), isOwnedByCurrentProcess(),
 * betweenBlockedAttemptsSleepFor(). Declared implementing
 * Illuminate\Contracts\Cache\Lock when Laravel's contracts are installed, so
 * it fits wherever Laravel expects a lock.
 */
if (interface_exists(\Illuminate\Contracts\Cache\Lock::class)) {
    final class FerrolockLock extends LockBase implements \Illuminate\Contracts\Cache\Lock
    {
    }
} else {
    final class FerrolockLock extends LockBase
    {
    }
}
