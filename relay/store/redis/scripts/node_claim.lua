-- rawp claim node: take the job of sweeping a dead node; exactly one caller gets it.
-- KEYS[1] rawp:{~nodes}:live  KEYS[2] rawp:{~nodes}:sweep:<node>  (lease of its sweeper)
-- KEYS[3] rawp:{~nodes}:epoch
-- ARGV[1] node_id  ARGV[2] dead_after_ms  ARGV[3] lease_ms  ARGV[4] the caller's token
-- ARGV[5] "1": claim even if it looks alive (a node sweeping its own previous incarnation)
-- Returns -1 when the caller did not claim the node; else the node's lease epoch at the
-- claim (0: it never had one), which the sweeper fences in every session it recovers. The
-- node is removed from live, so the node, if it was only cut off, learns at its next
-- heartbeat that it was declared dead, and takes a new epoch.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local seen = redis.call('ZSCORE', KEYS[1], ARGV[1])
if ARGV[5] ~= '1' and seen and now - tonumber(seen) < tonumber(ARGV[2]) then return -1 end
if not redis.call('SET', KEYS[2], ARGV[4], 'NX', 'PX', ARGV[3]) then return -1 end
redis.call('ZREM', KEYS[1], ARGV[1])
return tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '0')
