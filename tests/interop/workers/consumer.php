<?php
/** Crash-test consumer (PHP): reserve, "process", ack, logging each step.
 *  Usage: consumer.php <queue name> <log file>   (REDIS_URL in the environment) */
[, $name, $log] = $argv;
$q = new RedisQueue();
while (true) {
    $task = $q->reserve($name, 1.0, 1.0);
    if ($task === false) {
        continue;
    }
    file_put_contents($log, "S {$task['id']}\n", FILE_APPEND);
    usleep(1000);
    $ok = $q->ack($name, $task['id'], $task['receipt']) ? 'ok' : 'late';
    file_put_contents($log, "A {$task['id']} $ok\n", FILE_APPEND);
}
