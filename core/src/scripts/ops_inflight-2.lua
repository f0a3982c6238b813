-- What an operator sees of a queue's reservations, read in one step: a page
-- of them, earliest visibility deadline first, with each reservation's
-- record (attempt, max attempts, visibility). Reads only.
-- KEYS: inflight, receipts
-- ARGV: offset, count
-- Returns {reservations, {id, deadline, ...}, {reservation record or false, ...}, now s}
local from = tonumber(ARGV[1])
local items = redis.call('ZRANGE', KEYS[1], digits(from), digits(from + tonumber(ARGV[2]) - 1), 'WITHSCORES')
local ids = {}
for i = 1, #items, 2 do ids[#ids + 1] = items[i] end
local records = {}
if #ids > 0 then records = redis.call('HMGET', KEYS[2], unpack(ids)) end
local _, now_text = now_s()
return {redis.call('ZCARD', KEYS[1]), items, records, now_text}
