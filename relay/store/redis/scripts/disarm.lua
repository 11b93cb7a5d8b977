-- rawp disarm: drop deadlines from both deadline sets (keys.py: this build's and the one of
-- builds before session layout 2, which may still hold a deadline they armed).
-- KEYS[1] rawp:{~dl}:due:2  KEYS[2] rawp:{~dl}:due
-- ARGV[1..] members, msgpack [session_id, participant_id]
-- Returns how many were dropped.
local dropped = 0
for i = 1, #ARGV do
  dropped = dropped + redis.call('ZREM', KEYS[1], ARGV[i]) + redis.call('ZREM', KEYS[2], ARGV[i])
end
return dropped
