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

-- The claim plans of this consumer: a hash with one field per batch number (seq), holding what
-- was claimed for a batch Spark may not have logged yet (crash residue, or the next batch
-- pre-claimed while the current one runs). A plan of another run (checkpoint) is replaced.
local PLAN_TTL_MS = 7 * 24 * 3600 * 1000
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

-- Append an entry to a dead-letter stream with its original fields and the dlq.* fields.
local function dead_letter(dlq, fields, reason, stream, id, group, deliveries)
  local args = {dlq, '*'}
  for i = 1, #fields do args[#args + 1] = fields[i] end
  local extra = {'dlq.reason', reason, 'dlq.source.stream', stream, 'dlq.source.id', id,
                 'dlq.group', group, 'dlq.delivery_count', tostring(deliveries)}
  for i = 1, #extra do args[#args + 1] = extra[i] end
  return redis.call('XADD', unpack(args))
end
