-- Record what the client's XREADGROUP ... > claimed after claim.lua: one chunk (first, last,
-- count), and close the claim's intent. Entries of this consumer's PEL between the intent's
-- position and the chunk (an earlier attempt whose reply was lost, then retried by the client)
-- are recorded too (resolve_intent), so nothing it claimed is left outside a plan.
--
-- KEYS[1] stream, KEYS[2] plan key
-- ARGV[1] group, ARGV[2] consumer, ARGV[3] run, ARGV[4] seq, ARGV[5] first ID ('' = the read
-- was empty), ARGV[6] last ID, ARGV[7] count
-- Returns the number of entries recorded besides the chunk.
local stream, plan_key = KEYS[1], KEYS[2]
local plan = load_plan(plan_key, ARGV[3], ARGV[4])
local first = ARGV[5]
local extra = resolve_intent(stream, ARGV[1], ARGV[2], plan_key, plan,
                             first == '' and '+' or ('(' .. first))
-- Idempotent: a client that sends this again (a pipeline retried after its connection broke
-- while reading the replies) finds the chunk recorded and does not record it twice.
local known = false
for _, c in ipairs(plan.chunks) do
  if c[1] == first then known = true break end
end
if first ~= '' and not known then
  table.insert(plan.chunks, {first, ARGV[6], tonumber(ARGV[7])})
end
save_plan(plan_key, plan)
return extra
