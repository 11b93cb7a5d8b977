-- rawp extend: renew a mutex only if the caller still holds it (its token is there).
-- KEYS[1] rawp:{S}:mutex
-- ARGV[1] the caller's token   ARGV[2] the new time to live, ms
-- Returns 1 when renewed, 0 when the caller does not hold it (it expired, or is another's).
-- (What redis-py's Lock.reacquire does: the TTL is set anew, not added to.)
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
