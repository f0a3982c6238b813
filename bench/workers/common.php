<?php
/** Shared by the PHP benchmark workers: the legacy reference classes (kept with the
 *  tests, wherever they live under tests/) and a phpredis connection from a URL. */
$legacy = glob(__DIR__ . '/../../tests/{,*/,*/*/}legacy/LegacyRedis.php', GLOB_BRACE);
if (!$legacy) {
    fwrite(STDERR, "tests/**/legacy/LegacyRedis.php not found\n");
    exit(1);
}
require_once $legacy[0];

function bench_phpredis(string $url): Redis {
    $u = parse_url($url);
    $r = new Redis();
    $r->connect($u['host'] ?? '127.0.0.1', $u['port'] ?? 6379);
    if (!empty($u['pass'])) {
        $r->auth($u['pass']);
    }
    $r->select((int) ltrim($u['path'] ?? '/0', '/'));
    return $r;
}
