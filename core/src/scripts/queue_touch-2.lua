-- Extend a reservation (a heartbeat): its visibility deadline becomes now +
-- visibility, if this rid still holds it. The watchdog renews reservations
-- with it, batched with lock renewals: it answers as lock_extend does.
-- KEYS: inflight, receipts
-- ARGV: id, rid, visibility_ms
-- Returns 1, or 0 when the reservation is not this rid's.
local held = redis.call('HGET', KEYS[2], ARGV[1])
local r = held and parse_reservation(held)
if not r or r.rid ~= ARGV[2] then return 0 end
local now = now_s()
redis.call('ZADD', KEYS[1], 'XX', float_text(now + tonumber(ARGV[3]) / 1000), ARGV[1])
return 1
