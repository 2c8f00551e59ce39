-- Trim a stream to the entries some consumer group still needs, atomically with the check:
-- the caller computed the bound from every group's position (retention.py); here each group
-- is checked again (a group created or moved back meanwhile, an entry claimed again), then
-- XTRIM MINID removes exactly the entries before the bound ('=') or whole nodes of them ('~',
-- bounded work per call).
--
-- KEYS[1] stream
-- ARGV[1] keep from this ID (MINID), ARGV[2] the last ID removed (the bound's predecessor),
-- ARGV[3] '=' | '~', ARGV[4] number of groups the caller saw, ARGV[5] LIMIT of a '~' trim
-- (entries removed per call at most, in whole nodes), ARGV[6] 'ACKED' (an exact trim on a
-- server that takes XTRIM … ACKED, Redis >= 8.2: the server checks each entry against every
-- group too, a second guard) or ''. Not with '~': approximate ACKED trims remove nothing
-- before Redis 8.2.7 (redis#14623).
-- Returns {status, removed}: status ok, moved (a group needs entries before the bound now, or
-- the groups changed: nothing removed, compute again) or gone (no stream).
local stream = KEYS[1]
if redis.call('TYPE', stream)['ok'] ~= 'stream' then return {'gone', 0} end
local upto = ARGV[2]
local groups = redis.call('XINFO', 'GROUPS', stream)
if #groups ~= tonumber(ARGV[4]) then return {'moved', 0} end
for _, g in ipairs(groups) do
  local t = kv(g)
  if idcmp(t['last-delivered-id'], upto) < 0 then return {'moved', 0} end
  if t['pending'] > 0 then
    local p = redis.call('XPENDING', stream, t['name'])
    if idcmp(p[2], upto) <= 0 then return {'moved', 0} end
  end
end
if ARGV[3] == '~' then
  return {'ok', redis.call('XTRIM', stream, 'MINID', '~', ARGV[1], 'LIMIT', tonumber(ARGV[5]))}
end
if ARGV[6] == 'ACKED' then
  return {'ok', redis.call('XTRIM', stream, 'MINID', '=', ARGV[1], 'ACKED')}
end
return {'ok', redis.call('XTRIM', stream, 'MINID', '=', ARGV[1])}
