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

-- The expiry a legacy PHP `RedisLock` wrote as the value of its key
-- (`(string)$expireAt`: a float unix time such as "1763700000.1235"), in
-- seconds; nil for any other value. A plausible time only (2001 to 2286):
-- a token of another library that happens to be all digits is no legacy
-- value.
local function legacy_expiry(value)
  if not value or not (string.match(value, '^%d+$') or string.match(value, '^%d+%.%d+$')) then
    return nil
  end
  local at = tonumber(value)
  if at and at >= 1000000000 and at < 10000000000 then return at end
  return nil
end

-- A key without expiry where only expiring keys are expected. If it is
-- provably a legacy orphan (its value is the legacy class's own expiry
-- time: a legacy client crashed between SETNX and EXPIRE), it gets the
-- expiry it should have had (the time left to the expiry it names), or is
-- deleted when that time has passed; it is never taken over, so two owners
-- are never let in. Any other key without expiry is someone else's lock
-- (redis-py's and python-redis-lock's have no TTL by default): it is left
-- alone, and waited for.
-- Returns the key's PTTL after healing: >= 0 while held, -2 when it does not
-- exist (or was an expired orphan, now deleted), -1 for another library's
-- lock without expiry.
local function heal_orphan(key)
  local pttl = redis.call('PTTL', key)
  if pttl ~= -1 then return pttl end
  local at = legacy_expiry(redis.call('GET', key))
  if not at then return -1 end
  local t = redis.call('TIME')
  local left = math.floor((at - tonumber(t[1])) * 1000 - tonumber(t[2]) / 1000)
  if left <= 0 then
    redis.call('DEL', key)
    return -2
  end
  redis.call('PEXPIRE', key, digits(left))
  return left
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
-- The counter lives ttl + 60 s past its last write (a draw, an extend or a
-- renewal by script), and at least 30 s past the hold's expiry in any case
-- (an extend by a native `SET … IFEQ`, which leaves it alone, is used only
-- while that holds: `Extender` in lock/mod.rs): a server clock stepping back
-- by more than that between two draws is not covered.
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
-- Another library's key without expiry on that name is waited for, re-checked
-- at the legacy poll interval (100 ms).
local function legacy_queue_lock(key, check)
  if check ~= '1' then return nil end
  local pttl = heal_orphan(key)
  if pttl == -2 then return nil end
  if pttl == -1 then return 100 end
  return pttl
end

-- The keys of a queue, in the order every queue script that takes, returns
-- or adds tasks receives them (see keys.rs).
local function queue_keys()
  return {
    queue = KEYS[1], legacy = KEYS[2], inflight = KEYS[3], receipts = KEYS[4],
    waiters = KEYS[5], leases = KEYS[6], attempts = KEYS[7], payloads = KEYS[8],
    dead = KEYS[9], pending = KEYS[10],
  }
end

-- A reservation as `receipts` keeps it, with everything that decides the
-- task's fate when it ends, so that consumers with different settings on one
-- queue agree on it:
--   <rid>/<attempt>/<max>/<backoff_ms>/<cap_ms>/<jitter>/<visibility_ms>/<flags>|<score>
-- max 0: unlimited attempts; jitter: the fraction the backoff is cut by;
-- flags: 'p' the task has a payload, 'e' it was enqueued again while in
-- flight. Ferrolock before attempts wrote `<rid>|<score>`: then only rid and
-- score are set. The score is read as a number (Redis prints it back
-- exactly), so a value edited by hand (" 0.5") does not stop every take.
-- Returns nil when `held` is not a reservation.
local function parse_reservation(held)
  local head, score = string.match(held, '^([^|]*)|(.*)$')
  if not head then return nil end
  local r = {rid = head, score = tonumber(score)}
  local rid, attempt, max, base, cap, jitter, vis, flags = string.match(head,
    '^([^/]*)/(%d+)/(%d+)/(%d+)/(%d+)/([^/]*)/(%d+)/(%a*)$')
  if rid then
    r.rid, r.attempt, r.max, r.base, r.cap = rid, tonumber(attempt), tonumber(max),
      tonumber(base), tonumber(cap)
    r.jitter, r.vis, r.flags = tonumber(jitter) or 0, tonumber(vis), flags
  end
  return r
