-- rawp remove participant: drop a participant's record and its place in the attached index.
-- KEYS[1] parts  KEYS[2] on  KEYS[3] nodes  KEYS[4] cli  (rawp:{S}:*)
-- ARGV[1] participant_id
-- Returns 1 when there was such a record, else 0. (A layout-1 session has no index: the
-- index commands find nothing.)
local pid = ARGV[1]
local was = redis.call('HGET', KEYS[2], pid)
if was then
  redis.call('HDEL', KEYS[2], pid)
  if redis.call('HINCRBY', KEYS[3], was, -1) <= 0 then redis.call('HDEL', KEYS[3], was) end
end
redis.call('SREM', KEYS[4], pid)
return redis.call('HDEL', KEYS[1], pid)
