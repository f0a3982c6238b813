-- Read the due tasks a pop would take, without taking them.
-- KEYS: queue
-- ARGV: count
-- Returns {id, score, ...}
local _, now_text = now_s()
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_text, 'WITHSCORES', 'LIMIT', '0', ARGV[1])
