-- rawp claim: remove and return due deadlines; concurrent claimers never share one.
-- KEYS[1] rawp:{~dl}:due:2  sorted set, member msgpack [session_id, participant_id], score
--   due_ms: the deadlines this build arms
-- KEYS[2] rawp:{~dl}:due  the same, armed by builds before session layout 2 (keys.py)
-- KEYS[3] rawp:{~dl}:claim:<token>  this call's answer, so a retried call gets it again
-- ARGV[1] now_ms  ARGV[2] limit
-- Returns a flat array member, score, member, score, ... (earliest first within each set).
local memo = redis.call('GET', KEYS[3])
if memo then return cmsgpack.unpack(memo) end
local limit = tonumber(ARGV[2])
local due = {}
for k = 1, 2 do
  if #due / 2 < limit then
    local got = redis.call('ZRANGE', KEYS[k], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0,
      limit - #due / 2, 'WITHSCORES')
    for i = 1, #got, 2 do
      redis.call('ZREM', KEYS[k], got[i])
      due[#due + 1] = got[i]
      due[#due + 1] = got[i + 1]
    end
  end
end
if #due > 0 then redis.call('SET', KEYS[3], cmsgpack.pack(due), 'PX', 60000) end
return due
