-- The dead set: tasks that used their last attempt (score: when they died),
-- their payloads and attempts kept.
-- KEYS: queue, legacy queue lock (or the queue), inflight, receipts, waiters, leases,
--       attempts, payloads, dead, pending
-- ARGV: op, then
--   'list', offset, count: returns {{id, died_at, ...}, payloads, attempts} (see queue_take)
--   'retry', channel prefix, limit, id...: back into the queue, due now, attempts reset
--   'purge', channel prefix, limit, id...: deleted with their payload and attempts
--   (no id: the `limit` oldest). Returns {count} of tasks retried or purged.
local K = queue_keys()
local op = ARGV[1]
if op == 'list' then
  local from = tonumber(ARGV[2])
  local items = redis.call('ZRANGE', K.dead, digits(from), digits(from + tonumber(ARGV[3]) - 1), 'WITHSCORES')
  if #items == 0 then return {items, 0, 0} end
  local ids = {}
  for i = 1, #items, 2 do ids[#ids + 1] = items[i] end
  local payloads, attempts = task_data(K, ids, false)
  return {items, payloads, attempts}
end
local ids = {}
if #ARGV > 3 then
  local listed = {}
  for i = 4, #ARGV do listed[#listed + 1] = ARGV[i] end
  local dead = scores_of(K.dead, listed)
  for i, id in ipairs(listed) do
    if dead[i] then ids[#ids + 1] = id end
  end
else
  ids = redis.call('ZRANGE', K.dead, '0', digits(tonumber(ARGV[3]) - 1))
end
if #ids == 0 then return {0} end
redis.call('ZREM', K.dead, unpack(ids))
local flying = scores_of(K.inflight, ids)
local now, count = now_s(), 0
if op == 'retry' then
  redis.call('HDEL', K.attempts, unpack(ids))
  for i, id in ipairs(ids) do
    if flying[i] then
      remember_pending(K, id, float_text(now), nil)
    else
      queue_at(K.queue, id, now)
    end
    count = count + 1
  end
  if redis.call('EXISTS', K.waiters) == 1 then
    prune_waiters(K.waiters, K.leases, math.floor(now * 1000))
    wake_waiters(K.waiters, K.leases, ARGV[2], count, '')
  end
  return {count}
end
-- purge: keep the data of an id that is queued or in flight again.
local queued = scores_of(K.queue, ids)
local gone = {}
for i, id in ipairs(ids) do
  if not flying[i] and not queued[i] then gone[#gone + 1] = id end
end
if #gone > 0 then
  redis.call('HDEL', K.payloads, unpack(gone))
  redis.call('HDEL', K.attempts, unpack(gone))
end
return {#ids}
