<?php
/** Worker: pops tasks until the queue stays empty, printing each id.
 *  Usage: drain.php ferrolock|legacy <queue name> <batch> <start at, Unix time> */
require __DIR__ . '/../../php/helpers.php';
[, $mode, $name, $batch, $startAt] = $argv;
$q = $mode === 'legacy' ? new LegacyRedisQueue() : new RedisQueue();
if ((float) $startAt > microtime(true)) {
    time_sleep_until((float) $startAt);
}
$idle = 0;
while ($idle < 100) { // 0.5 s with nothing popped: the queue is drained
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
    if ($mode === 'legacy') {
        // A legacy app does some work between pops; a tight loop would
        // re-take the queue lock before anyone else could (its SETNX lock
        // has no queue), starving the other workers.
        usleep(1000);
    }
}
