-- Shared helpers: build.rs puts in each script the ones it calls (a helper is
-- a `local function` at the start of a line with the comments above it): in
-- front, or at the script's `-- slow path` line if only code below it calls
-- them.
-- Times come from the server clock (TIME), so every client agrees on "now".

-- An integral number as the decimal string Redis expects. Redis formats a Lua
-- number passed to redis.call with "%.17g" (glibc's multi-precision float
-- printing): about 5% of the instructions Redis ran for the lock scripts
-- (callgrind).
-- string.format('%d') prints an integer instead, exact up to 2^53 (Lua's
-- integer format is a C long: 64 bits on the platforms Redis supports).
local function digits(n)
  return string.format('%d', n)
end

-- Server time in microseconds (an integer, exact in a Lua double until 2255).
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- A float as the text Redis makes of a Lua number ("%.17g", which reads
-- back as the same double). Formatting costs Redis about 5,000 instructions
-- (callgrind): a value sent many times is formatted once, here.
local function float_text(x)
  return string.format('%.17g', x)
end

-- Server time in seconds, the float unix time queue scores use: as a number,
-- and as exact decimal text ("<s>.<µs>") for redis.call, which needs no
-- float formatting. Both read as the same double.
local function now_s()
  local t = redis.call('TIME')
  local text = t[1] .. '.' .. string.rep('0', 6 - #t[2]) .. t[2]
  return tonumber(text), text
end

-- A key without expiry where only expiring keys are expected is an orphan left
-- by a legacy client that crashed between SETNX and EXPIRE. Legacy clients
-- steal such keys; we only give them the expiry they should have had, so that
-- they free themselves without ever letting two owners in.
-- Returns the key's PTTL after healing (-2 when it does not exist).
local function heal_orphan(key, ttl_ms)
  local pttl = redis.call('PTTL', key)
  if pttl == -1 then
    redis.call('PEXPIRE', key, digits(ttl_ms))
    return ttl_ms
  end
  return pttl
end

-- Waiters: `waiters` orders them by arrival (score = µs), `leases` holds the
-- deadline (ms) by which each must check in again. A member is
-- `<hub>:<id>` (queue consumers) or `<hub>:<id>|<ttl_ms>|<token>` (lock
-- waiters: enough to hand the lock over). `<hub>` names the waiter's
-- process, which listens on one channel for all its waiters (see
-- wait/hub.rs in the Rust crate): `fl:w:<hub>`, or, when `<hub>` starts with
-- `s` (a Cluster with sharded pub/sub), `{t}fl:w:<hub>` in the slot of the
-- keys. `channel` is `{t}fl:w:` (the scripts' channel argument).

-- The channel of `member`'s process, its waiter id, and whether the channel
-- is sharded; nil for a member of another form.
local function waiter_channel(channel, member)
  local hub, id = string.match(member, '^([^:|]+):([^|]+)')
  if not hub then return nil end
  if string.sub(hub, 1, 1) == 's' then
    return channel .. hub, id, true
  end
  return string.gsub(channel, '^{[^}]*}', '') .. hub, id, false
end

-- Publishes `message` on a waiter's channel; how many processes heard it.
local function notify(ch, sharded, message)
  if sharded then return redis.call('SPUBLISH', ch, message) end
  return redis.call('PUBLISH', ch, message)
end

-- True when a process listens on the waiter channel `ch` on this server.
local function listening(ch, sharded)
  if sharded then return redis.call('PUBSUB', 'SHARDNUMSUB', ch)[2] > 0 end
  return redis.call('PUBSUB', 'NUMSUB', ch)[2] > 0
end

-- Drops waiters whose lease ran out (their process stopped checking in).
-- Returns how many were dropped.
local function prune_waiters(waiters, leases, now_ms)
  local dead = redis.call('ZRANGEBYSCORE', leases, '-inf', digits(now_ms), 'LIMIT', '0', '64')
  if #dead > 0 then
    redis.call('ZREM', waiters, unpack(dead))
    redis.call('ZREM', leases, unpack(dead))
  end
  return #dead
end

-- Makes `key` live at least `ttl_ms` more (never shortens it: waiters of one
-- name may have different leases).
local function keep_alive(key, ttl_ms)
  local current = redis.call('PTTL', key)
  if current == -1 or (current >= 0 and current < ttl_ms) then
    redis.call('PEXPIRE', key, digits(ttl_ms))
  end
end

-- Adds a waiter (keeping its first arrival time) and renews its lease.
local function register_waiter(waiters, leases, member, now, lease_ms)
  redis.call('ZADD', waiters, 'NX', digits(now), member)
  redis.call('ZADD', leases, digits(math.floor(now / 1000) + lease_ms), member)
  keep_alive(waiters, lease_ms * 2)
  keep_alive(leases, lease_ms * 2)
end

local function remove_waiter(waiters, leases, member)
  redis.call('ZREM', waiters, member)
  redis.call('ZREM', leases, member)
end

-- Wakes up to `n` of the oldest waiters (other than `skip`) and takes them
-- off the list: a woken consumer registers again if it finds nothing, so the
-- next wake-up goes to someone else. `w:<id>` goes to the waiter's process;
-- PUBLISH answers how many processes heard it: 0 means that process is gone
-- (or no longer listens here), so the waiter is dropped and the next one
-- tried.
local function wake_waiters(waiters, leases, channel, n, skip)
  local woken, offset, budget = 0, 0, n + 16
  while woken < n and budget > 0 do
    budget = budget - 1
    local member = redis.call('ZRANGE', waiters, digits(offset), digits(offset))[1]
    if not member then break end
    if member == skip then
      offset = offset + 1
    else
      local ch, id, sharded = waiter_channel(channel, member)
      if ch and notify(ch, sharded, 'w:' .. id) > 0 then
        woken = woken + 1
      end
      remove_waiter(waiters, leases, member)
    end
  end
  return woken
end

-- Fencing token: strictly increasing per name. It is the server clock (µs),
-- which keeps it increasing even after the key expired or a failover lost it,
-- or one more than the last token when the clock is not past that (it stepped
-- back). `now` (µs) is read from the server clock when not given. Returns the
-- token as decimal text, as the acquire script answers it.
-- This is most of a free lock's scripted acquire (see lock/single.rs for when an
-- acquire is scripted), so it is kept short: SET with GET (Redis 6.2) writes
-- the new token and reads the last in one command, and the clock becomes
-- text by concatenation, not number formatting. With the acquire's
-- plain-string reply, Redis runs a sixth fewer instructions per such acquire
-- than with GET, SET and a table (callgrind: 81k -> 67k).
-- The counter lives ttl + 60 s past its last write (a draw, an extend, a
-- renewal): a server clock stepping back by more than that between two
-- draws is not covered.
-- Redis 6.0 and 6.1 refuse SET's GET option (a syntax error; nothing is
-- written): there, and only after that refusal, the last token is read and
-- the new one written in two commands. A script error here would come after
-- the lock was taken, leaving it held by a token nobody has.
local function next_fence(fence, ttl_ms, now)
  local f
  if now then
    f = digits(now)
  else
    local t = redis.call('TIME')
    f = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
  end
  local px = digits(ttl_ms + 60000)
  local last = redis.pcall('SET', fence, f, 'PX', px, 'GET')
  if type(last) == 'table' and last.err then
    last = redis.call('GET', fence)
    redis.call('SET', fence, f, 'PX', px)
  end
  if last and tonumber(last) >= tonumber(f) then
    f = digits(tonumber(last) + 1)
    redis.call('SET', fence, f, 'PX', px)
  end
  return f
