<?php
/** Shared helpers of the PHP tests (run with assertions on by tests/php/ and tests/interop/). */

require_once __DIR__ . '/legacy/LegacyRedis.php';

function redis_url(): string {
    return getenv('REDIS_URL') ?: 'redis://127.0.0.1:6379/0';
}

/** `php` with the ferrolock extension, as a shell command prefix. */
function php_cmd(): string {
    $ext = getenv('FERROLOCK_EXT') ?: dirname(__DIR__, 2) . '/target/release/libferrolock_php.so';
    return escapeshellarg(PHP_BINARY) . ' -d extension=' . escapeshellarg($ext);
}

/** A unique name for this test run. */
function uniq(string $what): string {
    return $what . '-' . getmypid() . '-' . bin2hex(random_bytes(4));
}

/** Runs $fn and returns [its result, the warnings it raised]. */
function with_warnings(callable $fn): array {
    $warnings = [];
    set_error_handler(function (int $no, string $msg) use (&$warnings) {
        $warnings[] = $msg;
        return true;
    }, E_WARNING | E_USER_WARNING);
    try {
        $result = $fn();
    } finally {
        restore_error_handler();
    }
    return [$result, $warnings];
}

/** Asserts $fn returns $expected and warns with a message containing $needle. */
function expect_warning(callable $fn, $expected, string $needle): void {
    [$result, $warnings] = with_warnings($fn);
    assert($result === $expected, 'expected ' . var_export($expected, true) . ', got ' . var_export($result, true));
    assert(count($warnings) === 1 && str_contains($warnings[0], $needle),
        "expected one warning about '$needle', got " . var_export($warnings, true));
}

/** Asserts $fn throws $class, returns the exception. */
function expect_throw(callable $fn, string $class): Throwable {
    try {
        $fn();
    } catch (Throwable $e) {
        assert($e instanceof $class, "expected $class, got " . get_class($e) . ': ' . $e->getMessage());
        return $e;
    }
    assert(false, "expected $class, nothing thrown");
}

function ok(string $what): void {
    echo "ok - $what\n";
}
