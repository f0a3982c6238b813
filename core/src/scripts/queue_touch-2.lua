-- Extend a reservation (a heartbeat): its visibility deadline becomes now +
-- visibility, if this rid still holds it.
-- KEYS: inflight, receipts
-- ARGV: id, rid, visibility_ms ('' = the reservation's own), fallback_ms (for
--       a reservation that does not record its visibility)
-- Returns {1, deadline} or {0} when the reservation is not this rid's.
local held = redis.call('HGET', KEYS[2], ARGV[1])
local r = held and parse_reservation(held)
if not r or r.rid ~= ARGV[2] then return {0} end
local vis = tonumber(ARGV[3]) or r.vis or tonumber(ARGV[4])
local now = now_s()
local deadline = float_text(now + vis / 1000)
redis.call('ZADD', KEYS[1], 'XX', deadline, ARGV[1])
return {1, deadline}
