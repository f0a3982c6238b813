-- Take due tasks: pop them (mode 'pop') or reserve them (mode 'reserve'),
-- lowest score first, ties by id. Before that, in the same step, it may
-- finish a reservation (the worker loop's one round trip per job: ack this,
-- take the next), and it ends the reservations whose visibility ran out.
-- An id that is in flight (a legacy client queued it again) is not handed
-- out: it is remembered as enqueued again, as enqueue does.
-- Every take has a request id (rid: the receipt of the tasks it reserves).
-- What it took is recorded under `record` (`<aux>r:<rid>`, 5 minutes), so
-- that a take whose reply was lost can be answered again: the same rid sent
-- again (a client retrying, the cluster client resending after an I/O
-- error) gets the recorded reply and takes nothing more; a record set to
-- 'x' (a tombstone: queue_settle gave the tasks back) answers {-2}. The
-- client sends the rids whose replies it got, and their records go.
-- KEYS: queue, legacy queue lock (or the queue), inflight, receipts, waiters, leases,
--       attempts, payloads, dead, pending, record
-- ARGV: 1 mode, 2 count, 3 check_legacy, 4 channel prefix, 5 waiter_id ('' = do not
--       register), 6 lease_ms, 7 visibility_ms (reserve), 8 rid, 9 max_attempts
--       (0: unlimited), 10 backoff_ms, 11 backoff_cap_ms, 12 jitter ratio, 13 jitter
--       seed in [0, 1); then 14 finish ('', 'ack', 'nack'), 15 its id, 16 its rid,
--       17 its delay ('' = backoff); 18 the records' key prefix, 19 the middle of
--       the first task's reservation text, as the client wrote it from 7 and 9-13
--       ('/max/backoff/cap/jitter/visibility/', jitter as below for i = 1), 20...
--       rids whose replies arrived
-- Returns {1, {id, score, ...}, payloads, attempts, deadline, finished}, where
--   payloads and attempts are lists (false: none) or 0 when no task has any,
--   deadline is the visibility deadline of reserved tasks ('' for pop), and
--   finished what the finish answered (ack: 1/0, nack: 1/2/0; -1: none);
--   {3, id, score, payload (false: none), attempts, deadline, finished}: the
--   same for one reserved task, as the worker loop's common case answers;
--   {0, next_work_at, now, 0, '', finished} when nothing is due (the waiter is
--   registered);
--   {-1, pttl} while a legacy client holds the queue lock (nothing done);
--   {-2} when the rid's take was given up (a tombstone).
-- The record, and the legacy queue lock when it is checked, in one read
-- (MGET: both are strings; where the lock is not checked, on a cluster,
-- KEYS[2] is the queue itself). An ACL without MGET (the README's list
-- before it was used) gets the two reads of before.
local recorded, legacy_held = nil, false
if ARGV[3] == '1' then
  local both = redis.pcall('MGET', KEYS[11], KEYS[2])
  if both.err then
    recorded, legacy_held = redis.call('GET', KEYS[11]), true
  else
    recorded, legacy_held = both[1], both[2]
  end
else
  recorded = redis.call('GET', KEYS[11])
end
if recorded then
  if recorded == 'x' then return {-2} end
  return cmsgpack.unpack(recorded)[2]
end
if #ARGV >= 20 then
  local gone = {}
  for i = 20, #ARGV do gone[#gone + 1] = ARGV[18] .. ARGV[i] end
  redis.call('DEL', unpack(gone))
end
-- The common cases below call no helper of the prelude: each helper a
-- script defines costs Redis a closure on every call (build.rs), so they are
-- all defined at the slow path's line. Keys by number: queue 1, inflight 3,
-- receipts 4, waiters 5, attempts 7, payloads 8 (see queue_keys). A legacy
-- queue lock that exists (held, or an orphan to heal) goes the slow way,
-- which checks it before anything is done.
local mode, count, me, channel = ARGV[1], ARGV[2], ARGV[5], ARGV[4]
local now, now_text
local finished, slow = -1, false
local common = not legacy_held
if common then
  -- As now_s does.
  local t = redis.call('TIME')
  now_text = t[1] .. '.' .. string.rep('0', 6 - #t[2]) .. t[2]
  now = tonumber(now_text)
end
if common and mode == 'pop' and ARGV[14] == ''
    and redis.call('EXISTS', KEYS[3], KEYS[8], KEYS[7], KEYS[5]) == 0 then
  -- The common case of a legacy-style queue: no reservation, payload,
  -- attempt or waiting consumer anywhere.
  local items = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_text, 'WITHSCORES', 'LIMIT', '0', count)
  if #items > 0 then
    -- As remove_taken does.
    local ids = {}
    for i = 1, #items, 2 do
      ids[#ids + 1] = items[i]
      if #ids >= 1000 then
        redis.call('ZREM', KEYS[1], unpack(ids))
        ids = {}
      end
    end
    if #ids > 0 then redis.call('ZREM', KEYS[1], unpack(ids)) end
    local reply = {1, items, 0, 0, '', -1}
    redis.call('SET', KEYS[11], cmsgpack.pack({mode, reply}), 'PX', '300000')
    return reply
  end
end

-- The worker loop's common case, with no helper of the slow path (each
-- would cost a closure per call): ack a reservation nobody enqueued again
-- meanwhile, then reserve the one task due first, which is not in flight;
-- no reservation expired, nobody waiting. Anything else goes the slow way
-- below (which then does not finish again what this did).
local first_flying = common and mode == 'reserve' and count == '1' and ARGV[14] ~= 'nack'
  and redis.call('ZRANGE', KEYS[3], '0', '1', 'WITHSCORES')
