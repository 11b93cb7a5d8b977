-- rawp archive (notes §16.1): the header says "ended", the log stays; participants go.
-- KEYS[1] hdr  KEYS[2] parts  KEYS[3] dl  (rawp:{S}:*)
-- ARGV[1] the header's new meta (msgpack SessionHeader)
-- Returns {existed 0/1, participant ids that may have deadlines}.
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, {}} end
local pids = redis.call('SMEMBERS', KEYS[3])
redis.call('HSET', KEYS[1], 'meta', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'rev', 1)
redis.call('DEL', KEYS[2], KEYS[3])
return {1, pids}
