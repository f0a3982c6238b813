-- Release a lock if (and only if) it is still ours, handing it to the oldest
-- live waiter if there is one (overwriting the key), else deleting the key.
-- KEYS: lock, fence, waiters, leases
-- ARGV: token, channel prefix
-- Returns 1 when released, 0 when the lock was not ours (expired or taken).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('EXISTS', KEYS[3]) == 0 then
  -- Nobody waits: the uncontended case.
  redis.call('DEL', KEYS[1])
  return 1
end

-- slow path (build.rs defines the helpers used below here)
if not grant_next(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2]) then
  redis.call('DEL', KEYS[1])
end
return 1
