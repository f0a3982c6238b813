<?php
/**
 * An app's own legacy class file, as a codebase in the middle of a migration
 * still has it (`require_once 'RedisLock.php'`): it declares the global names
 * RedisLock, RedisQueue and RedisLockException. With the extension loaded and
 * ferrolock.legacy_classes on, requiring it is a fatal "Cannot declare class";
 * with it off, it loads beside Ferrolock\RedisLock & co.
 */
require_once __DIR__ . '/LegacyRedis.php';

class RedisLockException extends RuntimeException {}

class RedisLock extends LegacyRedisLock {}

class RedisQueue extends LegacyRedisQueue {}
