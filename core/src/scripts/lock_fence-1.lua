-- Raise the fencing counter to at least `fence` (Redlock: after a quorum
-- granted the lock with the largest fence F, every master of the quorum
-- learns F, so any later quorum, which overlaps this one, issues more).
-- KEYS: fence
-- ARGV: fence, ttl_ms
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if current < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]) + 60000)
end
return 1
