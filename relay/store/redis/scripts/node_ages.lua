-- rawp node ages: how long ago each known node heartbeated, on Redis's clock.
-- KEYS[1] rawp:{~nodes}:live   KEYS[2] rawp:{~nodes}:all
-- ARGV none
-- Returns a flat array node_id, age_ms, ...; age -1 for a node that is not in live (claimed
-- by a sweeper, or never heartbeated).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out, seen = {}, {}
local live = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #live, 2 do
  out[#out + 1] = live[i]
  out[#out + 1] = now - tonumber(live[i + 1])
  seen[live[i]] = true
end
for _, node in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if not seen[node] then
    out[#out + 1] = node
    out[#out + 1] = -1
  end
end
return out
