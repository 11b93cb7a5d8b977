-- rawp put participant: write a participant's record while the session exists, unless the
-- writer is fenced; on a layout-2 session keep the attached index in step (keys.py); with the
-- record, enter the participant in (or take it out of) the session's set of participants that
-- may have an armed deadline, so an attach or a detach writes its session's keys in one round
-- trip (the deadline itself lives in another slot: armed after, or disarmed after, by the caller).
-- KEYS[1] hdr  KEYS[2] parts  KEYS[3] on  KEYS[4] nodes  KEYS[5] cli  KEYS[6] dl  (rawp:{S}:*)
-- KEYS[7] rawp:{~dl}:due:2  KEYS[8] rawp:{~dl}:due  (optional, one Redis only: another slot
--   in a Redis Cluster): the deadline itself armed or disarmed by the same script as well
-- ARGV[1] participant_id  ARGV[2] msgpack ParticipantRecord
-- ARGV[3] the node the record says it is attached on, "" when it says detached
-- ARGV[4] "1" when the record's role is client, else "0"
-- ARGV[5] "+" to add the participant to dl, "-" to remove it, "" to leave dl alone
--   (with KEYS[7]: "+" arms the deadline at ARGV[9] ms, "-" disarms it in KEYS[7] and KEYS[8];
--   its member, msgpack [session_id, participant_id], ARGV[8])
-- ARGV[6] node_id  ARGV[7] the lease epoch the write was made under: refused FENCED like an
--   append (see append.lua) when the session fenced that node's leases up to an epoch >= it
--   (a node declared dead rewrites no participant record that the node which recovered the
--   session now owns; nor arms or disarms its deadline)
-- Returns 0 when there is no such session (nothing written), else 1. Errors: FENCED <epoch>.
local h = redis.call('HMGET', KEYS[1], 'v', 'f:' .. ARGV[6])
if not h[1] then return 0 end
if h[2] and tonumber(ARGV[7]) <= tonumber(h[2]) then
  return redis.error_reply('FENCED ' .. h[2])
end
local pid = ARGV[1]
redis.call('HSET', KEYS[2], pid, ARGV[2])
if ARGV[5] == '+' then
  redis.call('SADD', KEYS[6], pid)
  if KEYS[7] then redis.call('ZADD', KEYS[7], ARGV[9], ARGV[8]) end
elseif ARGV[5] == '-' then
  redis.call('SREM', KEYS[6], pid)
  if KEYS[7] then
    redis.call('ZREM', KEYS[7], ARGV[8])
    redis.call('ZREM', KEYS[8], ARGV[8])
  end
end
if tonumber(h[1]) < 2 then return 1 end
local was = redis.call('HGET', KEYS[3], pid) or ''
local now = ARGV[3]
if was ~= now then
  if was ~= '' and redis.call('HINCRBY', KEYS[4], was, -1) <= 0 then
    redis.call('HDEL', KEYS[4], was)
  end
  if now == '' then
    redis.call('HDEL', KEYS[3], pid)
  else
    redis.call('HSET', KEYS[3], pid, now)
    redis.call('HINCRBY', KEYS[4], now, 1)
  end
end
if ARGV[4] == '1' then
  redis.call('SADD', KEYS[5], pid)
else
  redis.call('SREM', KEYS[5], pid)
end
return 1
