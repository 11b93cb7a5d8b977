-- rawp heartbeat: this node is alive now, on Redis's clock (node clocks never matter).
-- KEYS[1] rawp:{~nodes}:live  sorted set node_id -> last heartbeat (ms)
-- KEYS[2] rawp:{~nodes}:all   set of every node id that registered
-- KEYS[3] rawp:{~nodes}:epoch hash node_id -> lease epoch (the fencing token)
-- ARGV[1] node_id   ARGV[2] "1": take a new lease epoch even if still registered
-- Returns {registered, epoch}: registered 1 when the node was still registered, 0 when it
-- was not (on a node that registered before: a sweeper claimed it, declared it dead, in the
-- meantime). A node that was not registered, or asks for it, gets a new, larger epoch: what
-- it accepted under the old one can be fenced without fencing what it accepts from now on.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local had = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('SADD', KEYS[2], ARGV[1])
local epoch
if had and ARGV[2] ~= '1' then
  epoch = tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '0')
  if epoch == 0 then epoch = redis.call('HINCRBY', KEYS[3], ARGV[1], 1) end
else
  epoch = redis.call('HINCRBY', KEYS[3], ARGV[1], 1)
end
if had then return {1, epoch} end
return {0, epoch}
