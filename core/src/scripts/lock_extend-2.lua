-- Set the remaining TTL of a lock if (and only if) it is still ours.
-- KEYS: lock, fence
-- ARGV: token, ttl_ms
-- Returns 1 when extended, 0 when the lock was not ours.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
-- The fencing counter must outlive the hold (it guards against the server
-- clock stepping back).
keep_alive(KEYS[2], tonumber(ARGV[2]) + 60000)
return 1
