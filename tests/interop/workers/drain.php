<?php
/** Worker: pops tasks until the queue stays empty, printing each id.
 *  Usage: drain.php ferrolock|legacy <queue name> <batch> */
require __DIR__ . '/../../php/helpers.php';
[, $mode, $name, $batch] = $argv;
$q = $mode === 'legacy' ? new LegacyRedisQueue() : new RedisQueue();
$idle = 0;
while ($idle < 20) {
    $got = $q->pop($name, (int) $batch);
    if ($got === false || $got === []) {
        $idle++;
        usleep(5000);
        continue;
    }
    $idle = 0;
    foreach ((int) $batch === 1 ? [$got] : $got as $task) {
        echo $task['id'], "\n";
    }
}
