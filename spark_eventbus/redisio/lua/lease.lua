-- The consumer lease: which live query reads a stream as (group, consumer). Two live queries
-- with one consumer would share one claim plan and one PEL; the second is refused at start.
-- The value is '<run> <owner>': run = the query's checkpoint (offsets' run id), owner = one
-- driver process. A driver restarted from the same checkpoint (same run) takes the lease over
-- at once — its predecessor is dead or, if it still runs, finds the lease lost at its next
-- renewal and stops. The lease key lives long (renewed rarely); whether its holder is alive is
-- the holder's one heartbeat key (keys.py alive_key), renewed every few seconds, which the
-- client reads before it takes the lease over ('steal').
--
-- KEYS[1] lease key
-- ARGV[1] mode: 'acquire' | 'renew' | 'release' | 'steal', ARGV[2] run, ARGV[3] owner,
-- ARGV[4] TTL ms, ARGV[5] steal: the value of the holder whose heartbeat has expired
-- Returns {status, holder, pttl}: status 'ok', 'takeover' (a dead or stale driver of the same
-- run held it), 'held' (another query holds it: holder and its remaining ms), 'lost' (renew:
-- another query has taken it). A 'steal' whose holder has changed meanwhile answers as
-- 'acquire' does.
local key, mode, run, owner, ttl = KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local mine = run .. ' ' .. owner
local cur = redis.call('GET', key)
if mode == 'release' then
  if cur == mine then redis.call('DEL', key) end
  return {'ok', '', 0}
end
if (not cur) or cur == mine or (mode == 'steal' and cur == ARGV[5]) then
  redis.call('SET', key, mine, 'PX', ttl)
  return {'ok', '', 0}
end
local cur_run, cur_owner = string.match(cur, '^(%S+) (%S+)')
if cur_owner == owner then  -- this driver, for another run of its own (Spark asked anew)
  redis.call('SET', key, mine, 'PX', ttl)
  return {'ok', '', 0}
end
if cur_run == run and mode ~= 'renew' then
  redis.call('SET', key, mine, 'PX', ttl)
  return {'takeover', cur, 0}
end
if mode == 'renew' then
  return {'lost', cur, redis.call('PTTL', key)}
end
return {'held', cur, redis.call('PTTL', key)}
