-- Add tasks with score = now + delay; ids already queued keep their score.
-- With payloads, a payload replaces the one the task had; without, an id
-- added anew starts clean (no payload or attempts a legacy pop left behind),
-- and one already queued keeps its payload. An id in flight is not queued
-- beside its reservation: the enqueue is remembered and applied when the
-- reservation ends (see remember_pending). A dead id comes back to life,
-- its attempts reset.
-- KEYS: queue, legacy queue lock (or the queue itself when not checked), inflight,
--       receipts, waiters, leases, attempts, payloads, dead, pending
-- ARGV: delay_s, check_legacy ('1'/'0'), channel prefix, with_payloads ('1'/'0'),
--       then id... (or id, payload, ...)
-- Returns {added} (an id remembered for after its reservation counts as
-- added) or {-1, pttl} while a legacy client holds the queue lock.
local K = queue_keys()
local busy = legacy_queue_lock(K.legacy, ARGV[2])
if busy then return {-1, busy} end
local now = now_s()
local score = float_text(now + tonumber(ARGV[1]))
local with_payloads = ARGV[4] == '1'
local added = 0
if not with_payloads and redis.call('EXISTS', K.inflight, K.dead, K.payloads, K.attempts) == 0 then
  -- The common case: plain ids on a queue without reservations or data.
  local batch = {}
  for i = 5, #ARGV do
    batch[#batch + 1] = score
    batch[#batch + 1] = ARGV[i]
    if #batch >= 1000 then
      added = added + redis.call('ZADD', K.queue, 'NX', unpack(batch))
      batch = {}
    end
  end
  if #batch > 0 then added = added + redis.call('ZADD', K.queue, 'NX', unpack(batch)) end
else
  local step = 1
  if with_payloads then step = 2 end
  local has_flight = redis.call('EXISTS', K.inflight) == 1
  local has_dead = redis.call('EXISTS', K.dead) == 1
  local stale = not with_payloads and redis.call('EXISTS', K.payloads, K.attempts) > 0
  local i = 5
  while i <= #ARGV do
    -- 500 tasks at a time: unpack has a stack limit.
    local ids, payloads = {}, {}
    while i <= #ARGV and #ids < 500 do
      ids[#ids + 1] = ARGV[i]
      if with_payloads then payloads[#ids] = ARGV[i + 1] end
      i = i + step
    end
    local flying = has_flight and scores_of(K.inflight, ids) or {}
    local dead = has_dead and scores_of(K.dead, ids) or {}
    local queued = stale and scores_of(K.queue, ids) or {}
    local zadd, hset, fresh, revived = {}, {}, {}, {}
    for j, id in ipairs(ids) do
      if flying[j] then
        added = added + remember_pending(K, id, score, payloads[j])
      else
        zadd[#zadd + 1] = score
        zadd[#zadd + 1] = id
        if dead[j] then revived[#revived + 1] = id end
        if with_payloads then
          hset[#hset + 1] = id
          hset[#hset + 1] = payloads[j]
        elseif stale and not queued[j] and not dead[j] then
          fresh[#fresh + 1] = id
        end
      end
    end
    if #revived > 0 then
      redis.call('ZREM', K.dead, unpack(revived))
      redis.call('HDEL', K.attempts, unpack(revived))
    end
    if #fresh > 0 then
      redis.call('HDEL', K.payloads, unpack(fresh))
      redis.call('HDEL', K.attempts, unpack(fresh))
    end
    if #hset > 0 then redis.call('HSET', K.payloads, unpack(hset)) end
    if #zadd > 0 then added = added + redis.call('ZADD', K.queue, 'NX', unpack(zadd)) end
  end
end
-- Wake as many waiting consumers as tasks were added (delayed ones too: a
-- waiter recomputes how long to sleep from the earliest due time).
if added > 0 and redis.call('EXISTS', K.waiters) == 1 then
  prune_waiters(K.waiters, K.leases, math.floor(now * 1000))
  wake_waiters(K.waiters, K.leases, ARGV[3], added, '')
end
return {added}
