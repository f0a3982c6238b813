-- Undo an acquire its caller gave up on (its reply was lost, or the caller
-- stopped waiting and could not deregister): afterwards the token holds
-- nothing and waits nowhere.
-- KEYS: lock, fence, waiters, leases, ghosts
-- ARGV: token, waiter member ('' = any registration of the token), channel
--       prefix, ghost_ttl_ms
-- The token is recorded as a ghost (for ghost_ttl_ms at least), so that a
-- write of it that arrives after this script (a command delayed in the
-- network, or still unread by a server that was paused) holds nothing: the
-- next contender clears it (lock_acquire-5.lua). Its waiter registration is
-- removed; if it holds the lock, the lock is released, handed to the oldest
-- live waiter if there is one. A free lock with waiters left is handed on.
-- Returns 1 when the token held the lock, else 0.
local lock, fence, waiters, leases, ghosts = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, member, channel = ARGV[1], ARGV[2], ARGV[3]
redis.call('SADD', ghosts, token)
keep_alive(ghosts, tonumber(ARGV[4]))
if member ~= '' then
  remove_waiter(waiters, leases, member)
elseif redis.call('EXISTS', waiters) == 1 then
  -- Lock waiters are `<id>|<ttl_ms>|<token>`: find the token's (a rare,
  -- error-path scan, in pages).
  local suffix = '|' .. token
  local mine, start = {}, 0
  while true do
    local page = redis.call('ZRANGE', waiters, digits(start), digits(start + 999))
    for _, m in ipairs(page) do
      if #m > #suffix and string.sub(m, -#suffix) == suffix then mine[#mine + 1] = m end
    end
    if #page < 1000 then break end
    start = start + 1000
  end
  for _, m in ipairs(mine) do remove_waiter(waiters, leases, m) end
end
local holder = redis.call('GET', lock)
if holder == token then
  if not grant_next(lock, fence, waiters, leases, channel) then
    redis.call('DEL', lock)
  end
  return 1
end
if not holder then
  grant_next(lock, fence, waiters, leases, channel)
end
return 0
