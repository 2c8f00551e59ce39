-- Claim up to COUNT new entries for this consumer with one XREADGROUP ... > and record the
-- chunk in the claim plan, atomically: a driver killed right after this call still finds what
-- it claimed. Payloads stay in Redis; the caller gets (first, last, count).
--
-- KEYS[1] stream, KEYS[2] plan key
-- ARGV[1] group, ARGV[2] consumer, ARGV[3] count, ARGV[4] run, ARGV[5] seq,
-- ARGV[6] stop after this ID ('' = no bound; Trigger.AvailableNow), ARGV[7] 'fail' | 'skip'
-- Returns {status, first, last, n, lost_after, lost_upto}; status is ok, empty, done, loss or
-- nogroup. lost_* name the range of entries deleted or trimmed before the group read them.
local stream, plan_key = KEYS[1], KEYS[2]
local group, consumer = ARGV[1], ARGV[2]

local info = kv(redis.call('XINFO', 'STREAM', stream))
local delivered = nil
for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
  local t = kv(g)
  if t['name'] == group then delivered = t['last-delivered-id'] end
end
if not delivered then return {'nogroup', '', '', 0, '', ''} end

local lost_after, lost_upto = '', ''
local maxdel = info['max-deleted-entry-id']  -- Redis >= 7.0
if maxdel and idcmp(maxdel, delivered) > 0 then
  lost_after, lost_upto = delivered, maxdel
  if ARGV[7] == 'fail' then return {'loss', '', '', 0, lost_after, lost_upto} end
end
if ARGV[6] ~= '' and idcmp(delivered, ARGV[6]) >= 0 then
  return {'done', '', '', 0, lost_after, lost_upto}
end

local r = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', tonumber(ARGV[3]),
                     'STREAMS', stream, '>')
local entries = (r and r[1][2]) or {}
local n = #entries
if n == 0 then
  if lost_after ~= '' then
    -- Everything after last-delivered-id is gone: move the group past it (keeping lag exact)
    -- so the loss is reported once.
    redis.call('XGROUP', 'SETID', stream, group, info['last-generated-id'],
               'ENTRIESREAD', info['entries-added'])
  end
  return {'empty', '', '', 0, lost_after, lost_upto}
end
local first, last = entries[1][1], entries[n][1]
local plan = load_plan(plan_key, ARGV[4], ARGV[5])
table.insert(plan.chunks, {first, last, n})
save_plan(plan_key, plan)
return {'ok', first, last, n, lost_after, lost_upto}