-- Waiters, payloads and attempts asked in one EXISTS: in a queue without
-- payloads or retries none of them exists; else the waiters again alone.
local data = first_flying and not (first_flying[2] and tonumber(first_flying[2]) <= now)
  and redis.call('EXISTS', KEYS[5], KEYS[8], KEYS[7])
if data and (data == 0 or redis.call('EXISTS', KEYS[5]) == 0) then
  if ARGV[14] == 'ack' then
    local id = ARGV[15]
    local held = redis.call('HGET', KEYS[4], id)
    local rid, attempt, flags = string.match(held or '', '^([^/|]*)/(%d+)/[^|]*/(%a*)|')
    if held and not rid then
      slow = true -- a reservation of an older ferrolock
    elseif rid ~= ARGV[16] then
      finished = 0
    elseif string.find(flags, 'e', 1, true) then
      slow = true -- enqueued again while in flight
    else
      redis.call('ZREM', KEYS[3], id)
      redis.call('HDEL', KEYS[4], id)
      if string.find(flags, 'p', 1, true) then redis.call('HDEL', KEYS[8], id) end
      if tonumber(attempt) > 1 then redis.call('HDEL', KEYS[7], id) end
      finished = 1
    end
  end
  -- The first task, popped (ZPOPMIN orders as ZRANGEBYSCORE does: lowest
  -- score, then id), and put back (same score text: the same double) unless
  -- it is taken here: not due yet, or in flight. An ACL without ZPOPMIN
  -- (the README's list before it was used) reads it, and removes it below.
  local item, popped = false, false
  if not slow then
    item = redis.pcall('ZPOPMIN', KEYS[1])
    if item.err then
      item = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_text, 'WITHSCORES', 'LIMIT', '0', '1')
    else
      popped = true
      if item[1] and tonumber(item[2]) > now then
        redis.call('ZADD', KEYS[1], item[2], item[1])
        item = false
      end
    end
  end
  -- In flight too (a legacy enqueue)? Only asked when anything was in
  -- flight besides what was just acked (the first two tell).
  local others = first_flying[3] or (first_flying[1] and first_flying[1] ~= ARGV[15])
  local flying = item and item[1] and others and redis.call('ZSCORE', KEYS[3], item[1])
  if flying and popped then redis.call('ZADD', KEYS[1], item[2], item[1]) end
  if item and item[1] and not flying then
    local id, score = item[1], item[2]
    local payload, n = false, 1
    if data > 0 then
      payload = redis.call('HGET', KEYS[8], id)
      n = (tonumber(redis.call('HGET', KEYS[7], id)) or 0) + 1
    end
    local deadline = string.format('%.17g', now + tonumber(ARGV[7]) / 1000) -- float_text
    local flags = ''
    if payload then flags = 'p' end
    if not popped then redis.call('ZREM', KEYS[1], id) end
    redis.call('ZADD', KEYS[3], deadline, id)
    -- The reservation text as the slow path writes it, its middle (settings
    -- and the jitter of task 1) written by the client: no number formatted
    -- or parsed here ('1' as text for a first attempt).
    redis.call('HSET', KEYS[4], id, ARGV[8] .. '/' .. (n == 1 and '1' or n) .. ARGV[19] .. flags .. '|' .. score)
    -- One flat list (code 3) for the one task taken here: cheaper to build,
    -- to record and to send than code 1's nested lists.
    local reply = {3, id, score, payload, n, deadline, finished}
    redis.call('SET', KEYS[11], cmsgpack.pack({mode, reply}), 'PX', '300000')
    return reply
  end
end

-- slow path (build.rs defines the helpers used below here)
local K = queue_keys()
local busy = legacy_held and legacy_queue_lock(K.legacy, ARGV[3])
if busy then return {-1, busy} end
if not now then now, now_text = now_s() end
if finished ~= -1 then
  -- done above
