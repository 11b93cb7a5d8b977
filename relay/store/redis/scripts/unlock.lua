-- rawp unlock: release a mutex only if the caller still holds it (its token is there).
-- KEYS[1] rawp:{S}:mutex
-- ARGV[1] the caller's token
-- Returns 1 when released, 0 when the caller did not hold it (expired, or another's now).
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
