-- rawp node swept: the sweeper finished; forget the node once nothing is left to sweep.
-- KEYS[1] rawp:{~nodes}:all  KEYS[2] rawp:{~nodes}:held:<node>  KEYS[3] its sweep lease
-- KEYS[4] rawp:{~nodes}:live  KEYS[5] rawp:{~nodes}:writing:<node> (swept with the held set)
-- ARGV[1] node_id  ARGV[2] the sweeper's token
-- Returns 1 when the node was forgotten, 0 when sessions are left (or it came back).
if redis.call('GET', KEYS[3]) == ARGV[2] then redis.call('DEL', KEYS[3]) end
if redis.call('SCARD', KEYS[2]) > 0 or redis.call('ZSCORE', KEYS[4], ARGV[1]) then return 0 end
redis.call('SREM', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[5])
return 1
