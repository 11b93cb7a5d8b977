-- rawp wakes (notes §17.5): every change of the wake records, atomically. All wake keys share
-- the slot {~wk}; a record lives in one hash field, JSON (the WakeRecord), under the member
-- "<session_id>\n<wake_id>".
-- KEYS[1] rawp:{~wk}:rec   hash member -> record JSON
-- KEYS[2] rawp:{~wk}:due   sorted set member -> due_ms (records with something to do)
-- KEYS[3] rawp:{~wk}:pend  hash "<session_id>\n<revisit_id>" -> member of its pending record
-- (per session "rawp:{~wk}:s:<session_id>": set of its members; per workspace
-- "rawp:{~wk}:ws:<workspace>": sorted set, score 0, of its members, for lex paging)
-- ARGV[1] the operation, then its arguments:
--   put RECORD             a new pending record; replaces the revisit's pending one. -> 1
--   cancel S REVISIT       drop the revisit's pending record. -> 1
--   claim NOW LEASE LIMIT TOKEN  claim due records. -> their JSON, claimed
--   settle RECORD CLAIM    replace (or remove) a record this claim holds. -> 1, or 0
--   seen S                 due records become done. -> their JSON as they were
--   drop S                 remove every record of the session. -> count
--   release                every claimed record unclaimed and due now. -> count
-- Returns what each operation says after its "->".
local rec, due, pend = KEYS[1], KEYS[2], KEYS[3]
local op = ARGV[1]

local function member(r) return r.session_id .. '\n' .. r.wake_id end
local function per_session(s) return 'rawp:{~wk}:s:' .. s end
local function per_workspace(w) return 'rawp:{~wk}:ws:' .. w end
local function pend_key(r) return r.session_id .. '\n' .. r.revisit_id end
local function isnull(v) return v == nil or v == cjson.null end

local function write(r)
  local m = member(r)
  redis.call('HSET', rec, m, cjson.encode(r))
  if isnull(r.due_ms) then
    redis.call('ZREM', due, m)
  else
    redis.call('ZADD', due, r.due_ms, m)
  end
  redis.call('SADD', per_session(r.session_id), m)
  redis.call('ZADD', per_workspace(r.workspace), 0, m)
  if r.state == 'pending' then redis.call('HSET', pend, pend_key(r), m) end
end

local function remove(r)
  local m = member(r)
  redis.call('HDEL', rec, m)
  redis.call('ZREM', due, m)
  redis.call('SREM', per_session(r.session_id), m)
  redis.call('ZREM', per_workspace(r.workspace), m)
  if redis.call('HGET', pend, pend_key(r)) == m then redis.call('HDEL', pend, pend_key(r)) end
end

local function cancel(session_id, revisit_id)
  local k = session_id .. '\n' .. revisit_id
  local m = redis.call('HGET', pend, k)
  if not m then return end
  local raw = redis.call('HGET', rec, m)
  if raw then
    local r = cjson.decode(raw)
    if r.state == 'pending' then remove(r) end
  end
  redis.call('HDEL', pend, k)
end

if op == 'put' then
  local r = cjson.decode(ARGV[2])
  cancel(r.session_id, r.revisit_id)
  write(r)
  return 1
elseif op == 'cancel' then
  cancel(ARGV[2], ARGV[3])
  return 1
elseif op == 'claim' then
  local now, lease, limit, token = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
  local got = redis.call('ZRANGE', due, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
  local out = {}
  for i, m in ipairs(got) do
    local raw = redis.call('HGET', rec, m)
    if raw then
      local r = cjson.decode(raw)
      r.claim = token .. '.' .. i
      r.due_ms = now + lease
      write(r)
      out[#out + 1] = cjson.encode(r)
    else
      redis.call('ZREM', due, m)
    end
  end
  return out
elseif op == 'settle' then
  local n = cjson.decode(ARGV[2])
  local raw = redis.call('HGET', rec, member(n))
  if not raw then return 0 end
  local c = cjson.decode(raw)
  if isnull(c.claim) or c.claim ~= ARGV[3] then return 0 end
  if c.state == 'done' and n.state == 'due' then n.state = 'done' end
  if n.state == 'done' and n.webhook ~= 'pending' then
    remove(c)
    return 1
  end
  n.claim = cjson.null
  if not (n.state == 'pending' or n.webhook == 'pending') then n.due_ms = cjson.null end
  if n.state ~= 'pending' and redis.call('HGET', pend, pend_key(n)) == member(n) then
    redis.call('HDEL', pend, pend_key(n))
  end
  write(n)
  return 1
elseif op == 'seen' then
  local out = {}
  for _, m in ipairs(redis.call('SMEMBERS', per_session(ARGV[2]))) do
    local raw = redis.call('HGET', rec, m)
    if raw then
      local r = cjson.decode(raw)
      if r.state == 'due' then
        out[#out + 1] = raw
        if r.webhook == 'pending' then
          r.state = 'done'
          write(r)
        else
          remove(r)
        end
      end
    end
  end
  return out
elseif op == 'drop' then
  local n = 0
  for _, m in ipairs(redis.call('SMEMBERS', per_session(ARGV[2]))) do
    local raw = redis.call('HGET', rec, m)
    if raw then
      remove(cjson.decode(raw))
      n = n + 1
    end
  end
  redis.call('DEL', per_session(ARGV[2]))
  return n
elseif op == 'release' then
  local n = 0
  for _, m in ipairs(redis.call('ZRANGE', due, 0, -1)) do
    local raw = redis.call('HGET', rec, m)
    if raw then
      local r = cjson.decode(raw)
      if not isnull(r.claim) then
        r.claim = cjson.null
        r.due_ms = 0
        write(r)
        n = n + 1
      end
    end
  end
  return n
end
return redis.error_reply('unknown wakes operation ' .. tostring(op))
