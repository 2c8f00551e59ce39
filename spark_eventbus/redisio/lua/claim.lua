-- Begin a claim of new entries for this consumer. The client then runs the
-- XREADGROUP ... > itself (the entries cross the network once, as raw RESP, and Redis converts
-- nothing to Lua) and records the chunk it got with claim_record.lua. Here: report entries
-- deleted or trimmed before the group read them, and write the claim's intent into the plan of
-- the batch: the group's last-delivered-id now. Everything the following XREADGROUP claims
-- lies after it, so a driver killed before claim_record still finds its claim, in this
-- consumer's PEL (resolve_intent in _lib.lua).
--
-- KEYS[1] stream, KEYS[2] plan key, KEYS[3] consumer lease key
-- ARGV[1] group, ARGV[2] consumer, ARGV[3] run, ARGV[4] seq,
-- ARGV[5] stop after this ID ('' = no bound; Trigger.AvailableNow), ARGV[6] 'fail' | 'skip',
-- ARGV[7] lease token ('<run> <owner>'; '' = not fenced)
-- Returns {status, lost_after, lost_before, lost_count, delivered}; status is read (run the
-- XREADGROUP now; delivered: the group's last-delivered-id, which it reads after),
-- empty, done, loss or nogroup. lost_* describe entries deleted or trimmed before the group
-- read them: IDs after lost_after and before lost_before ('' = unknown, '(' prefix = up to and
-- including), lost_count of them (-1 = unknown). {'fenced', holder}: another query holds the
-- consumer's lease; nothing was done.
local stream, plan_key = KEYS[1], KEYS[2]
local done, at = claim_checks(KEYS, ARGV)
if done then return done end

local plan = load_plan(plan_key, ARGV[3], ARGV[4])
resolve_intent(stream, ARGV[1], ARGV[2], plan_key, plan, '+')  -- one left by a claim cut short
plan.claiming = {after = at[1]}
save_plan(plan_key, plan)
return {'read', at[2], at[3], at[4], at[1]}
