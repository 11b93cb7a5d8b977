-- rawp rename: set the name and bump the revision.
-- KEYS[1] rawp:{S}:hdr
-- ARGV[1] the new name
-- Returns 0 when there is no such session, else 1.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'name', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'rev', 1)
return 1
