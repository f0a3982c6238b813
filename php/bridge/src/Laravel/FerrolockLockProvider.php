<?php

declare(strict_types=1);

namespace Ferrolock\Bridge\Laravel;

/*
 * Laravel's LockProvider on ferrolock: lock($name, $seconds = 0, $owner = null)
 * and restoreLock($name, $owner). Declared implementing
 * Illuminate\Contracts\Cache\LockProvider when Laravel's contracts are
 * installed.
 */
if (interface_exists(\Illuminate\Contracts\Cache\LockProvider::class)) {
    final class FerrolockLockProvider extends ProviderBase implements \Illuminate\Contracts\Cache\LockProvider
    {
    }
} else {
    final class FerrolockLockProvider extends ProviderBase
    {
    }
}
