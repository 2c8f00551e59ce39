-- Helpers prepended to every spark-eventbus script (see redisio/scripts.py).

-- Compare two stream IDs as (ms, seq) integer pairs; strings of digits of any length.
local function numcmp(x, y)
  if #x ~= #y then return (#x < #y) and -1 or 1 end
  if x == y then return 0 end
  return (x < y) and -1 or 1
end
local function idcmp(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  local c = numcmp(am, bm)
  if c ~= 0 then return c end
  return numcmp(as, bs)
end

-- A flat RESP2 map reply {k1, v1, k2, v2, ...} as a Lua table.
local function kv(flat)
  local t = {}
  for i = 1, #flat, 2 do t[flat[i]] = flat[i + 1] end
  return t
end

-- The consumer lease (lease.lua) as a fence: a claim or reclaim goes ahead only for the query
-- that holds it, so a query another one took over (it could not renew for longer than the TTL:
-- a stalled driver, a network partition) claims nothing more. token '' = not fenced (no lease
-- held). An expired lease does not stop the claim (nobody else holds it; the holder's heartbeat
-- takes it back) and is not re-created here: a claim still in flight when its query stops and
-- deletes the lease must not leave it behind. Returns the other holder, or nil.
local function lease_fence(key, token)
  if token == '' then return nil end
  local cur = redis.call('GET', key)
  if cur and cur ~= token then return cur end
  return nil
end

-- The claim plans of this consumer: a hash with one field per batch number (seq), holding what
-- was claimed for a batch Spark may not have logged yet (crash residue, or the next batch
-- pre-claimed while the current one runs). A plan of another run (checkpoint) is replaced.
-- plan.claiming, when set, is a claim in progress: {after = the group's last-delivered-id when
-- it began} (claim.lua / claim_record.lua).
local PLAN_TTL_MS = BOOKKEEPING_TTL_MS  -- the one TTL in keys.py, put in by script_text()
local function load_plan(key, run, seq)
  local raw = redis.call('HGET', key, seq)
  if raw then
    local p = cjson.decode(raw)
    if p.run == run and p.seq == seq then
      if type(p.chunks) ~= 'table' then p.chunks = {} end
      if type(p.reclaimed) ~= 'table' then p.reclaimed = {} end
      return p
    end
  end
  return {run = run, seq = seq, chunks = {}, reclaimed = {}}
end
local function save_plan(key, plan)
  redis.call('HSET', key, plan.seq, cjson.encode(plan))
  redis.call('PEXPIRE', key, PLAN_TTL_MS)
end

-- Close the claim in progress of `plan` (not saved here): every entry of this consumer's PEL
-- after plan.claiming.after and before `upto` ('+': no bound; '(<id>': up to that ID, excluded)
-- that no plan lists as reclaimed was claimed by that claim's XREADGROUP (only this consumer's
-- own XREADGROUP puts entries after the group's position into its PEL; reclaims record theirs
-- atomically) and the claimer did not live to record it: add them to the plan as listed IDs
-- with their delivery counts. Listed, not as a range: two attempts (a client retry after a lost
-- reply) need not be contiguous. Bounded by the PEL after `after`: the entries of at most a
-- few claims. Returns the number added.
local function resolve_intent(stream, group, consumer, plan_key, plan, upto)
  local c = plan.claiming
  plan.claiming = nil
  if type(c) ~= 'table' or type(c.after) ~= 'string' then return 0 end
  local skip, added, start = nil, 0, '(' .. c.after
  while true do
    local p = redis.call('XPENDING', stream, group, start, upto, 1000, consumer)
    if #p > 0 and not skip then
      skip = {}
      local all = redis.call('HGETALL', plan_key)
      for i = 2, #all, 2 do
        local q = cjson.decode(all[i])
        if type(q.reclaimed) == 'table' then
          for _, e in ipairs(q.reclaimed) do skip[e[1]] = true end
        end
      end
      for _, e in ipairs(plan.reclaimed) do skip[e[1]] = true end
    end
    for _, e in ipairs(p) do
      if not skip[e[1]] then
        plan.reclaimed[#plan.reclaimed + 1] = {e[1], e[4]}
        added = added + 1
      end
    end
    if #p < 1000 then break end
    start = '(' .. p[#p][1]
  end
  return added
end

-- The checks every claim of new entries makes first (claim.lua, claim_read.lua): the lease
-- fence; the stream and group exist; entries deleted or trimmed before the group read them
-- (reported: lost_after, lost_before, lost_count); Trigger.AvailableNow's bound; anything new.
-- KEYS/ARGV as claim.lua's (KEYS[1] stream, KEYS[3] lease key; ARGV[1] group, ARGV[5] stop
-- after, ARGV[6] 'fail' | 'skip', ARGV[7] lease token). Returns the script's final reply when
-- nothing is to be read (fenced, nogroup, loss, done, empty), else nil and
-- {delivered, lost_after, lost_before, lost_count}: delivered is the group's
-- last-delivered-id now.
local function claim_checks(KEYS, ARGV)
  local stream, group = KEYS[1], ARGV[1]
  local other = lease_fence(KEYS[3], ARGV[7])
  if other then return {'fenced', other} end

  -- a missing key or one of another type: no group (one call less than asking TYPE first)
  local found, raw = pcall(redis.call, 'XINFO', 'STREAM', stream)
  if not found then
    local why = type(raw) == 'table' and raw.err or tostring(raw)
    if string.find(why, '^ERR no such key') or string.find(why, '^WRONGTYPE') then
      return {'nogroup', '', '', -1}
    end
    redis.call('XINFO', 'STREAM', stream)  -- any other error raised from a line naming it
  end
  local info = kv(raw)
  local delivered, entries_read = nil, nil
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local t = kv(g)
    if t['name'] == group then
      delivered, entries_read = t['last-delivered-id'], t['entries-read']
    end
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
      -- Everything after last-delivered-id is gone: move the group past it (keeping lag
      -- exact) so the loss is reported once.
      redis.call('XGROUP', 'SETID', stream, group, info['last-generated-id'],
                 'ENTRIESREAD', info['entries-added'])
    end
    return {'empty', lost_after, lost_before, lost_count}
  end
  return nil, {delivered, lost_after, lost_before, lost_count}
end

-- Append an entry to a dead-letter stream with its original fields and the dlq.* fields.
local function dead_letter(dlq, fields, reason, stream, id, group, deliveries)
  local args = {dlq, '*'}
  for i = 1, #fields do args[#args + 1] = fields[i] end
  local extra = {'dlq.reason', reason, 'dlq.source.stream', stream, 'dlq.source.id', id,
                 'dlq.group', group, 'dlq.delivery_count', tostring(deliveries)}
  for i = 1, #extra do args[#args + 1] = extra[i] end
  return redis.call('XADD', unpack(args))
end
