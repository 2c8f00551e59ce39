-- Claim up to COUNT new entries for this consumer with one XREADGROUP ... > and record the
-- chunk in the claim plan, atomically: a driver killed right after this call still finds what
-- it claimed. Payloads stay in Redis; the caller gets (first, last, count).
--
-- KEYS[1] stream, KEYS[2] plan key
-- ARGV[1] group, ARGV[2] consumer, ARGV[3] count, ARGV[4] run, ARGV[5] seq,
-- ARGV[6] stop after this ID ('' = no bound; Trigger.AvailableNow), ARGV[7] 'fail' | 'skip',
-- ARGV[8] '1': also return the claimed IDs as RESP bulk strings ('$<len>\r\n<id>\r\n' each, in
-- any order), so the ack after commit is a plain XACK of them instead of ack_range (which reads
-- the PEL back; the README's benchmark section compares the two).
-- Returns {status, first, last, n, lost_after, lost_before, lost_count, ids}; status is ok, empty,
-- done, loss or nogroup. lost_* describe entries deleted or trimmed before the group read them:
-- IDs after lost_after and before lost_before ('' = unknown, '(' prefix = up to and including),
-- lost_count of them (-1 = unknown).
local stream, plan_key = KEYS[1], KEYS[2]
local group, consumer = ARGV[1], ARGV[2]

local info = kv(redis.call('XINFO', 'STREAM', stream))
local delivered, entries_read = nil, nil
for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
  local t = kv(g)
  if t['name'] == group then delivered, entries_read = t['last-delivered-id'], t['entries-read'] end
end
if not delivered then return {'nogroup', '', '', 0, '', '', -1, ''} end

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
if lost_after ~= '' and ARGV[7] == 'fail' then
  return {'loss', '', '', 0, lost_after, lost_before, lost_count, ''}
end
if ARGV[6] ~= '' and idcmp(delivered, ARGV[6]) >= 0 then
  return {'done', '', '', 0, lost_after, lost_before, lost_count, ''}
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
  return {'empty', '', '', 0, lost_after, lost_before, lost_count, ''}
end
local last = entries[n][1]
local plan = load_plan(plan_key, ARGV[4], ARGV[5])
table.insert(plan.chunks, {entries[1][1], last, n})
save_plan(plan_key, plan)
local ids = ''
if ARGV[8] == '1' then
  -- XACK takes IDs in any order: bucket them by length so that each bucket is one
  -- table.concat with a constant '\r\n$<len>\r\n' separator (no string built per ID).
  local buckets, lens = {}, {}
  for i = 1, n do
    local id = entries[i][1]
    local b = buckets[#id]
    if not b then
      b = {}
      buckets[#id] = b
      lens[#lens + 1] = #id
    end
    b[#b + 1] = id
  end
  local parts = {}
  for _, len in ipairs(lens) do
    local head = '$' .. len .. '\r\n'
    parts[#parts + 1] = head .. table.concat(buckets[len], '\r\n' .. head) .. '\r\n'
  end
  ids = table.concat(parts)
end
return {'ok', entries[1][1], last, n, lost_after, lost_before, lost_count, ids}
