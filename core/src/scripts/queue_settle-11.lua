-- Give up a take whose reply was lost (its caller is gone or out of time):
-- the tasks it took go back as they were — popped ones queued again with
-- their score, payload and attempts; reservations still held by its rid
-- returned with their score, the attempt not counted — and its record
-- becomes a tombstone, so that the take, should it still arrive, does
-- nothing. Idempotent: a second run finds the tombstone.
-- KEYS: queue, legacy queue lock (or the queue), inflight, receipts, waiters, leases,
--       attempts, payloads, dead, pending, record
-- ARGV: rid, channel prefix
-- Returns how many tasks went back.
local K = queue_keys()
local recorded = redis.call('GET', KEYS[11])
redis.call('SET', KEYS[11], 'x', 'PX', '300000')
if not recorded or recorded == 'x' then return 0 end
local mode, reply = unpack(cmsgpack.unpack(recorded))
local items, payloads, attempts
if reply[1] == 1 then
  items, payloads, attempts = reply[2], reply[3], reply[4]
elseif reply[1] == 3 then
  -- One reserved task, flat (see queue_take).
  items, payloads, attempts = {reply[2], reply[3]}, 0, {reply[5]}
  if reply[4] then payloads = {reply[4]} end
else
  return 0
end
local back = 0
for i = 1, #items, 2 do
  local id, score, n = items[i], tonumber(items[i + 1]), (i + 1) / 2
  if mode == 'pop' then
    if payloads ~= 0 and payloads[n] then redis.call('HSET', K.payloads, id, payloads[n]) end
    if attempts ~= 0 and tonumber(attempts[n]) then
      redis.call('HSET', K.attempts, id, attempts[n])
    end
    queue_at(K.queue, id, score)
    back = back + 1
  else
    local held = redis.call('HGET', K.receipts, id)
    local r = held and parse_reservation(held)
    if r and r.rid == ARGV[1] then
      redis.call('ZREM', K.inflight, id)
      redis.call('HDEL', K.receipts, id)
      local again, payload
      if has_flag(r, 'e') then again, payload = take_pending(K.pending, id) end
      if payload then redis.call('HSET', K.payloads, id, payload) end
      if r.attempt and r.attempt > 1 then
        redis.call('HSET', K.attempts, id, digits(r.attempt - 1))
      else
        redis.call('HDEL', K.attempts, id)
      end
      if again and again < score then score = again end
      queue_at(K.queue, id, score)
      back = back + 1
    end
  end
end
if back > 0 and redis.call('EXISTS', K.waiters) == 1 then
  wake_waiters(K.waiters, K.leases, ARGV[2], back, '')
end
return back
