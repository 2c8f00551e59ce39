-- Take over entries idle for at least MIN_IDLE ms from any consumer of the group (dead workers,
-- older runs) with one XAUTOCLAIM call, and record them in the claim plan, atomically.
-- XAUTOCLAIM without JUSTID bumps delivery counts (a reclaim is a delivery). Entries already in
-- this batch's plan (crash residue) are left where they are. Entries delivered more than
-- MAX_DELIVERIES times are returned, left pending, for the caller to move to the dead-letter
-- stream (redisio/deadletter.py: the one move, wherever that stream lives).
--
-- KEYS[1] stream, KEYS[2] plan key, KEYS[3] consumer lease key
-- ARGV[1] group, ARGV[2] consumer, ARGV[3] min idle ms, ARGV[4] cursor, ARGV[5] count,
-- ARGV[6] run, ARGV[7] seq, ARGV[8] max deliveries (0 = off), ARGV[9] oldest batch (seq) whose
-- entries are still in flight or not yet acked: entries of its plan and later ones stay put,
-- ARGV[10] lease token ('<run> <owner>'; '' = not fenced)
-- Returns {next_cursor, {id, deliveries, id, deliveries, ...}, {deleted ids no plan of this
--          run from ARGV[9] on holds}, {id, deliveries, ...} of entries to dead-letter,
--          bytes of the taken entries (names + values: maxBytesPerTrigger)}; {'fenced', holder}:
-- another query holds the consumer's lease, nothing was done.
local stream, plan_key = KEYS[1], KEYS[2]
local group, consumer = ARGV[1], ARGV[2]
local other = lease_fence(KEYS[3], ARGV[10])
if other then return {'fenced', other} end
local max_deliveries = tonumber(ARGV[8])

local r = redis.call('XAUTOCLAIM', stream, group, consumer, ARGV[3], ARGV[4],
                     'COUNT', tonumber(ARGV[5]))
local claimed, deleted = r[2], r[3] or {}

local plan = load_plan(plan_key, ARGV[6], ARGV[7])
-- Entries of any outstanding plan of this run (the batch running now, this one, or a later one
-- pre-claimed before a crash) are already on their way to Spark: never deliver them twice.
local planned, ranges = {}, {}
local all = redis.call('HGETALL', plan_key)
for i = 2, #all, 2 do
  local p = cjson.decode(all[i])
  if p.run == ARGV[6] and tonumber(p.seq) >= tonumber(ARGV[9]) then
    if type(p.reclaimed) == 'table' then
      for _, e in ipairs(p.reclaimed) do planned[e[1]] = true end
    end
    if type(p.chunks) == 'table' then
      for _, c in ipairs(p.chunks) do ranges[#ranges + 1] = c end
    end
  end
end
local function in_plan(id)
  if planned[id] then return true end
  for _, c in ipairs(ranges) do
    if idcmp(id, c[1]) >= 0 and idcmp(id, c[2]) <= 0 then return true end
  end
  return false
end

-- XAUTOCLAIM drops every deleted entry it scans from the PEL, idle or not, whoever holds it.
-- Those of a planned batch are not reported here: that batch's replay counts them if it finds
-- them gone (partition_reader), or has delivered them already.
local gone = {}
for _, id in ipairs(deleted) do
  if not in_plan(id) then gone[#gone + 1] = id end
end

local taken, poison, size = {}, {}, 0
for _, e in ipairs(claimed) do
  local id, fields = e[1], e[2]
  if not in_plan(id) then
    local p = redis.call('XPENDING', stream, group, id, id, 1)
    local deliveries = (p[1] and p[1][4]) or 1
    if max_deliveries > 0 and deliveries > max_deliveries then
      poison[#poison + 1] = id
      poison[#poison + 1] = deliveries
    else
      plan.reclaimed[#plan.reclaimed + 1] = {id, deliveries}
      for _, f in ipairs(fields) do size = size + #f end
      taken[#taken + 1] = id
      taken[#taken + 1] = deliveries
    end
  end
end
if #taken > 0 then save_plan(plan_key, plan) end
return {r[1], taken, gone, poison, size}
