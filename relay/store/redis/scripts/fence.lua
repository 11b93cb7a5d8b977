-- rawp fence: refuse a dead node's appends to this session under leases up to an epoch.
-- KEYS[1] rawp:{S}:hdr
-- ARGV[1] node_id   ARGV[2] its lease epoch when it was declared dead
-- Returns 0 when there is no such session, else 1. The fence only ever rises.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local field = 'f:' .. ARGV[1]
local current = tonumber(redis.call('HGET', KEYS[1], field) or '-1')
if tonumber(ARGV[2]) > current then redis.call('HSET', KEYS[1], field, ARGV[2]) end
return 1
