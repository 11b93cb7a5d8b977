-- rawp delete: drop the session's keys and leave a tombstone.
-- KEYS[1] hdr  KEYS[2] log  KEYS[3] ids  KEYS[4] parts  KEYS[5] tomb  KEYS[6] dl  KEYS[7] rcv
--   (rawp:{S}:*)
-- ARGV none
-- Returns {existed 0/1, workspace or nil, participant ids that may have deadlines}.
local ws = redis.call('HGET', KEYS[1], 'ws')
local pids = redis.call('SMEMBERS', KEYS[6])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[7])
if ws then
  redis.call('SET', KEYS[5], '1')
  return {1, ws, pids}
end
return {0, false, pids}
