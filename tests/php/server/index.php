<?php
/** One request of the persistence test: a lock and a queue operation per request. */
$lock = RedisLock::instance();
$name = 'persist-' . ($_GET['n'] ?? 'x');
if (!$lock->lock($name)) {
    http_response_code(409);
}
(new RedisQueue())->enqueue($name, (string) ($_GET['i'] ?? 0));
$lock->unlock($name);
echo "ok ", getmypid();
