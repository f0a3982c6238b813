-- Release a lock if (and only if) it is still ours, handing it to the oldest
-- live waiter if there is one (overwriting the key), else deleting the key.
-- KEYS: lock, fence, waiters, leases[, legacy turn, next legacy turn]
-- ARGV: token, channel prefix[, turn ms, ms between turns]
-- With the legacy keys (legacy interop on), a release under sustained
-- contention may leave the key free for legacy pollers instead (see
-- legacy_turn in the prelude).
-- Returns 1 when released, 2 when released into a legacy pollers' turn, 0
-- when the lock was not ours (expired or taken).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('EXISTS', KEYS[3]) == 0 then
  -- Nobody waits: the uncontended case.
  redis.call('DEL', KEYS[1])
  return 1
end

-- slow path (build.rs defines the helpers used below here)
if KEYS[5] then
  local now = now_us()
  if legacy_turn(KEYS[5], KEYS[6], math.floor(now / 1000), tonumber(ARGV[3]), tonumber(ARGV[4])) then
    redis.call('DEL', KEYS[1])
    -- The oldest waiter re-checks now, and comes back when the turn ends.
    nudge_oldest(KEYS[3], KEYS[4], ARGV[2])
    return 2
  end
end
if not grant_next(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2]) then
  redis.call('DEL', KEYS[1])
end
return 1