end

-- Hands a free lock straight to the oldest live waiter: sets the key to its
-- token and publishes 'g:<id>:<fence>' on its process's channel, so it holds
-- the lock the moment it reads the message (no second round trip). A waiter
-- is live when its lease has not run out (expired ones are pruned first) and
-- its process listens on this node: PUBSUB NUMSUB (SHARDNUMSUB) is checked
-- before publishing, because a PUBLISH also travels to replicas and other
-- cluster nodes, where a stale subscription of the same process must not
-- read a grant that was never made. Dead waiters are dropped. `now` (µs) is read from the server clock when not
-- given, and only when someone waits: a release without waiters stays short.
-- Returns the member granted, or nil (the caller then frees the lock).
local function grant_next(lock, fence, waiters, leases, channel, now)
  local member = redis.call('ZRANGE', waiters, '0', '0')[1]
  if not member then return nil end
  now = now or now_us()
  if prune_waiters(waiters, leases, math.floor(now / 1000)) > 0 then
    member = redis.call('ZRANGE', waiters, '0', '0')[1]
  end
  for _ = 1, 64 do
    if not member then return nil end
    remove_waiter(waiters, leases, member)
    local ttl, token = string.match(member, '^[^|]*|(%d+)|(.*)$')
    local ch, id, sharded = waiter_channel(channel, member)
    if ttl and ch and listening(ch, sharded) then
      local f = next_fence(fence, tonumber(ttl), now)
      redis.call('SET', lock, token, 'PX', ttl)
      notify(ch, sharded, 'g:' .. id .. ':' .. f)
      return member
    end
    member = redis.call('ZRANGE', waiters, '0', '0')[1]
  end
  return nil
