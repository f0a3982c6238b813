<?php
/**
 * Reference copies of the hand-rolled classes ferrolock replaces, written over
 * Debian's php-redis following the algorithm of the user's seed documents
 * (SETNX then EXPIRE; GET, compare, DEL; queue operations under a lock on
 * "Queue:<name>"). Used only by the tests, to prove interoperability and to
 * show the legacy race. Their bugs are kept on purpose.
 */

function legacy_redis(): Redis {
    static $r = null;
    if ($r === null) {
        $u = parse_url(getenv('REDIS_URL') ?: 'redis://127.0.0.1:6379/0');
        $r = new Redis();
        $r->connect($u['host'] ?? '127.0.0.1', $u['port'] ?? 6379);
        if (!empty($u['pass'])) {
            $r->auth($u['pass']);
        }
        $r->select((int) ltrim($u['path'] ?? '/0', '/'));
    }
    return $r;
}

class LegacyRedisLock {
    private $redis;
    private $lockedNames = [];

    public function __construct() {
        $this->redis = legacy_redis();
    }

    public function lock($name, $timeout = 0, $expire = 15, $waitIntervalUs = 100000) {
        if (empty($name)) return false;
        $timeout = (int) $timeout;
        $expire = max((int) $expire, 5);
        $now = microtime(true);
        $timeoutAt = $now + $timeout;
        $expireAt = $now + $expire;
        $redisKey = "Lock:$name";
        while (true) {
            $result = $this->redis->setnx($redisKey, (string) $expireAt);
            if ($result !== false) {
                $this->redis->expire($redisKey, $expire);
                $this->lockedNames[$name] = $expireAt;
                return true;
            }
            $ttl = $this->redis->ttl($redisKey);
            if ($ttl < 0) {
                $this->redis->set($redisKey, (string) $expireAt, $expire);
                $this->lockedNames[$name] = $expireAt;
                return true;
            }
            if ($timeout <= 0 || microtime(true) > $timeoutAt) break;
            usleep($waitIntervalUs);
        }
        return false;
    }

    public function expire($name, $expire) {
        if ($this->isLocking($name)) {
            if ($this->redis->expire("Lock:$name", max($expire, 1))) {
                return true;
            }
        }
        return false;
    }

    public function isLocking($name) {
        if (isset($this->lockedNames[$name])) {
            return (string) $this->lockedNames[$name] == (string) $this->redis->get("Lock:$name");
        }
        return false;
    }

    public function unlock($name) {
        if ($this->isLocking($name)) {
            if ($this->redis->del("Lock:$name")) {
                unset($this->lockedNames[$name]);
                return true;
            }
        }
        return false;
    }

    public function unlockAll() {
        $allSuccess = true;
        foreach ($this->lockedNames as $name => $item) {
            if (false === $this->unlock($name)) {
                $allSuccess = false;
            }
        }
        return $allSuccess;
    }
}

class LegacyRedisQueue {
    private $redis;
    private $lock;

    public function __construct() {
        $this->redis = legacy_redis();
        $this->lock = new LegacyRedisLock();
    }

    public function enqueue($name, $id, $timeout = 10, $afterInterval = 0) {
        if (empty($name) || empty($id) || $timeout <= 0) return false;
        if (!$this->lock->lock("Queue:$name", $timeout)) return false;
        $score = microtime(true) + $afterInterval;
        foreach ((array) $id as $item) {
            if (false === $this->redis->zScore("Queue:$name", $item)) {
                $this->redis->zAdd("Queue:$name", $score, $item);
            }
        }
        $this->lock->unlock("Queue:$name");
        return true;
    }

    public function dequeue($name, $id, $score, $timeout = 10) {
        if (empty($name) || empty($id) || empty($score)) return false;
        if (!$this->lock->lock("Queue:$name", $timeout)) return false;
        $serverScore = $this->redis->zScore("Queue:$name", $id);
        $result = false;
        if ($serverScore == $score) {
            $result = (bool) $this->redis->zRem("Queue:$name", $id);
        }
        $this->lock->unlock("Queue:$name");
        return $result;
    }

    public function pop($name, $count = 1, $timeout = 10) {
        if (empty($name) || $count <= 0) return [];
        if (!$this->lock->lock("Queue:$name", $timeout)) return false;
        $result = [];
        $array = $this->redis->zRangeByScore("Queue:$name", '-inf', (string) microtime(true),
            ['withscores' => true, 'limit' => [0, $count]]);
        foreach ($array as $id => $score) {
            $result[] = ['id' => (string) $id, 'score' => $score];
            $this->redis->zRem("Queue:$name", $id);
        }
        $this->lock->unlock("Queue:$name");
        return $count == 1 ? (empty($result) ? false : $result[0]) : $result;
    }
}
