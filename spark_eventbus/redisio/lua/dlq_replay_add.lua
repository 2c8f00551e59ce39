-- `eventbus dlq replay` (redisio/deadletter.py: the one move), the step in the target's slot: add
-- dead-lettered entries back to the target (without their dlq.* fields) unless the marker set
-- says an earlier attempt already did. The caller read them from the dead-letter stream, and
-- afterwards XDELs them there and removes their markers: an interrupted replay adds no entry
-- twice and loses none.
--
-- KEYS[1] target stream, KEYS[2] marker set of the dead-letter stream, in KEYS[1]'s slot
-- ARGV[1] marker TTL ms, then per entry: id, n, then n field names and values interleaved
-- Returns {added, skipped, kept (no original field: not added, to be left in place), kept ids}
local target, marker = KEYS[1], KEYS[2]
local added, skipped, kept, kept_ids, i = 0, 0, 0, {}, 2
while i <= #ARGV do
  local id, n = ARGV[i], tonumber(ARGV[i + 1])
  local args = {target, '*'}
  for k = 1, n, 2 do
    local f = ARGV[i + 1 + k]
    if string.sub(f, 1, 4) ~= 'dlq.' then
      args[#args + 1] = f
      args[#args + 1] = ARGV[i + 2 + k]
    end
  end
  if #args == 2 then
    kept = kept + 1
    kept_ids[#kept_ids + 1] = id
  elseif redis.call('SISMEMBER', marker, id) == 1 then
    skipped = skipped + 1
  else
    redis.call('XADD', unpack(args))
    redis.call('SADD', marker, id)
    added = added + 1
  end
  i = i + 2 + n
end
redis.call('PEXPIRE', marker, ARGV[1])
return {added, skipped, kept, kept_ids}
