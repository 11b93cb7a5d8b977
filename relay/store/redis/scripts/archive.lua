-- rawp archive (notes §16.1): the header says "ended", the log stays; participants go.
-- KEYS[1] hdr  KEYS[2] parts  KEYS[3] dl  KEYS[4] on  KEYS[5] nodes  KEYS[6] cli  (rawp:{S}:*)
-- ARGV[1] the header's new meta (msgpack SessionHeader)
-- ARGV[2] node_id   ARGV[3] the lease epoch the archive was made under: refused FENCED like
--   an append (see append.lua) when the session fenced that node's leases up to an epoch
--   >= it
-- Returns {existed 0/1, participant ids that may have deadlines}. Errors: FENCED <epoch>.
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, {}} end
local fence = redis.call('HGET', KEYS[1], 'f:' .. ARGV[2])
if fence and tonumber(ARGV[3]) <= tonumber(fence) then
  return redis.error_reply('FENCED ' .. fence)
end
local pids = redis.call('SMEMBERS', KEYS[3])
redis.call('HSET', KEYS[1], 'meta', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'rev', 1)
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
return {1, pids}
