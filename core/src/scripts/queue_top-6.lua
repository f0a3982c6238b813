-- Read the due tasks a pop would take, without taking them: reservations
-- whose visibility deadline passed are reclaimed first, as pop does, and as
-- many waiting consumers are woken as tasks came back (unless a legacy client
-- holds the queue lock: then the queue is read as it is, as pop would wait).
-- So top writes when a reservation has expired, like any queue operation.
-- KEYS: queue, legacy queue lock (or the queue), inflight, receipts, waiters, leases
-- ARGV: count, check_legacy, channel prefix
-- Returns {id, score, ...}
local queue = KEYS[1]
local _, now_text = now_s()
if not legacy_queue_lock(KEYS[2], ARGV[2]) then
  local reclaimed = reclaim_expired(queue, KEYS[3], KEYS[4], now_text)
  if reclaimed > 0 then wake_waiters(KEYS[5], KEYS[6], ARGV[3], reclaimed, '') end
end
return redis.call('ZRANGEBYSCORE', queue, '-inf', now_text, 'WITHSCORES', 'LIMIT', '0', ARGV[1])
