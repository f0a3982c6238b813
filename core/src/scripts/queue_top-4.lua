-- Read the due tasks a pop would take, without taking them: reservations
-- whose visibility deadline passed are reclaimed first, as pop does (unless a
-- legacy client holds the queue lock: then the queue is read as it is).
-- KEYS: queue, legacy queue lock (or the queue), inflight, receipts
-- ARGV: count, check_legacy
-- Returns {id, score, ...}
local queue = KEYS[1]
local _, now_text = now_s()
if not legacy_queue_lock(KEYS[2], ARGV[2]) then
  reclaim_expired(queue, KEYS[3], KEYS[4], now_text)
end
return redis.call('ZRANGEBYSCORE', queue, '-inf', now_text, 'WITHSCORES', 'LIMIT', '0', ARGV[1])
