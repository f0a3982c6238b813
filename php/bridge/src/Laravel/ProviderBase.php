<?php

declare(strict_types=1);

namespace Ferrolock\Bridge\Laravel;

/**
 * The methods of FerrolockLockProvider.
 *
 * @internal use FerrolockLockProvider
 */
abstract class ProviderBase
{
    private array $options;

    /**
     * @param string|array|null $connection a Redis URL, a connection array
     *        (host, port, password, database, url, …) or null (ini
     *        ferrolock.url, else $REDIS_URL, else redis://127.0.0.1:6379/0)
     * @param array $options prefix (default 'Lock:', shared with RedisLock and
     *        Python), fair, url
     */
    public function __construct(string|array|null $connection = null, array $options = [])
    {
        if ($connection !== null) {
            $options['connection'] = $connection;
        }
        new \Ferrolock\Lock('ferrolock-provider-settings-check', $options); // settings checked now
        $this->options = $options;
    }

    /**
     * A lock on `$name` living `$seconds` once acquired (0: no expiry);
     * with `$owner`, the hold of that owner token (as restoreLock()).
     */
    public function lock($name, $seconds = 0, $owner = null): FerrolockLock
    {
        return new FerrolockLock((string) $name, $seconds, $owner === null ? null : (string) $owner, $this->options);
    }

    /** The lock held by `$owner` (the owner() of a lock acquired elsewhere). */
    public function restoreLock($name, $owner): FerrolockLock
    {
        return $this->lock($name, 0, $owner);
    }
}
