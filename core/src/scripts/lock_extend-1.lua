-- Set the remaining TTL of a lock if (and only if) it is still ours.
-- KEYS: lock
-- ARGV: token, ttl_ms
-- Returns 1 when extended, 0 when the lock was not ours.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
