-- Ack this consumer's pending entries in [first, last] (one claimed chunk). Reads the IDs from
-- the consumer's PEL, not the stream, so entries deleted since the claim are acked too.
-- Bounded by the claimed range (<= one claim chunk), read in pages of 1,000 PEL entries.
--
-- KEYS[1] stream; ARGV[1] group, ARGV[2] consumer, ARGV[3] first, ARGV[4] last
-- Returns the number of entries acked.
local stream, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local start, total, page = ARGV[3], 0, 1000
while true do
  local p = redis.call('XPENDING', stream, group, start, ARGV[4], page, consumer)
  local n = #p
  if n == 0 then break end
  local ids = {}
  for i = 1, n do ids[i] = p[i][1] end
  total = total + redis.call('XACK', stream, group, unpack(ids))
  if n < page then break end
  start = '(' .. ids[n]
end
return total
