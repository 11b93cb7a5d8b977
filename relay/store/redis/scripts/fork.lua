-- rawp fork: write one chunk of a forked log into the new session; the last call adds the
-- header, which is what makes the session exist.
-- KEYS[1] hdr  KEYS[2] log  KEYS[3] ids  KEYS[4] parts  KEYS[5] tomb  KEYS[6] rcv  KEYS[7] on
-- KEYS[8] nodes  KEYS[9] cli  (of the new session)
-- ARGV[1] "1" on the first call (clear leftovers)   ARGV[2] "1" on the last call (header)
-- ARGV[3..9] msgpack(SessionHeader), workspace, name, layout (keys.py), revision, head, first
-- ARGV[10..] three per copied entry: seq, message_id, msgpack LogEntry (copied verbatim)
-- Returns 0 when the new session already exists (the fork is abandoned), else 1.
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if ARGV[1] == '1' then redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[7], KEYS[8], KEYS[9]) end
local last = 0
local top = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
if top[1] then last = tonumber(string.match(top[1][1], '^%d+')) end
for i = 10, #ARGV, 3 do
  if tonumber(ARGV[i]) > last then  -- a retried call skips what it already wrote
    redis.call('XADD', KEYS[2], ARGV[i] .. '-0', 'e', ARGV[i + 2])
    redis.call('HSET', KEYS[3], ARGV[i + 1], ARGV[i])
  end
end
if ARGV[2] == '1' then
  redis.call('HSET', KEYS[1], 'meta', ARGV[3], 'ws', ARGV[4], 'name', ARGV[5], 'v', ARGV[6],
    'rev', ARGV[7], 'head', ARGV[8], 'first', ARGV[9])
  redis.call('DEL', KEYS[5])
end
return 1
