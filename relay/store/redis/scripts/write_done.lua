-- rawp write done: one REST write of the node to the session ended (see write_hold.lua).
-- KEYS[1] rawp:{~nodes}:writing:<N>
-- ARGV[1] session_id
-- Returns 1.
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end
return 1
