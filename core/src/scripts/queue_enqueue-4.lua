-- Add task ids with score = now + delay; ids already queued keep their score.
-- KEYS: queue, legacy queue lock (or the queue itself when not checked), waiters, leases
-- ARGV: delay_s, check_legacy ('1'/'0'), channel prefix, id...
-- Returns {added} or {-1, pttl} while a legacy client holds the queue lock.
local busy = legacy_queue_lock(KEYS[2], ARGV[2])
if busy then return {-1, busy} end
local now = now_s()
local score = float_text(now + tonumber(ARGV[1]))
local added, batch = 0, {}
for i = 4, #ARGV do
  batch[#batch + 1] = score
  batch[#batch + 1] = ARGV[i]
  if #batch >= 1000 then
    added = added + redis.call('ZADD', KEYS[1], 'NX', unpack(batch))
    batch = {}
  end
end
if #batch > 0 then added = added + redis.call('ZADD', KEYS[1], 'NX', unpack(batch)) end
-- Wake as many waiting consumers as tasks were added (delayed ones too: a
-- waiter recomputes how long to sleep from the earliest due time).
if added > 0 and redis.call('EXISTS', KEYS[3]) == 1 then
  prune_waiters(KEYS[3], KEYS[4], math.floor(now * 1000))
  wake_waiters(KEYS[3], KEYS[4], ARGV[3], added, '')
end
return {added}
