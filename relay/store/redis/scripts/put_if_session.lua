-- rawp put: set a field of a per-session hash only while the session exists.
-- KEYS[1] rawp:{S}:hdr  KEYS[2] the hash (e.g. rawp:{S}:parts)
-- ARGV[1] field  ARGV[2] value
-- Returns 0 when there is no such session (nothing written), else 1.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
