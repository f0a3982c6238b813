-- What an operator sees of one lock, read in one step: the holder's token
-- and remaining TTL, the last fencing token issued, and the first waiters in
-- the order they are served, with their lease deadlines. Reads only.
-- KEYS: lock, fence, waiters, leases
-- ARGV: how many waiters to list at most
-- Returns {holder or false, pttl, last fence or false, waiters registered,
--   {member, arrival µs, ...}, {lease deadline ms or false, ...}, now µs}
local n = tonumber(ARGV[1])
local waiting = redis.call('ZCARD', KEYS[3])
local items, leases = {}, {}
if n > 0 and waiting > 0 then
  items = redis.call('ZRANGE', KEYS[3], '0', digits(n - 1), 'WITHSCORES')
  local members = {}
  for i = 1, #items, 2 do members[#members + 1] = items[i] end
  leases = scores_of(KEYS[4], members)
end
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]),
  waiting, items, leases, digits(now_us())}
