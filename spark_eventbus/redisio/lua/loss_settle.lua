-- The driver, once Spark has committed batch seq of run: count the entries replays of batches
-- up to it moved past (skipped, for lostEntries) and delete those records, and any record of
-- another run (a checkpoint no longer in use).
--
-- KEYS[1] loss key
-- ARGV[1] run, ARGV[2] seq
-- Returns {entries moved past, ranges they were in}.
local key = KEYS[1]
local all = redis.call('HGETALL', key)
local entries, ranges, drop = 0, 0, {}
for i = 1, #all, 2 do
  local rec = cjson.decode(all[i + 1])
  local mine = rec.run == ARGV[1]
  if not mine or tonumber(all[i]) <= tonumber(ARGV[2]) then
    if mine and type(rec.ranges) == 'table' then
      for _, r in pairs(rec.ranges) do
        if r[4] > 0 then
          entries = entries + r[4]
          ranges = ranges + 1
        end
      end
    end
    drop[#drop + 1] = all[i]
  end
end
if #drop > 0 then redis.call('HDEL', key, unpack(drop)) end
return {entries, ranges}
