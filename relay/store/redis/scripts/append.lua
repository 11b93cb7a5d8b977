-- rawp append: fence, dedupe, assign seqs, log, trim, bump the revision and publish, at once.
-- KEYS[1] rawp:{S}:hdr  header hash (head, first, rev, v; f:<node> fence of a dead node's
--                       leases; w:<writer>/r:<writer> the writer's last batch number and answer)
-- KEYS[2] rawp:{S}:log  stream; entry id "<seq>-0", field "e" = msgpack LogEntry
-- KEYS[3] rawp:{S}:ids  hash message_id -> seq of the entries still kept
-- KEYS[4] rawp:{S}:rcv  hash participant_id -> the message id welcome.received reports
-- ARGV[1] retention: keep the newest N entries (0: keep everything)
-- ARGV[2] pub/sub channel rawp:{S}:pub
-- ARGV[3] msgpack(node_id): origin of the published batch
-- ARGV[4] writer: this store instance (node id + a random part), ARGV[5] its batch number,
--   increasing with every call. A retry of the writer's last call gets its first answer; a
--   copy of an older call that reaches Redis late (a timed-out connection, a delaying proxy)
--   is refused STALE, never applied after the writer's newer batches.
-- ARGV[6] the caller's LAYOUT_VERSION (a session of a newer layout is refused)
-- ARGV[7] msgpack array of the entries, each an array of seven strings:
--   message_id | msgpack(message_id) msgpack(type) | head | tail
--   | msgpack(sender_id) msgpack(sender_role) msgpack(exclude) msgpack(edges_only)
--   | sender_id | the id welcome.received reports for the sender ("" : none)
--   (one argument for the whole batch: packing thousands of arguments cost the master more
--   than the script cost Redis)
-- ARGV[8] node_id, ARGV[9] the lease epoch the entries were accepted under: refused FENCED
--   when the session fenced that node's leases up to an epoch >= it (the node was declared
--   dead and its sessions recovered: nothing it accepted before it noticed may be logged)
-- The stored entry is LogEntry's msgpack array [seq, message_id, type, data, sender_id,
-- sender_role, exclude, edges_only] with data = head .. seq .. tail, assembled from the
-- pre-packed pieces (Lua never decodes the client's bytes).
-- Returns one integer per entry: its new seq, or -seq of the entry it duplicates.
-- Errors: NOSESSION (no header), FORMAT <v> (header written by a newer build),
-- FENCED <epoch>, STALE.
local hdr, log, ids, rcv = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local wfield, rfield = 'w:' .. ARGV[4], 'r:' .. ARGV[4]
local h = redis.call('HMGET', hdr, 'head', 'first', 'v', wfield, rfield, 'f:' .. ARGV[8])
if not h[1] then return redis.error_reply('NOSESSION') end
if tonumber(h[3]) > tonumber(ARGV[6]) then return redis.error_reply('FORMAT ' .. h[3]) end
local batch_no = tonumber(ARGV[5])
if h[4] then
  local last = tonumber(h[4])
  if batch_no == last then return cmsgpack.unpack(h[5]) end
  if batch_no < last then return redis.error_reply('STALE') end
end
if h[6] and tonumber(ARGV[9]) <= tonumber(h[6]) then
  return redis.error_reply('FENCED ' .. h[6])
end
local head, first = tonumber(h[1]), tonumber(h[2])

local function bin(s)  -- msgpack bin8/16/32
  local n = #s
  if n < 256 then return '\196' .. string.char(n) .. s end
  if n < 65536 then return '\197' .. struct.pack('>I2', n) .. s end
  return '\198' .. struct.pack('>I4', n) .. s
end

local results, packed = {}, {}
local received = {}
for _, e in ipairs(cmsgpack.unpack(ARGV[7])) do
  local dup = redis.call('HGET', ids, e[1])
  if dup then
    results[#results + 1] = -tonumber(dup)
  else
    head = head + 1
    local seq = string.format('%d', head)
    local entry = '\152' .. cmsgpack.pack(head) .. e[2] .. bin(e[3] .. seq .. e[4]) .. e[5]
    redis.call('XADD', log, seq .. '-0', 'e', entry)
    redis.call('HSET', ids, e[1], seq)
    results[#results + 1] = head
    packed[#packed + 1] = entry
    if e[7] ~= '' then
      received[#received + 1] = e[6]
      received[#received + 1] = e[7]
    end
  end
end
if #received > 0 then redis.call('HSET', rcv, unpack(received)) end

local n = #packed
if n > 0 then
  local retention = tonumber(ARGV[1])
  if retention > 0 and head - first + 1 > retention then
    -- at most 4096 per call, so lowering the retention of a long log never stalls Redis
    local cut = math.min(head - retention + 1, first + 4096)
    local old = redis.call('XRANGE', log, '-', string.format('%d-0', cut - 1))
    for _, item in ipairs(old) do
      -- the message id sits right after the array header and the packed seq
      local s = tonumber(string.match(item[1], '^%d+'))
      local _, mid = cmsgpack.unpack_one(item[2][2], 1 + #cmsgpack.pack(s))
      redis.call('HDEL', ids, mid)
    end
    redis.call('XTRIM', log, 'MINID', string.format('%d-0', cut))
    first = cut
  end
  redis.call('HSET', hdr, 'head', string.format('%d', head), 'first', string.format('%d', first))
  redis.call('HINCRBY', hdr, 'rev', n)
  local arr
  if n < 16 then arr = string.char(144 + n)
  elseif n < 65536 then arr = '\220' .. struct.pack('>I2', n)
  else arr = '\221' .. struct.pack('>I4', n) end
  redis.call('PUBLISH', ARGV[2], '\146' .. ARGV[3] .. arr .. table.concat(packed))
end
redis.call('HSET', hdr, wfield, ARGV[5], rfield, cmsgpack.pack(results))
return results
