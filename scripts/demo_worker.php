<?php
/** Demo worker (PHP, the legacy API): pops jobs from the shared queue; for each
 *  one, holds the shared lock while doing a deliberately non-atomic
 *  read-modify-write of a counter file. Usage: demo_worker.php <name> <counter file> */
[, $name, $counter] = $argv;
$queue = new RedisQueue();
$lock = RedisLock::instance();
$done = 0;
$idle = 0;
while ($idle < 20) {
    $job = $queue->pop('demo:jobs');
    if ($job === false) {
        $idle++;
        usleep(50000);
        continue;
    }
    $idle = 0;
    if (!$lock->lock('demo:counter', 30, 10)) {
        fwrite(STDERR, "$name: lock timed out\n");
        exit(1);
    }
    $value = (int) file_get_contents($counter);
    usleep(5000);
    file_put_contents($counter, (string) ($value + 1));
    printf("%-10s job %3s  counter %3d  fence %d\n", $name, $job['id'], $value + 1, $lock->fencingToken('demo:counter'));
    $lock->unlock('demo:counter');
    $done++;
}
printf("%-10s done: %d jobs\n", $name, $done);