end

-- Wakes the oldest live waiter to re-check, leaving it in its place in the
-- line (a dead one, whose process no longer listens, is dropped and the
-- next tried).
local function nudge_oldest(waiters, leases, channel)
  for _ = 1, 16 do
    local member = redis.call('ZRANGE', waiters, '0', '0')[1]
    if not member then return end
    local ch, id, sharded = waiter_channel(channel, member)
    if ch and notify(ch, sharded, 'w:' .. id) > 0 then return end
    remove_waiter(waiters, leases, member)
  end
end

-- Legacy pollers' turns. A legacy client (SETNX, then sleep one poll
-- interval) never gets a lock that releases hand straight from one waiter
-- to the next: the key is never free when it looks. While legacy interop is
-- on, a release under sustained contention leaves the key free instead, for
-- a little over one poll interval (`window_ms`), at most once per
-- `every_ms`: `win` exists while the turn lasts (ferrolock attempts treat
-- the free key as busy until then), and `nxt` holds the server time (ms)
-- before which no new turn starts. `nxt` lives 2 * every_ms, so a turn only
-- comes after contention that lasted `every_ms`.
-- Returns true when this release starts a turn.
local function legacy_turn(win, nxt, now_ms, window_ms, every_ms)
  local at = redis.call('GET', nxt)
  if at and now_ms < tonumber(at) then return false end
  redis.call('SET', nxt, digits(now_ms + every_ms), 'PX', digits(every_ms * 2))
  if not at then return false end
  redis.call('SET', win, '1', 'PX', digits(window_ms))
  return true
end

-- Legacy PHP clients hold `Lock:Queue:<name>` around their multi-step queue
-- operations. Returns its PTTL when held (our caller then waits), nil when free.
local function legacy_queue_lock(key, check)
  if check ~= '1' then return nil end
  local pttl = heal_orphan(key, 15000)
  if pttl == -2 then return nil end
  return pttl
end

-- Tasks whose consumer did not ack before the visibility deadline go back to
-- the queue with their original score (unless the id was queued again).
-- `now_text`: the time as now_s's text.
local function reclaim_expired(queue, inflight, receipts, now_text)
  local expired = redis.call('ZRANGEBYSCORE', inflight, '-inf', now_text, 'LIMIT', '0', '256')
  for _, id in ipairs(expired) do
    local receipt = redis.call('HGET', receipts, id)
    local score = now_text
    if receipt then
      -- As a number (Redis prints it back exactly), not the stored text: a
      -- receipt edited by hand (" 0.5", "1e400") must not stop every pop.
      local sep = string.find(receipt, '|', 1, true)
      if sep then score = tonumber(string.sub(receipt, sep + 1)) or now_text end
    end
    redis.call('ZADD', queue, 'NX', score, id)
    redis.call('ZREM', inflight, id)
    redis.call('HDEL', receipts, id)
  end
  return #expired
end

-- Removes from `queue` the ids of `items` (id, score, id, score, ...), at
-- most 1000 per ZREM (unpack has a stack limit). Returns `items`.
local function remove_taken(queue, items)
  local ids = {}
  for i = 1, #items, 2 do
    ids[#ids + 1] = items[i]
    if #ids >= 1000 then
      redis.call('ZREM', queue, unpack(ids))
      ids = {}
    end
  end
  if #ids > 0 then redis.call('ZREM', queue, unpack(ids)) end
  return items
end

-- The earliest time (unix s, as a string) at which work may appear without
-- an enqueue: the next delayed task or the next visibility deadline. '' if none.
local function next_work_at(queue, inflight)
  local a = redis.call('ZRANGE', queue, '0', '0', 'WITHSCORES')[2]
  local b = redis.call('ZRANGE', inflight, '0', '0', 'WITHSCORES')[2]
  if a and b then
    if tonumber(a) < tonumber(b) then return a end
    return b
  end
  return a or b or ''
end
