-- Read the due tasks a pop would take, without taking them: reservations
-- whose visibility deadline passed are ended first, as pop does, and as
-- many waiting consumers woken as tasks are due again (unless a legacy client
-- holds the queue lock: then the queue is read as it is, as pop would wait).
-- So top writes when a reservation has expired, like any queue operation.
-- KEYS: queue, legacy queue lock (or the queue), inflight, receipts, waiters, leases,
--       attempts, payloads, dead, pending
-- ARGV: count, check_legacy, channel prefix
-- Returns {{id, score, ...}, payloads, attempts} (see queue_take).
local K = queue_keys()
local now, now_text = now_s()
if not legacy_queue_lock(K.legacy, ARGV[2])
    and redis.call('ZRANGEBYSCORE', K.inflight, '-inf', now_text, 'LIMIT', '0', '1')[1] then
  local due = reclaim_expired(K, now, now_text)
  if due > 0 then wake_waiters(K.waiters, K.leases, ARGV[3], due, '') end
end
local items = redis.call('ZRANGEBYSCORE', K.queue, '-inf', now_text, 'WITHSCORES', 'LIMIT', '0', ARGV[1])
if #items == 0 then return {items, 0, 0} end
local ids = {}
for i = 1, #items, 2 do ids[#ids + 1] = items[i] end
local payloads, attempts = task_data(K, ids, false)
return {items, payloads, attempts}
