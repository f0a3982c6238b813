<?php
/**
 * Laravel's cache-lock contracts (illuminate/contracts, Illuminate\Contracts\Cache),
 * as Laravel 10/11 declares them, for testing the bridge without Laravel.
 */
namespace Illuminate\Contracts\Cache;

if (!interface_exists(Lock::class)) {
    interface Lock
    {
        public function get($callback = null);
        public function block($seconds, $callback = null);
        public function release();
        public function owner();
        public function forceRelease();
    }
}

if (!interface_exists(LockProvider::class)) {
    interface LockProvider
    {
        public function lock($name, $seconds = 0, $owner = null);
        public function restoreLock($name, $owner);
    }
}

if (!class_exists(LockTimeoutException::class)) {
    class LockTimeoutException extends \Exception
    {
    }
}
