-- A waiter stops waiting. If the lock was handed to it meanwhile, it either
-- keeps it (timeout: report success) or gives it back to the next waiter
-- (interrupted). A free lock with waiters left is handed on.
-- KEYS: lock, fence, waiters, leases
-- ARGV: member, token, give_back ('1'/'0'), channel prefix
-- Returns {1, fencing_token} when the caller holds the lock, else {0}.
local lock, fence, waiters, leases = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
remove_waiter(waiters, leases, ARGV[1])
local holder = redis.call('GET', lock)
if holder == ARGV[2] then
  if ARGV[3] ~= '1' then
    return {1, tonumber(redis.call('GET', fence) or '0')}
  end
  if not grant_next(lock, fence, waiters, leases, ARGV[4]) then
    redis.call('DEL', lock)
  end
  return {0}
end
if not holder then
  grant_next(lock, fence, waiters, leases, ARGV[4])
end
return {0}
