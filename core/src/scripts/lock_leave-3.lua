-- A waiter gives up (timeout, interrupt). If the lock is free, pass the turn
-- on, in case a wake-up was meant for the leaving waiter.
-- KEYS: lock, waiters, leases
-- ARGV: waiter_id, channel prefix
remove_waiter(KEYS[2], KEYS[3], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 and redis.call('EXISTS', KEYS[2]) == 1 then
  wake_waiters(KEYS[2], KEYS[3], ARGV[2], 1)
end
return 1
