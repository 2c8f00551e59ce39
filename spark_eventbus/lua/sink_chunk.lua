-- Write one chunk of entries to a stream, at most once per marker, then trim.
-- Atomic: a retried or speculative task attempt either finds the marker and adds nothing, or
-- adds the whole chunk and the marker together.
--
-- KEYS[1] stream, KEYS[2] marker set of this (query, batch), in the stream's hash slot
-- ARGV[1] marker member '<partition>:<chunk>' ('' = idempotency off), ARGV[2] marker TTL ms
-- ARGV[3] MAXLEN ('' none), ARGV[4] MINID ('' none), ARGV[5] keep-age ms ('' none: MINID is
--   then server time minus that age), ARGV[6] '~' approximate or '=' exact trimming
-- ARGV[7..] runs: K, m, name_1..name_K, then m*K values row-major
-- Returns {entries added, 1 when the marker said the chunk was already written}
local stream, marker, member = KEYS[1], KEYS[2], ARGV[1]
if member ~= '' and redis.call('SISMEMBER', marker, member) == 1 then
  return {0, 1}
end

local added, i, n = 0, 7, #ARGV
local args = {}
while i <= n do
  local k, m = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  local names = i + 1   -- name j is ARGV[names + j]
  local v = i + 2 + k   -- first value of the run's first row
  for _ = 1, m do
    for j = 1, k do
      args[2 * j - 1] = ARGV[names + j]
      args[2 * j] = ARGV[v + j - 1]
    end
    redis.call('XADD', stream, '*', unpack(args, 1, 2 * k))
    v = v + k
  end
  added = added + m
  i = v
end

local approx = ARGV[6]
if ARGV[3] ~= '' then
  redis.call('XTRIM', stream, 'MAXLEN', approx, ARGV[3])
end
local minid = ARGV[4]
if ARGV[5] ~= '' then
  local t = redis.call('TIME')
  local cutoff = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(ARGV[5])
  minid = (cutoff > 0) and string.format('%d-0', cutoff) or ''
end
if minid ~= '' then
  redis.call('XTRIM', stream, 'MINID', approx, minid)
end
if member ~= '' then
  redis.call('SADD', marker, member)
  redis.call('PEXPIRE', marker, ARGV[2])
end
return {added, 0}