end

-- Whether reservation `r` may carry flag `f` (one written before flags
-- existed may carry any).
local function has_flag(r, f)
  return not r.flags or string.find(r.flags, f, 1, true) ~= nil
end

-- How long (s) a task waits after failing its attempt `r.attempt`:
-- backoff·2^(attempt−1), at most the cap, cut by its jitter (a fraction the
-- client drew: Lua's math.random is not random here).
local function backoff_s(r)
  local d = r.base * 2 ^ (r.attempt - 1)
  if d > r.cap then d = r.cap end
  return d * (1 - r.jitter) / 1000
end

-- Queues `id` due at `score` (a number), or moves it earlier when it is
-- queued already: one task, due at the earlier of the two times.
local function queue_at(queue, id, score)
  local current = redis.call('ZSCORE', queue, id)
  if not current or score < tonumber(current) then
    redis.call('ZADD', queue, float_text(score), id)
  end
end

-- The scores of `ids` in `key` (false where absent): ZMSCORE (Redis 6.2),
-- else one ZSCORE each.
local function scores_of(key, ids)
  local ok, s = pcall(redis.call, 'ZMSCORE', key, unpack(ids))
  if ok then return s end
  s = {}
  for i, id in ipairs(ids) do s[i] = redis.call('ZSCORE', key, id) end
  return s
end

-- An enqueue of `id` while it is in flight is remembered in `pending` (as
-- "<score>" or "<score>|<payload>") and applied when the reservation ends:
-- never two consumers on one id. The first score wins, as in the queue; a
-- payload replaces an earlier one (nil keeps it). The reservation is flagged
-- 'e', so that its end looks for it. Returns 1 when none was pending yet.
local function remember_pending(K, id, score_text, payload)
  local old = redis.call('HGET', K.pending, id)
  local s = score_text
  if old then
    local sep = string.find(old, '|', 1, true)
    if sep then
      s = string.sub(old, 1, sep - 1)
      if payload == nil then payload = string.sub(old, sep + 1) end
    else
      s = old
    end
  else
    local held = redis.call('HGET', K.receipts, id)
    local head, flags, rest = string.match(held or '', '^(.*/)(%a*)(|.*)$')
    if head and not string.find(flags, 'e', 1, true) then
      redis.call('HSET', K.receipts, id, head .. flags .. 'e' .. rest)
    end
  end
  if payload then s = s .. '|' .. payload end
  redis.call('HSET', K.pending, id, s)
  if old then return 0 end
  return 1
end

-- Takes the enqueue remembered for `id` off the books: its score (a number)
-- and payload (nil when it sent none); nil when there is none.
local function take_pending(pending, id)
  local v = redis.call('HGET', pending, id)
  if not v then return nil end
  redis.call('HDEL', pending, id)
  local sep = string.find(v, '|', 1, true)
  if sep then return tonumber(string.sub(v, 1, sep - 1)), string.sub(v, sep + 1) end
  return tonumber(v), nil
end

-- Ends reservation `r` of `id`, which failed (a nack, or its visibility ran
-- out): the task goes back to the queue due `delay` s after `now` (nil: after
-- its backoff), or to the dead set (payload kept) when that was its last
-- attempt. An enqueue that came meanwhile merges in: the task is due at the
-- earlier time, with the newer payload; after a last attempt it starts over
-- with its attempts reset (the enqueue asked for a new run). Returns the
-- score it was queued at, or nil when it is dead.
local function end_reservation(K, id, r, now, delay)
  redis.call('ZREM', K.inflight, id)
  redis.call('HDEL', K.receipts, id)
  local again, payload
  if has_flag(r, 'e') then again, payload = take_pending(K.pending, id) end
  if payload then redis.call('HSET', K.payloads, id, payload) end
  local score
  if not r.attempt then
    -- Reserved by a ferrolock without attempts: back as it did then.
    score = r.score or now
    if again and again < score then score = again end
  elseif r.max > 0 and r.attempt >= r.max then
    if not again then
      redis.call('ZADD', K.dead, float_text(now), id)
      redis.call('HSET', K.attempts, id, digits(r.attempt))
      return nil
    end
    redis.call('HDEL', K.attempts, id)
    score = again
  else
    redis.call('HSET', K.attempts, id, digits(r.attempt))
    score = now + (delay or backoff_s(r))
    if again and again < score then score = again end
  end
  queue_at(K.queue, id, score)
  return score
end

-- Acknowledges the reservation of `id` made by `rid`: the task is done; its
-- payload and attempts go. An enqueue that came while it was in flight
-- queues it again as a new task (attempts 0; the newer payload, else the
-- one it had). Returns 1, or 0 when the reservation is not `rid`'s (it
-- ended, maybe went to another consumer: that claim is left alone).
local function ack_reservation(K, id, rid, channel)
  local held = redis.call('HGET', K.receipts, id)
  local r = held and parse_reservation(held)
  if not r or r.rid ~= rid then return 0 end
  redis.call('ZREM', K.inflight, id)
  redis.call('HDEL', K.receipts, id)
  local again, payload
  if has_flag(r, 'e') then again, payload = take_pending(K.pending, id) end
  if again then
    if payload then redis.call('HSET', K.payloads, id, payload) end
    redis.call('HDEL', K.attempts, id)
    queue_at(K.queue, id, again)
    if redis.call('EXISTS', K.waiters) == 1 then
      wake_waiters(K.waiters, K.leases, channel, 1, '')
    end
    return 1
  end
  if has_flag(r, 'p') then redis.call('HDEL', K.payloads, id) end
  if not r.attempt or r.attempt > 1 then redis.call('HDEL', K.attempts, id) end
  return 1
