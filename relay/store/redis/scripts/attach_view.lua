-- rawp attach view: what an attach must know of the others, read at once (keys.py layouts).
-- KEYS[1] hdr  KEYS[2] parts  KEYS[3] nodes  KEYS[4] cli  (rawp:{S}:*)
-- ARGV[1] the attaching participant's id ("" : none)
-- Returns {0} when there is no such session; on a layout-1 session {1, every record} (the
-- index is not kept there); else {2, HGETALL nodes (node_id, count, ...), that participant's
-- record or false, the client records}. What it reads grows with the session's nodes and
-- clients, not with its audience.
local v = redis.call('HGET', KEYS[1], 'v')
if not v then return {0} end
if tonumber(v) < 2 then return {1, redis.call('HVALS', KEYS[2])} end
local own = false
if ARGV[1] ~= '' then own = redis.call('HGET', KEYS[2], ARGV[1]) end
local clients = {}
for _, pid in ipairs(redis.call('SMEMBERS', KEYS[4])) do
  local record = redis.call('HGET', KEYS[2], pid)
  if record then clients[#clients + 1] = record end
end
return {2, redis.call('HGETALL', KEYS[3]), own, clients}
