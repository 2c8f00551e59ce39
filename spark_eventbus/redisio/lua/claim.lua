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
local group, consumer = ARGV[1], ARGV[2]
local other = lease_fence(KEYS[3], ARGV[7])
if other then return {'fenced', other} end

if redis.call('TYPE', stream)['ok'] ~= 'stream' then return {'nogroup', '', '', -1} end
local info = kv(redis.call('XINFO', 'STREAM', stream))
local delivered, entries_read = nil, nil
for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
  local t = kv(g)
  if t['name'] == group then delivered, entries_read = t['last-delivered-id'], t['entries-read'] end
end
if not delivered then return {'nogroup', '', '', -1} end

-- Entries removed before this group read them:
--  * XDEL after our position: max-deleted-entry-id (Redis >= 7.0) is beyond it;
--  * trimming (XTRIM/MAXLEN/MINID does not move max-deleted-entry-id): when every remaining
--    entry lies after our position, entries-added - entries-read - length entries are gone.
local lost_after, lost_before, lost_count = '', '', -1
local maxdel = info['max-deleted-entry-id']
local first_entry = info['first-entry'] and info['first-entry'][1]
if maxdel and idcmp(maxdel, delivered) > 0 then
  lost_after, lost_before = delivered, first_entry or info['last-generated-id']
  if first_entry and idcmp(first_entry, maxdel) < 0 then lost_before = '' end
end
local added = info['entries-added']
if added and (not first_entry or idcmp(first_entry, delivered) > 0) then
  local before = entries_read
  if delivered == '0-0' then before = 0 end
  if type(before) == 'number' then
    local gone = added - before - info['length']
    if gone > 0 then
      lost_after, lost_count = delivered, gone
      lost_before = first_entry or ('(' .. info['last-generated-id'])
    end
  end
end
if lost_after ~= '' and ARGV[6] == 'fail' then
  return {'loss', lost_after, lost_before, lost_count}
end
if ARGV[5] ~= '' and idcmp(delivered, ARGV[5]) >= 0 then
  return {'done', lost_after, lost_before, lost_count}
end

local last_entry = info['last-entry'] and info['last-entry'][1]
if not last_entry or idcmp(last_entry, delivered) <= 0 then
  if lost_after ~= '' then
    -- Everything after last-delivered-id is gone: move the group past it (keeping lag exact)
    -- so the loss is reported once.
    redis.call('XGROUP', 'SETID', stream, group, info['last-generated-id'],
               'ENTRIESREAD', info['entries-added'])
  end
  return {'empty', lost_after, lost_before, lost_count}
end

local plan = load_plan(plan_key, ARGV[3], ARGV[4])
resolve_intent(stream, group, consumer, plan_key, plan, '+')  -- one left by a claim cut short
plan.claiming = {after = delivered}
save_plan(plan_key, plan)
return {'read', lost_after, lost_before, lost_count, delivered}
