-- rawp put: set a field of a per-session hash only while the session exists, unless the
-- writer is fenced.
-- KEYS[1] rawp:{S}:hdr  KEYS[2] the hash (e.g. rawp:{S}:parts)
-- ARGV[1] field  ARGV[2] value  ARGV[3] node_id  ARGV[4] the lease epoch the write was made
--   under: refused FENCED like an append (see append.lua) when the session fenced that
--   node's leases up to an epoch >= it (a node declared dead rewrites no participant record
--   that the node which recovered the session now owns)
-- Returns 0 when there is no such session (nothing written), else 1. Errors: FENCED <epoch>.
local h = redis.call('HMGET', KEYS[1], 'v', 'f:' .. ARGV[3])
if not h[1] then return 0 end
if h[2] and tonumber(ARGV[4]) <= tonumber(h[2]) then
  return redis.error_reply('FENCED ' .. h[2])
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
