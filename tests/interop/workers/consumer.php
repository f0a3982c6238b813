<?php
/** Crash-test consumer (PHP): reserve, "process", ack, logging each step.
 *  Usage: consumer.php <queue name> <log file> [work]   (REDIS_URL in the environment)
 *  With `work`, the worker loop (RedisQueue::work) reserves and acks. */
[, $name, $log] = $argv;
$q = new RedisQueue(['visibility' => 1.0]);
$handle = function (array $task) use ($log) {
    file_put_contents($log, "S {$task['id']}\n", FILE_APPEND);
    usleep(1000);
};
if (($argv[3] ?? '') === 'work') {
    $q->work($name, $handle);
}
while (true) {
    $task = $q->reserve($name, 1.0, 1.0);
    if ($task === false) {
        continue;
    }
    $handle($task);
    $ok = $q->ack($name, $task['id'], $task['receipt']) ? 'ok' : 'late';
    file_put_contents($log, "A {$task['id']} $ok\n", FILE_APPEND);
}
