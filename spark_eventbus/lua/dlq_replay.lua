-- Move dead-lettered entries back to a stream, without their dlq.* fields, atomically per call:
-- each entry is added to the target and deleted from the dead-letter stream in this one script,
-- so an interrupted replay never moves an entry twice and never loses one.
--
-- KEYS[1] dead-letter stream, KEYS[2] target stream
-- ARGV[1] count, ARGV[2] exclusive start ID ('-' for the beginning)
-- Returns {moved, kept, last_id}; kept: entries with no original field left (never deleted).
local start = ARGV[2] == '-' and '-' or ('(' .. ARGV[2])
local entries = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', tonumber(ARGV[1]))
local moved, kept, last = 0, 0, ARGV[2]
for _, e in ipairs(entries) do
  local args = {KEYS[2], '*'}
  local f = e[2]
  for i = 1, #f, 2 do
    if string.sub(f[i], 1, 4) ~= 'dlq.' then
      args[#args + 1] = f[i]
      args[#args + 1] = f[i + 1]
    end
  end
  if #args > 2 then
    redis.call('XADD', unpack(args))
    redis.call('XDEL', KEYS[1], e[1])
    moved = moved + 1
  else
    kept = kept + 1
  end
  last = e[1]
end
return {moved, kept, last}
