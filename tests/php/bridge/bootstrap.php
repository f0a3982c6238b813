<?php
/**
 * PHPUnit bootstrap of the bridge tests (run by tests/php/test_bridge.py with
 * Debian's phpunit and php-symfony-lock): Symfony's autoloader, the bridge
 * package's PSR-4 autoloading as composer.json declares it, and Laravel's
 * cache-lock contracts (Laravel itself is not installable here: these are its
 * interfaces, declared only when absent).
 */
require_once '/usr/share/php/Symfony/Component/Lock/autoload.php';

$composer = json_decode(file_get_contents(__DIR__ . '/../../../php/bridge/composer.json'), true);
foreach ($composer['autoload']['psr-4'] as $prefix => $dir) {
    $base = __DIR__ . '/../../../php/bridge/' . $dir;
    spl_autoload_register(function (string $class) use ($prefix, $base) {
        if (str_starts_with($class, $prefix)) {
            $file = $base . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
            if (is_file($file)) {
                require $file;
            }
        }
    });
}

require_once __DIR__ . '/../release_keys.php';

if (getenv('FERROLOCK_NO_LARAVEL') !== '1') {
    require_once __DIR__ . '/laravel_contracts.php';
}

function redis_url(): string {
    return getenv('REDIS_URL') ?: 'redis://127.0.0.1:6379/0';
}

/** A unique name for one test. */
function uniq(string $what): string {
    return $what . '-' . getmypid() . '-' . bin2hex(random_bytes(4));
}

/** Starts a process with the extension loaded; returns [process, stdout pipe]. */
function spawn(array $argv): array {
    $ext = getenv('FERROLOCK_EXT') ?: dirname(__DIR__, 3) . '/target/release/libferrolock_php.so';
    $cmd = $argv[0] === 'php' ? array_merge([PHP_BINARY, '-d', "extension=$ext"], array_slice($argv, 1)) : $argv;
    $proc = proc_open($cmd, [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes, null, getenv() + ['REDIS_URL' => redis_url()]);
    return [$proc, $pipes[1], $pipes[2]];
}
