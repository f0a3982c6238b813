-- Release a lock if (and only if) it is still ours, then wake one waiter.
-- KEYS: lock, waiters, leases
-- ARGV: token, channel prefix
-- Returns 1 when released, 0 when the lock was not ours (expired or taken).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[2]) == 1 then
  prune_waiters(KEYS[2], KEYS[3], math.floor(now_us() / 1000))
  wake_waiters(KEYS[2], KEYS[3], ARGV[2], 1)
end
return 1
