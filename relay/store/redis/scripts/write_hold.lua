-- rawp write hold: before a write made outside a connection (REST), record the session as
-- one the node may write, but only while the node is live under the lease epoch the write
-- carries. A sweeper claims the node (removing it from live) before it reads what the node
-- held, so either the hold comes first and the sweep fences the session, or it is refused.
-- KEYS[1] rawp:{~nodes}:live  KEYS[2] rawp:{~nodes}:epoch  KEYS[3] rawp:{~nodes}:writing:<N>
-- ARGV[1] node_id  ARGV[2] the lease epoch  ARGV[3] session_id
-- Returns 1 when held, 0 when the node was claimed or its lease epoch is another one.
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
if tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0') ~= tonumber(ARGV[2]) then return 0 end
redis.call('HINCRBY', KEYS[3], ARGV[3], 1)
return 1
