-- Remove a task only if its score is still exactly `score` (a task queued
-- again since it was read keeps its place); its payload and attempts go too.
-- KEYS: queue, legacy queue lock (or the queue), payloads, attempts
-- ARGV: id, score, check_legacy
-- Returns {1} removed, {0} not there or re-queued, {-1, pttl} legacy lock held.
local busy = legacy_queue_lock(KEYS[2], ARGV[3])
if busy then return {-1, busy} end
local current = redis.call('ZSCORE', KEYS[1], ARGV[1])
if current and tonumber(current) == tonumber(ARGV[2]) then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('HDEL', KEYS[4], ARGV[1])
  return {1}
end
return {0}
