-- Record what the replay of one slice of a batch found missing (partition_reader.read_slice)
-- and decide whether that replay may move past it. The consumer's loss hash has one field per
-- batch (seq), a JSON object {run, seq, failed_at, ranges}: ranges maps '<first>..<last>' (a
-- claimed range) or '<id>' (a reclaimed ID) to {count, missing, accepted, skipped}. Slices of
-- one batch add their own ranges; a field left by another run (checkpoint) is replaced.
--
-- KEYS[1] loss key
-- ARGV[1] run, ARGV[2] seq, ARGV[3] now (ms), ARGV[4] 'fail' (failOnDataLoss=true) or 'skip',
-- ARGV[5..] triples: range name, count, missing
-- Returns 'skip' (move past them: option 'skip', or an operator accepted at least as many
-- missing entries in every one of these ranges; recorded as skipped, counted in lostEntries
-- when the batch commits) or 'fail' (stop; recorded with failed_at = now).
local key, run, seq = KEYS[1], ARGV[1], ARGV[2]
local raw = redis.call('HGET', key, seq)
local rec = raw and cjson.decode(raw)
if not rec or rec.run ~= run then rec = {run = run, seq = tonumber(seq)} end
if type(rec.ranges) ~= 'table' then rec.ranges = {} end

local pass = ARGV[4] == 'skip'
if not pass then
  pass = true
  for i = 5, #ARGV, 3 do
    local r = rec.ranges[ARGV[i]]
    if not r or r[3] < tonumber(ARGV[i + 2]) then pass = false end
  end
end
for i = 5, #ARGV, 3 do
  local r = rec.ranges[ARGV[i]] or {0, 0, 0, 0}
  r[1], r[2] = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  if pass then r[4] = r[2] end
  rec.ranges[ARGV[i]] = r
end
if not pass then rec.failed_at = tonumber(ARGV[3]) end
redis.call('HSET', key, seq, cjson.encode(rec))
redis.call('PEXPIRE', key, PLAN_TTL_MS)
return pass and 'skip' or 'fail'
