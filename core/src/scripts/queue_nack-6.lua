-- Give a reserved task back, due after `delay` seconds.
-- KEYS: queue, legacy queue lock (or the queue), inflight, receipts, waiters, leases
-- ARGV: id, receipt, delay_s, check_legacy, channel prefix
-- Returns {1} returned, {0} the reservation was lost, {-1, pttl} legacy lock held.
local held = redis.call('HGET', KEYS[4], ARGV[1])
if not held or string.sub(held, 1, #ARGV[2] + 1) ~= ARGV[2] .. '|' then return {0} end
local busy = legacy_queue_lock(KEYS[2], ARGV[4])
if busy then return {-1, busy} end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
local now = now_s()
redis.call('ZADD', KEYS[1], 'NX', now + tonumber(ARGV[3]), ARGV[1])
if redis.call('EXISTS', KEYS[5]) == 1 then
  prune_waiters(KEYS[5], KEYS[6], math.floor(now * 1000))
  wake_waiters(KEYS[5], KEYS[6], ARGV[5], 1, '')
end
return {1}
