<?php
/**
 * How many keys the release script was given, read from the slow log at
 * threshold 0 around `$release` (6 with the keys of the legacy pollers'
 * turns, 4 without): how the tests see whether legacy interop is on.
 * Shared by modern_test.php and the bridge tests.
 */
function release_keys(Redis $r, callable $release): int {
    $r->rawCommand('CONFIG', 'SET', 'slowlog-log-slower-than', '0');
    try {
        $r->rawCommand('SLOWLOG', 'RESET');
        $release();
        $log = $r->rawCommand('SLOWLOG', 'GET', '50');
    } finally {
        $r->rawCommand('CONFIG', 'SET', 'slowlog-log-slower-than', '10000');
    }
    foreach ($log as $entry) {
        if (strtoupper($entry[3][0]) === 'EVALSHA') {
            return (int) $entry[3][2];
        }
    }
    throw new RuntimeException('no release script in the slow log: ' . json_encode($log));
}
