-- Try to take a lock, in one atomic step.
-- KEYS: lock, fence, waiters, leases
-- ARGV: token, ttl_ms, waiter_id ('' = do not register), fair ('1'/'0'),
--       lease_ms, channel prefix
-- Returns {1, fencing_token} when taken;
--         {0, pttl} when held by another owner (pttl of the holder, ms);
--         {0, -1} when free but another waiter's turn (fair mode).
local lock, fence, waiters, leases = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl, me = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local fair, lease, channel = ARGV[4] == '1', tonumber(ARGV[5]), ARGV[6]

local holder = redis.call('GET', lock)
if holder == token then
  -- A retried acquire whose first reply was lost: the lock is already ours.
  return {1, tonumber(redis.call('GET', fence) or '0')}
end

local now = now_us()
local queued = redis.call('EXISTS', waiters) == 1
if queued then prune_waiters(waiters, leases, math.floor(now / 1000)) end

if not holder then
  if fair and queued then
    local head = live_head(waiters, leases, channel, me)
    if head and head ~= me then
      if me ~= '' then register_waiter(waiters, leases, me, now, lease) end
      return {0, -1}
    end
  end
  redis.call('SET', lock, token, 'PX', ttl)
  -- Fencing token: strictly increasing per name. Taking the server clock (µs)
  -- keeps it increasing even after this key expired or a failover lost it.
  local f = math.max(tonumber(redis.call('GET', fence) or '0') + 1, now)
  redis.call('SET', fence, f, 'PX', ttl + 60000)
  if queued and me ~= '' then remove_waiter(waiters, leases, me) end
  return {1, f}
end

if me ~= '' then register_waiter(waiters, leases, me, now, lease) end
return {0, heal_orphan(lock, ttl)}
