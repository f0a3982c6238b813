-- Acknowledge a reserved task: remove it if this receipt still holds it.
-- KEYS: inflight, receipts
-- ARGV: id, receipt
-- Returns 1 when removed, 0 when the reservation was lost (expired and
-- reclaimed, possibly handed to another consumer) — that claim is left alone.
local held = redis.call('HGET', KEYS[2], ARGV[1])
if not held or string.sub(held, 1, #ARGV[2] + 1) ~= ARGV[2] .. '|' then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
