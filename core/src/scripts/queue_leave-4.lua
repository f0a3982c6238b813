-- A waiting consumer gives up. If due work is left, pass the wake-up on, in
-- case one was meant for the leaving consumer.
-- KEYS: queue, inflight, waiters, leases
-- ARGV: waiter_id, channel prefix
remove_waiter(KEYS[3], KEYS[4], ARGV[1])
if redis.call('EXISTS', KEYS[3]) == 1 then
  local now, now_text = now_s()
  prune_waiters(KEYS[3], KEYS[4], math.floor(now * 1000))
  local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_text, 'LIMIT', '0', '1')
  if #due > 0 then wake_waiters(KEYS[3], KEYS[4], ARGV[2], 1, '') end
end
return 1
