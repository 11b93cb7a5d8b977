-- rawp claim: remove and return due deadlines; concurrent claimers never share one.
-- KEYS[1] rawp:{~dl}:due  sorted set, member msgpack [session_id, participant_id], score due_ms
-- KEYS[2] rawp:{~dl}:claim:<token>  this call's answer, so a retried call gets it again
-- ARGV[1] now_ms  ARGV[2] limit
-- Returns a flat array member, score, member, score, ... (earliest first).
local memo = redis.call('GET', KEYS[2])
if memo then return cmsgpack.unpack(memo) end
local due = redis.call('ZRANGE', KEYS[1], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, ARGV[2],
  'WITHSCORES')
for i = 1, #due, 2 do redis.call('ZREM', KEYS[1], due[i]) end
if #due > 0 then redis.call('SET', KEYS[2], cmsgpack.pack(due), 'PX', 60000) end
return due
