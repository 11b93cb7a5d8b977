-- rawp rename: set the name and bump the revision, unless the writer is fenced.
-- KEYS[1] rawp:{S}:hdr
-- ARGV[1] the new name   ARGV[2] node_id   ARGV[3] the lease epoch the rename was made under:
--   refused FENCED like an append (see append.lua) when the session fenced that node's
--   leases up to an epoch >= it
-- Returns 0 when there is no such session, else 1. Errors: FENCED <epoch>.
local h = redis.call('HMGET', KEYS[1], 'v', 'f:' .. ARGV[2])
if not h[1] then return 0 end
if h[2] and tonumber(ARGV[3]) <= tonumber(h[2]) then
  return redis.error_reply('FENCED ' .. h[2])
end
redis.call('HSET', KEYS[1], 'name', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'rev', 1)
return 1
