-- Dead-lettering (redisio/deadletter.py: the one move, wherever the two streams live), the step
-- in the dead-letter stream's slot: add entries to the dead-letter stream
-- unless the marker set says an earlier attempt already added them. The caller first read the
-- fields of the entries still pending in the source (their slot), and afterwards XACKs them
-- there and removes their markers: a replay finds them either no longer pending or marked.
--
-- KEYS[1] dead-letter stream, KEYS[2] marker set of (source stream, group), in KEYS[1]'s slot
-- ARGV[1] source stream, ARGV[2] group, ARGV[3] marker TTL ms, then per entry:
--   id, reason, delivery count, n, then n field names and values interleaved
-- Returns {added, skipped}
local dlq, marker, src, group = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local added, skipped, i = 0, 0, 4
while i <= #ARGV do
  local id, reason, deliveries, n = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  if redis.call('SISMEMBER', marker, id) == 1 then
    skipped = skipped + 1
  else
    local fields = {}
    for k = 1, n do fields[k] = ARGV[i + 3 + k] end
    dead_letter(dlq, fields, reason, src, id, group, deliveries)
    redis.call('SADD', marker, id)
    added = added + 1
  end
  i = i + 4 + n
end
redis.call('PEXPIRE', marker, ARGV[3])
return {added, skipped}