elseif ARGV[14] == 'ack' then
  finished = ack_reservation(K, ARGV[15], ARGV[16], channel)
elseif ARGV[14] == 'nack' then
  finished = nack_reservation(K, ARGV[15], ARGV[16], tonumber(ARGV[17]), now, channel)
end
local spare = 0
if redis.call('ZRANGEBYSCORE', K.inflight, '-inf', now_text, 'LIMIT', '0', '1')[1] then
  spare = reclaim_expired(K, now, now_text)
end
local has_waiters = redis.call('EXISTS', K.waiters) == 1
local items = redis.call('ZRANGEBYSCORE', K.queue, '-inf', now_text, 'WITHSCORES', 'LIMIT', '0', count)
if has_waiters then prune_waiters(K.waiters, K.leases, math.floor(now * 1000)) end
-- As a number too (exact up to 2^53; a count beyond that is "all").
local wanted = math.min(tonumber(count), 2 ^ 53)
local ids, scores = {}, {}
for _ = 1, 8 do
  local found, found_scores = {}, {}
  for i = 1, #items, 2 do
    found[#found + 1] = items[i]
    found_scores[#found_scores + 1] = items[i + 1]
  end
  -- Queued and in flight at once (a legacy enqueue): it waits for the
  -- reservation, and the next due task is taken instead.
  local flying = {}
  if #found > 0 then flying = scores_of(K.inflight, found) end
  local conflicts = 0
  for i, id in ipairs(found) do
    if flying[i] then
      redis.call('ZREM', K.queue, id)
      remember_pending(K, id, found_scores[i], nil)
      conflicts = conflicts + 1
    else
      ids[#ids + 1] = id
      scores[#scores + 1] = found_scores[i]
    end
  end
  if conflicts == 0 or #ids >= wanted then break end
  -- Those kept are still first in the queue: read on after them.
  items = redis.call('ZRANGEBYSCORE', K.queue, '-inf', now_text, 'WITHSCORES', 'LIMIT',
    digits(#ids), digits(wanted - #ids))
end
if #ids == 0 then
  if me ~= '' then register_waiter(K.waiters, K.leases, me, math.floor(now * 1000000), tonumber(ARGV[6])) end
  local reply = {0, next_work_at(K.queue, K.inflight), now_text, 0, '', finished}
  if finished ~= -1 then
    -- The finish is done: a resent take must not do it again.
    redis.call('SET', KEYS[11], cmsgpack.pack({mode, reply}), 'PX', '300000')
  end
  return reply
end
if has_waiters then
  if me ~= '' then remove_waiter(K.waiters, K.leases, me) end
  -- Tasks reclaimed beyond what this call takes: let other consumers know.
  if spare > #ids then wake_waiters(K.waiters, K.leases, channel, spare - #ids, me) end
end
items = {}
for i, id in ipairs(ids) do
  items[#items + 1] = id
  items[#items + 1] = scores[i]
end
remove_taken(K.queue, items)
if mode ~= 'reserve' then
  local payloads, attempts = task_data(K, ids, true)
  local reply = {1, items, payloads, attempts, '', finished}
  redis.call('SET', KEYS[11], cmsgpack.pack({mode, reply}), 'PX', '300000')
  return reply
end
local payloads, attempts = task_data(K, ids, false)
local deadline = float_text(now + tonumber(ARGV[7]) / 1000)
local settings = '/' .. ARGV[9] .. '/' .. ARGV[10] .. '/' .. ARGV[11] .. '/'
local ratio, seed = tonumber(ARGV[12]), tonumber(ARGV[13])
local counts, flying, held = {}, {}, {}
for i, id in ipairs(ids) do
  local n = (attempts ~= 0 and tonumber(attempts[i]) or 0) + 1
  counts[i] = n
  -- Each task its own jitter, spread evenly from the client's one draw.
  local jitter = string.format('%.6f', ratio * ((seed + i * 0.6180339887498949) % 1))
  local flags = ''
  if payloads ~= 0 and payloads[i] then flags = 'p' end
  flying[#flying + 1] = deadline
  flying[#flying + 1] = id
  held[#held + 1] = id
  held[#held + 1] = ARGV[8] .. '/' .. n .. settings .. jitter .. '/' .. ARGV[7] .. '/' .. flags
    .. '|' .. scores[i]
  if #flying >= 1000 then
    redis.call('ZADD', K.inflight, unpack(flying))
    redis.call('HSET', K.receipts, unpack(held))
    flying, held = {}, {}
  end
end
if #flying > 0 then
  redis.call('ZADD', K.inflight, unpack(flying))
  redis.call('HSET', K.receipts, unpack(held))
end
local reply = {1, items, payloads, counts, deadline, finished}
redis.call('SET', KEYS[11], cmsgpack.pack({mode, reply}), 'PX', '300000')
return reply
