-- rawp attach view: what an attach (or a detach) must know of the rest of its session, read
-- at once (keys.py layouts); optionally after taking the session's mutex, together with the
-- log entries its new holder lacks, so entering the mutex is one round trip.
-- KEYS[1] hdr  KEYS[2] parts  KEYS[3] nodes  KEYS[4] cli  KEYS[5] mutex  KEYS[6] log
-- KEYS[7] rcv  (rawp:{S}:*)
-- ARGV[1] the participant whose record (and last received message id) to return ("" : none)
-- ARGV[2] a mutex token ("" : take no mutex)  ARGV[3] its time to live, ms
-- ARGV[4] the first seq of the log to return ("" : none)
-- ARGV[5] the first seq of a page of the log to return as well ("" : none), ARGV[6] its
--   size: an attach's first backlog page, read in the same round trip
-- ARGV[7] a token of the caller's own that holds the mutex with its release still on its
--   way ("" : none): the mutex is taken over from it (the release, when it lands, finds
--   another token and does nothing), so a node's next holder need not wait for it
-- Returns {0} when another holds the mutex (nothing read); else {1, the log's entries from
-- ARGV[4] on as XRANGE gives them, the view, the page from ARGV[5] (empty without one)}: the
-- view is {0} when there is no such session,
-- {1, every record} on a layout-1 session (which keeps no index), else {2, HGETALL nodes
-- (node_id, count, ...), that participant's record or false, the client records, the id of
-- that participant's last frame the log holds (rcv) or false}. What it
-- reads of the participants grows with the session's nodes and clients, not its audience.
if ARGV[2] ~= '' and not redis.call('SET', KEYS[5], ARGV[2], 'NX', 'PX', ARGV[3]) then
  if ARGV[7] == '' or redis.call('GET', KEYS[5]) ~= ARGV[7] then return {0} end
  redis.call('SET', KEYS[5], ARGV[2], 'PX', ARGV[3])
end
local log = {}
if ARGV[4] ~= '' then log = redis.call('XRANGE', KEYS[6], ARGV[4] .. '-0', '+') end
local page = {}
if ARGV[5] ~= '' then
  page = redis.call('XRANGE', KEYS[6], ARGV[5] .. '-0', '+', 'COUNT', ARGV[6])
end
local v = redis.call('HGET', KEYS[1], 'v')
if not v then return {1, log, {0}, page} end
if tonumber(v) < 2 then return {1, log, {1, redis.call('HVALS', KEYS[2])}, page} end
local own, received = false, false
if ARGV[1] ~= '' then
  own = redis.call('HGET', KEYS[2], ARGV[1])
  received = redis.call('HGET', KEYS[7], ARGV[1])
end
local clients = {}
for _, pid in ipairs(redis.call('SMEMBERS', KEYS[4])) do
  local record = redis.call('HGET', KEYS[2], pid)
  if record then clients[#clients + 1] = record end
end
return {1, log, {2, redis.call('HGETALL', KEYS[3]), own, clients, received}, page}
