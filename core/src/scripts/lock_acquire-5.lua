-- Try to take a lock, in one atomic step.
-- KEYS: lock, fence, waiters, leases, ghosts[, legacy turn (legacy interop on)]
-- ARGV: token, ttl_ms, waiter_id ('' = do not register), fair ('1'/'0'),
--       lease_ms, channel prefix
-- An attempt of a non-fair lock that does not register (a Redlock attempt,
-- the first attempt of a lock whose fencing tokens are read: see
-- lock/single.rs) sends only KEYS lock, fence and ARGV token, ttl_ms: every
-- key or argument costs Redis about 1,200 instructions (callgrind). That
-- short form neither clears ghosts nor waits its turn: a busy lock goes on
-- with the full form.
-- Returns the fencing token, as a string, when taken; an integer when not:
-- the holder's pttl (ms, >= 0) when held by another owner, -1 when it was just
-- handed to an older waiter (fair mode) or is held without expiry by another
-- library. The type tells the two apart, so the reply needs no table (an
-- array reply costs Redis about 5,000 instructions, callgrind).
local lock, fence, waiters, leases = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl, id = ARGV[1], tonumber(ARGV[2]), ARGV[3] or ''
local fair = ARGV[4] == '1'

-- The common case, kept short: free, and newcomers may take it. This writes
-- first, so a server refusing writes (OOM, NOREPLICAS, a replica after a
-- failover) answers with that error even when the lock is busy.
-- A legacy pollers' turn (see legacy_turn in the prelude) leaves the key free
-- for them: it is busy for us until the turn ends.
local turn = KEYS[6] and redis.call('PTTL', KEYS[6]) > 0
local taken = not fair and not turn and redis.call('SET', lock, token, 'NX', 'PX', ARGV[2])
if taken and id == '' then
  return next_fence(fence, ttl)
end

-- slow path (build.rs defines the helpers used below here)
local lease, channel, ghosts = tonumber(ARGV[5]), ARGV[6], KEYS[5]
local me = ''
if id ~= '' then me = id .. '|' .. ARGV[2] .. '|' .. token end
if taken then
  remove_waiter(waiters, leases, me)
  return next_fence(fence, ttl)
end

local holder = redis.call('GET', lock)
if holder == token then
  -- Handed over to us, or a retried acquire whose first reply was lost. The
  -- TTL starts again, so that it counts from this call (Redlock computes the
  -- validity of a hold from the start of its attempt). A new fencing token is
  -- drawn: no one has seen the one of the hand-over (its message went
  -- unread), and a hold taken by a plain SET NX (see lock/single.rs) has none yet,
  -- so the counter may still hold the previous holder's.
  redis.call('PEXPIRE', lock, ARGV[2])
  if me ~= '' then remove_waiter(waiters, leases, me) end
  return next_fence(fence, ttl)
end

-- The short form (an attempt of a non-fair lock that does not register)
-- stops here: the lock is busy (a legacy orphan found expired is deleted,
-- and the lock taken).
if not waiters then
  local pttl = heal_orphan(lock)
  if pttl ~= -2 then return pttl end
  redis.call('SET', lock, token, 'PX', ARGV[2])
  return next_fence(fence, ttl)
end

-- A holder whose acquire was abandoned (lock_abandon-5.lua recorded its
-- token: the caller gave up after its reply was lost) holds nothing: its
-- write arrived late (a command delayed in the network, or run by a server
-- that was paused). It is cleared here, by the next contender.
local pttl = -2
if holder then
  if redis.call('SISMEMBER', ghosts, holder) == 1 then
    redis.call('DEL', lock)
  else
    pttl = heal_orphan(lock)
  end
  if pttl == -2 then holder = false end
end

local now = now_us()

local queued = redis.call('EXISTS', waiters) == 1
if queued then prune_waiters(waiters, leases, math.floor(now / 1000)) end

if not holder then
  if turn then
    -- Come back when the legacy pollers' turn ends.
    if me ~= '' then register_waiter(waiters, leases, me, now, lease) end
    return redis.call('PTTL', KEYS[6])
  end
  if fair and queued then
    -- Free while others wait (the holder's TTL ran out): the oldest goes first.
    local head = redis.call('ZRANGE', waiters, '0', '0')[1]
    if head and head ~= me then
      if me ~= '' then register_waiter(waiters, leases, me, now, lease) end
      local granted = grant_next(lock, fence, waiters, leases, channel, now)
      if granted and granted == me then
        return redis.call('GET', fence) or '0'
      elseif granted then
        return -1
      end
    end
  end
  redis.call('SET', lock, token, 'PX', ARGV[2])
  local f = next_fence(fence, ttl, now)
  if queued and me ~= '' then remove_waiter(waiters, leases, me) end
  return f
end

if me ~= '' then register_waiter(waiters, leases, me, now, lease) end
return pttl
