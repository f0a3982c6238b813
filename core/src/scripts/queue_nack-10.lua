-- Give a reserved task back, due after `delay` seconds, or after its backoff
-- when no delay is given; at its last attempt it goes to the dead set.
-- KEYS: queue, legacy queue lock (or the queue), inflight, receipts, waiters, leases,
--       attempts, payloads, dead, pending
-- ARGV: id, rid, delay_s ('' = backoff), check_legacy, channel prefix
-- Returns {1} returned to the queue, {2} dead, {0} the reservation was lost,
-- {-1, pttl} a legacy client holds the queue lock (nothing done).
local K = queue_keys()
local held = redis.call('HGET', K.receipts, ARGV[1])
local r = held and parse_reservation(held)
if not r or r.rid ~= ARGV[2] then return {0} end
local busy = legacy_queue_lock(K.legacy, ARGV[4])
if busy then return {-1, busy} end
local now = now_s()
return {nack_reservation(K, ARGV[1], ARGV[2], tonumber(ARGV[3]), now, ARGV[5])}
