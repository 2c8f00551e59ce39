-- A small claim of new entries in one atomic step: claim.lua's checks, the XREADGROUP ... >
-- here, and the chunk recorded in the plan of the batch, so no intent is ever left open. For
-- chunks of a few entries (a batch over thousands of streams claims one or two per stream),
-- where three steps per stream (claim.lua, the client's XREADGROUP, claim_record.lua) cost
-- three replies and two plan writes for each; a chunk this size costs Redis little as Lua
-- tables (group/claimer.py, redisio/claims.py: ONE_STEP_CLAIM). Large chunks keep the three
-- steps: their entries cross the network once, as raw RESP, and Redis converts nothing to Lua.
-- Run twice (a client retry after its reply was lost), it claims and records twice: the plan
-- holds both reads, as claim_record.lua's would.
--
-- KEYS and ARGV[1..7] as claim.lua's; ARGV[8] at most this many entries.
-- Returns {status, lost_after, lost_before, lost_count, ids}: status 'read' (ids: the IDs the
-- XREADGROUP claimed, in order, recorded as one chunk; none when another consumer took them
-- first), or empty, done, loss, nogroup (no ids) and {'fenced', holder} as claim.lua's.
local stream, plan_key = KEYS[1], KEYS[2]
local done, at = claim_checks(KEYS, ARGV)
if done then return done end

local plan = load_plan(plan_key, ARGV[3], ARGV[4])
local opened = type(plan.claiming) == 'table'
-- one left by a three-step claim cut short: its entries lie before what this one reads
resolve_intent(stream, ARGV[1], ARGV[2], plan_key, plan, '+')
local read = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', tonumber(ARGV[8]),
                        'STREAMS', stream, '>')
local ids = {}
if read then
  for i, e in ipairs(read[1][2]) do ids[i] = e[1] end
end
if #ids > 0 then
  table.insert(plan.chunks, {ids[1], ids[#ids], #ids})
end
if #ids > 0 or opened then save_plan(plan_key, plan) end
return {'read', at[2], at[3], at[4], ids}