end

-- Gives the reservation of `id` made by `rid` back (see end_reservation),
-- due `delay` s from `now` (nil: after its backoff). Returns 1 when it went
-- back to the queue, 2 when it went to the dead set, 0 when the reservation
-- is not `rid`'s.
local function nack_reservation(K, id, rid, delay, now, channel)
  local held = redis.call('HGET', K.receipts, id)
  local r = held and parse_reservation(held)
  if not r or r.rid ~= rid then return 0 end
  local score = end_reservation(K, id, r, now, delay)
  if not score then return 2 end
  if redis.call('EXISTS', K.waiters) == 1 then
    -- A waiter re-reads when work is next due.
    prune_waiters(K.waiters, K.leases, math.floor(now * 1000))
    wake_waiters(K.waiters, K.leases, channel, 1, '')
  end
  return 1
end

-- Ends the reservations whose visibility deadline passed (their consumer
-- died or stalled) as failed attempts (see end_reservation). Returns how
-- many of them are due at once.
local function reclaim_expired(K, now, now_text)
  local expired = redis.call('ZRANGEBYSCORE', K.inflight, '-inf', now_text, 'LIMIT', '0', '256')
  local due = 0
  for _, id in ipairs(expired) do
    local held = redis.call('HGET', K.receipts, id)
    local r = held and parse_reservation(held)
    local score
    if r then
      score = end_reservation(K, id, r, now, nil)
    else
      redis.call('ZREM', K.inflight, id)
      score = now
      queue_at(K.queue, id, score)
    end
    if score and score <= now then due = due + 1 end
  end
  return due
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

-- The values of `ids` in hash `key` (false where none), 1000 ids per HMGET
-- (unpack has a stack limit).
local function hash_values(key, ids)
  local out = {}
  for i = 1, #ids, 1000 do
    local got = redis.call('HMGET', key, unpack(ids, i, math.min(i + 999, #ids)))
    for j = 1, #got do out[i + j - 1] = got[j] end
  end
  return out
end

-- The payloads (false where none) and attempts of `ids` — 0 in place of a
-- list when none of them has any — and, with `forget`, deletes them (the
-- tasks leave the queue for good).
local function task_data(K, ids, forget)
  local out = {}
  for i, key in ipairs({K.payloads, K.attempts}) do
    local values, any = hash_values(key, ids), false
    for j = 1, #ids do any = any or values[j] end
    if any and forget then
      for j = 1, #ids, 1000 do redis.call('HDEL', key, unpack(ids, j, math.min(j + 999, #ids))) end
    end
    out[i] = any and values or 0
  end
  return out[1], out[2]
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
