-- Move malformed entries to the dead-letter stream and ack them, atomically per chunk.
-- The DLQ entry keeps the original fields (re-read from the stream, byte for byte) and adds the
-- dlq.* fields. Idempotent: an entry no longer pending for the group was already moved (or
-- acked) by an earlier run of this batch, and is skipped, so a replay adds no second copy.
--
-- KEYS[1] source stream, KEYS[2] dead-letter stream
-- ARGV[1] group, then triples: id, reason, delivery count ('' = unknown)
-- Returns {moved, skipped}
local src, dlq, group = KEYS[1], KEYS[2], ARGV[1]
local moved, skipped = 0, 0
for i = 2, #ARGV, 3 do
  local id, reason, deliveries = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local p = redis.call('XPENDING', src, group, id, id, 1)
  if #p == 0 then
    skipped = skipped + 1
  else
    local entry = redis.call('XRANGE', src, id, id)
    local fields = (entry[1] and entry[1][2]) or {}
    if deliveries == '' then deliveries = tostring(p[1][4]) end
    dead_letter(dlq, fields, reason, src, id, group, deliveries)
    redis.call('XACK', src, group, id)
    moved = moved + 1
  end
end
return {moved, skipped}
