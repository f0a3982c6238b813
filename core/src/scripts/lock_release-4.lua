-- Release a lock if (and only if) it is still ours, and hand it to the oldest
-- live waiter, if any.
-- KEYS: lock, fence, waiters, leases
-- ARGV: token, channel prefix
-- Returns 1 when released, 0 when the lock was not ours (expired or taken).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[3]) == 1 then
  local now = now_us()
  prune_waiters(KEYS[3], KEYS[4], math.floor(now / 1000))
  grant_next(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], now)
end
return 1
