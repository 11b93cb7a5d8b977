-- rawp delete: drop the session's keys and leave a tombstone, unless the writer is fenced.
-- KEYS[1] hdr  KEYS[2] log  KEYS[3] ids  KEYS[4] parts  KEYS[5] tomb  KEYS[6] dl  KEYS[7] rcv
-- KEYS[8] on  KEYS[9] nodes  KEYS[10] cli  (rawp:{S}:*)
-- ARGV[1] node_id   ARGV[2] the lease epoch the delete was made under: refused FENCED like
--   an append (see append.lua) when the session fenced that node's leases up to an epoch
--   >= it (a node declared dead while its delete was in progress deletes nothing)
-- Returns {existed 0/1, workspace or nil, participant ids that may have deadlines}.
-- Errors: FENCED <epoch>.
local h = redis.call('HMGET', KEYS[1], 'ws', 'f:' .. ARGV[1])
if h[2] and tonumber(ARGV[2]) <= tonumber(h[2]) then
  return redis.error_reply('FENCED ' .. h[2])
end
local ws = h[1]
local pids = redis.call('SMEMBERS', KEYS[6])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10])
if ws then
  redis.call('SET', KEYS[5], '1')
  return {1, ws, pids}
end
return {0, false, pids}
