-- The claim plan of batch (run, seq), with a claim in progress closed first (resolve_intent):
-- a driver that died between claim.lua and claim_record.lua left its entries in this
-- consumer's PEL only.
--
-- KEYS[1] stream, KEYS[2] plan key
-- ARGV[1] group, ARGV[2] consumer, ARGV[3] run, ARGV[4] seq
-- Returns the plan's JSON, or '' when there is none for this run.
local stream, plan_key = KEYS[1], KEYS[2]
if redis.call('HEXISTS', plan_key, ARGV[4]) == 0 then return '' end
local plan = load_plan(plan_key, ARGV[3], ARGV[4])
if type(plan.claiming) == 'table' then
  resolve_intent(stream, ARGV[1], ARGV[2], plan_key, plan, '+')
  save_plan(plan_key, plan)
end
if #plan.chunks == 0 and #plan.reclaimed == 0 then return '' end
return cjson.encode(plan)
