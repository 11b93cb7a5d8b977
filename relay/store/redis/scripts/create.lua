-- rawp create: write a session header unless one exists (idempotent create).
-- KEYS[1] hdr  KEYS[2] log  KEYS[3] ids  KEYS[4] parts  KEYS[5] tomb  KEYS[6] rcv  KEYS[7] on
-- KEYS[8] nodes  KEYS[9] cli  (rawp:{S}:*)
-- ARGV[1] msgpack(SessionHeader)  ARGV[2] workspace  ARGV[3] name  ARGV[4] layout (keys.py)
-- ARGV[5] revision
-- Returns {1} when created, {0, HGETALL(hdr)} when the session already existed.
if redis.call('EXISTS', KEYS[1]) == 1 then return {0, redis.call('HGETALL', KEYS[1])} end
-- no header means no session: anything else under the tag is a leftover (a fork cut short)
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9])
redis.call('HSET', KEYS[1], 'meta', ARGV[1], 'ws', ARGV[2], 'name', ARGV[3], 'v', ARGV[4],
  'rev', ARGV[5], 'head', '0', 'first', '1')
return {1}
