-- Draw the fencing token of a hold that was taken without one (the plain
-- SET NX PX of an uncontended acquire), if (and only if) the lock is still
-- ours. Drawn now, inside the hold, it is larger than every token of an
-- earlier hold and smaller than every token of a later one, as if the acquire
-- had drawn it.
-- KEYS: lock, fence
-- ARGV: token, ttl_ms (the lock's)
-- Returns the token as decimal text; nil when the lock is not ours.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return false end
-- The counter must outlive the hold, which an extend may have made longer
-- than the lock's ttl.
local pttl = redis.call('PTTL', KEYS[1])
return next_fence(KEYS[2], math.max(tonumber(ARGV[2]), pttl))
