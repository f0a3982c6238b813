-- Read the due tasks a pop would take, without taking them.
-- KEYS: queue
-- ARGV: count
-- Returns {id, score, ...}
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_s(), 'WITHSCORES', 'LIMIT', '0', ARGV[1])
