-- An operator accepts a loss a replay stopped on (eventbus group accept-loss): in each batch of
-- the consumer's loss hash (loss_record.lua) that stopped the query, every range neither moved
-- past nor accepted yet gets accepted = missing. The next replay of that batch then moves past
-- exactly those entries — a range missing more entries by then stops it again — and no other
-- batch: the record is the batch's, and the driver deletes it once the batch commits
-- (loss_settle.lua).
--
-- KEYS[1] loss key
-- ARGV[1] seq ('' = every batch that stopped the query)
-- Returns the JSON of every record accepted.
local key = KEYS[1]
local all = redis.call('HGETALL', key)
local out = {}
for i = 1, #all, 2 do
  local rec = cjson.decode(all[i + 1])
  if rec.failed_at and type(rec.ranges) == 'table' and (ARGV[1] == '' or all[i] == ARGV[1]) then
    local changed = false
    for _, r in pairs(rec.ranges) do
      if r[4] < r[2] and r[3] < r[2] then
        r[3] = r[2]
        changed = true
      end
    end
    if changed then
      local encoded = cjson.encode(rec)
      redis.call('HSET', key, all[i], encoded)
      out[#out + 1] = encoded
    end
  end
end
if #out > 0 then redis.call('PEXPIRE', key, PLAN_TTL_MS) end
return out
