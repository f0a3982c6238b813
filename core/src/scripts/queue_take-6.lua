-- Take due tasks: pop them (mode 'pop') or reserve one (mode 'reserve').
-- Lowest score first, ties by id. Expired reservations are reclaimed first.
-- KEYS: queue, legacy queue lock (or the queue), inflight, receipts, waiters, leases
-- ARGV: mode, count, check_legacy, channel prefix, waiter_id ('' = do not register),
--       lease_ms, visibility_ms (reserve), receipt (reserve)
-- Returns {1, {id, score, ...}} for pop;
--         {1, {id, score, receipt, deadline}} for reserve;
--         {0, next_work_at, now} when nothing is due (the waiter is registered);
--         {-1, pttl} while a legacy client holds the queue lock.
local queue, inflight, receipts, waiters, leases = KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local mode, count, me, lease = ARGV[1], ARGV[2], ARGV[5], tonumber(ARGV[6])
local busy = legacy_queue_lock(KEYS[2], ARGV[3])
if busy then return {-1, busy} end
local now, now_text = now_s()
local reclaimed = reclaim_expired(queue, inflight, receipts, now_text)
local has_waiters = redis.call('EXISTS', waiters) == 1
if mode == 'reserve' then count = 1 end
local items = redis.call('ZRANGEBYSCORE', queue, '-inf', now_text, 'WITHSCORES', 'LIMIT', '0', count)
if mode == 'pop' and #items > 0 and not has_waiters then
  -- The common case: tasks are due and nobody waits for any.
  return {1, remove_taken(queue, items)}
end

-- slow path (build.rs defines the helpers used below here)
if has_waiters then prune_waiters(waiters, leases, math.floor(now * 1000)) end
if #items == 0 then
  if me ~= '' then register_waiter(waiters, leases, me, math.floor(now * 1000000), lease) end
  return {0, next_work_at(queue, inflight), now_text}
end
if has_waiters then
  if me ~= '' then remove_waiter(waiters, leases, me) end
  -- Reclaimed tasks beyond what this call takes: let other consumers know.
  local spare = reclaimed - #items / 2
  if spare > 0 then wake_waiters(waiters, leases, ARGV[4], spare, me) end
end
if mode == 'reserve' then
  local id, score = items[1], items[2]
  local deadline = float_text(now + tonumber(ARGV[7]) / 1000)
  redis.call('ZREM', queue, id)
  redis.call('ZADD', inflight, deadline, id)
  redis.call('HSET', receipts, id, ARGV[8] .. '|' .. score)
  return {1, {id, score, ARGV[8], deadline}}
end
return {1, remove_taken(queue, items)}
