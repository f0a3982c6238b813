-- What is in a queue, read in one step without scanning it: due and delayed
-- tasks, reservations (those whose visibility ran out included, until a take
-- ends them), dead tasks, and how long the oldest due task has waited (s).
-- KEYS: queue, inflight, dead
-- Returns {due, delayed, in_flight, dead, oldest_due_age}
local now, now_text = now_s()
local total = redis.call('ZCARD', KEYS[1])
local due = redis.call('ZCOUNT', KEYS[1], '-inf', now_text)
local age = 0
if due > 0 then
  local first = tonumber(redis.call('ZRANGE', KEYS[1], '0', '0', 'WITHSCORES')[2])
  if first < now then age = now - first end
end
return {due, total - due, redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3]),
  float_text(age)}
