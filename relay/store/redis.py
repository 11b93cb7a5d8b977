"""The durable store: Redis (or Redis Cluster), shared by every master node (notes §12).

Data model. Every key of a session carries the hash tag ``{session_id}``, so one session lives
in one cluster slot and each per-session operation is one atomic Lua script:

==========================  =================================================================
``rawp:{S}:hdr``            hash: ``meta`` (msgpack SessionHeader), ``ws``, ``name``, ``v``
                            (format version), ``rev``, ``head`` (last seq), ``first`` (smallest
                            seq kept), ``w:<writer>``/``r:<writer>`` (a writer's last append
                            batch number and answer), ``f:<node>`` (fence: that node's
                            appends under a lease epoch up to this one are refused)
``rawp:{S}:log``            stream; entry id ``<seq>-0``, field ``e`` = msgpack LogEntry, so a
                            read by seq range is one XRANGE (O(log n + k))
``rawp:{S}:ids``            hash message_id → seq (dedupe; trimmed together with the log)
``rawp:{S}:parts``          hash participant_id → msgpack ParticipantRecord
``rawp:{S}:rcv``            hash participant_id → the message id ``welcome.received`` reports
``rawp:{S}:dl``             set of participant ids that may have an armed deadline
``rawp:{S}:tomb``           tombstone left by delete
``rawp:{S}:pub``            pub/sub channel: msgpack ``[node_id, [LogEntry, ...]]`` per append
``rawp:ws:<workspace>``     sorted set (score 0) of the workspace's session ids: lex paging
``rawp:{~dl}:due``          sorted set of every deadline, member msgpack ``[S, participant]``
``rawp:cred:<digest>``      msgpack Credential
``rawp:{S}:mutex``          the session's cross-node mutex (token, PX): who its client is and
                            the finalization that follows are changed under it
``rawp:{~nodes}:live``      sorted set node_id → last heartbeat, ms on Redis's clock
``rawp:{~nodes}:all``       set of node ids that registered (and may have sessions to sweep)
``rawp:{~nodes}:held:<N>``  set of session ids node N holds connections for
``rawp:{~nodes}:writing:<N>`` hash session_id → REST writes node N has in progress there
``rawp:{~nodes}:sweep:<N>`` lease of the node sweeping dead node N (one sweeper at a time)
``rawp:{~nodes}:epoch``     hash node_id → its lease epoch (fencing token; a node that
                            registers anew, or learns it was declared dead, gets a new one)
==========================  =================================================================

Entries published with ``seq`` 0 are control messages between nodes (relay/cluster.py), never
log entries: a log's seqs start at 1.

Global keys live in other slots than the session's, so the few operations that touch both
(create, delete, fork, deadlines) write the session's keys first, atomically, and the global
index after; readers tolerate an index entry whose header is gone.

Writes are acknowledged only once durable: run Redis with ``appendonly yes`` and
``appendfsync always`` (``start`` warns otherwise). Appends go through a per-session group
commit: while one batch is in flight, later ``append`` calls queue and go together in the next
script call. Automatic retries after a lost reply are exactly-once: the claim script remembers
its answer under the call's token, the append script the last answer of each writer (a store
instance) with its batch number, and a late copy of an older batch is refused, so a batch is
applied at most once and never after a later batch of the same writer. Fencing: a session
recovered from a dead node records that node's lease epoch (``f:<node>``), and the append
script refuses the node's entries accepted under that epoch or an older one, the rename
script its header writes. A write made outside a connection (REST) first records the session
in ``writing:<N>`` with a script that checks the node is still live under the epoch the write
carries, so a sweep that claims the node finds (and fences) every session it may still write.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import secrets
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

import msgspec
import redis.asyncio as aioredis
import redis.exceptions as rexc
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from protocol.errors import FormatVersionError, SessionMissing, StoreError, StoreUnavailableError

from .base import (
    FORMAT_VERSION,
    AppendResult,
    Credential,
    Deadline,
    LogEntry,
    NewEntry,
    ParticipantRecord,
    SessionHeader,
    Store,
)

__all__ = [
    "APPEND_LUA",
    "FENCE_LUA",
    "NODE_CLAIM_LUA",
    "NodeFencedError",
    "Published",
    "RedisStore",
    "Subscription",
]

_log = logging.getLogger(__name__)

# --- Lua --------------------------------------------------------------------------------------

APPEND_LUA: Final = r"""
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
-- ARGV[6] the caller's FORMAT_VERSION (a newer header is refused)
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
"""

CREATE_LUA: Final = r"""
-- rawp create: write a session header unless one exists (idempotent create).
-- KEYS[1] hdr  KEYS[2] log  KEYS[3] ids  KEYS[4] parts  KEYS[5] tomb  KEYS[6] rcv (rawp:{S}:*)
-- ARGV[1] msgpack(SessionHeader)  ARGV[2] workspace  ARGV[3] name  ARGV[4] format version
-- ARGV[5] revision
-- Returns {1} when created, {0, HGETALL(hdr)} when the session already existed.
if redis.call('EXISTS', KEYS[1]) == 1 then return {0, redis.call('HGETALL', KEYS[1])} end
-- no header means no session: anything else under the tag is a leftover (a fork cut short)
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
redis.call('HSET', KEYS[1], 'meta', ARGV[1], 'ws', ARGV[2], 'name', ARGV[3], 'v', ARGV[4],
  'rev', ARGV[5], 'head', '0', 'first', '1')
return {1}
"""

FORK_LUA: Final = r"""
-- rawp fork: write one chunk of a forked log into the new session; the last call adds the
-- header, which is what makes the session exist.
-- KEYS[1] hdr  KEYS[2] log  KEYS[3] ids  KEYS[4] parts  KEYS[5] tomb  KEYS[6] rcv
--   (of the new session)
-- ARGV[1] "1" on the first call (clear leftovers)   ARGV[2] "1" on the last call (header)
-- ARGV[3..9] msgpack(SessionHeader), workspace, name, format version, revision, head, first
-- ARGV[10..] three per copied entry: seq, message_id, msgpack LogEntry (copied verbatim)
-- Returns 0 when the new session already exists (the fork is abandoned), else 1.
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if ARGV[1] == '1' then redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[6]) end
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
"""

DELETE_LUA: Final = r"""
-- rawp delete: drop the session's keys and leave a tombstone.
-- KEYS[1] hdr  KEYS[2] log  KEYS[3] ids  KEYS[4] parts  KEYS[5] tomb  KEYS[6] dl  KEYS[7] rcv
-- Returns {existed 0/1, workspace or nil, participant ids that may have deadlines}.
local ws = redis.call('HGET', KEYS[1], 'ws')
local pids = redis.call('SMEMBERS', KEYS[6])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[7])
if ws then
  redis.call('SET', KEYS[5], '1')
  return {1, ws, pids}
end
return {0, false, pids}
"""

RENAME_LUA: Final = r"""
-- rawp rename: set the name and bump the revision, unless the writer is fenced.
-- KEYS[1] hdr   ARGV[1] the new name   ARGV[2] node_id   ARGV[3] the lease epoch the rename
-- was made under: refused FENCED like an append (see APPEND_LUA) when the session fenced
-- that node's leases up to an epoch >= it.   Returns 0 when there is no such session.
local h = redis.call('HMGET', KEYS[1], 'v', 'f:' .. ARGV[2])
if not h[1] then return 0 end
if h[2] and tonumber(ARGV[3]) <= tonumber(h[2]) then
  return redis.error_reply('FENCED ' .. h[2])
end
redis.call('HSET', KEYS[1], 'name', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'rev', 1)
return 1
"""

ARCHIVE_LUA: Final = r"""
-- rawp archive (notes §16.1): the header says "ended", the log stays; participants go.
-- KEYS[1] hdr  KEYS[2] parts  KEYS[3] dl   ARGV[1] the header's new meta
-- Returns {existed 0/1, participant ids that may have deadlines}.
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, {}} end
local pids = redis.call('SMEMBERS', KEYS[3])
redis.call('HSET', KEYS[1], 'meta', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'rev', 1)
redis.call('DEL', KEYS[2], KEYS[3])
return {1, pids}
"""

PUT_IF_SESSION_LUA: Final = r"""
-- rawp put: set a field of a per-session hash only while the session exists.
-- KEYS[1] hdr  KEYS[2] the hash (e.g. parts)   ARGV[1] field  ARGV[2] value
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
"""

CLAIM_LUA: Final = r"""
-- rawp claim: remove and return due deadlines; concurrent claimers never share one.
-- KEYS[1] rawp:{~dl}:due  sorted set, member msgpack [session_id, participant_id], score due_ms
-- KEYS[2] rawp:{~dl}:claim:<token>  this call's answer, so a retried call gets it again
-- ARGV[1] now_ms  ARGV[2] limit
-- Returns a flat array member, score, member, score, ... (earliest first).
local memo = redis.call('GET', KEYS[2])
if memo then return cmsgpack.unpack(memo) end
local due = redis.call('ZRANGE', KEYS[1], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, ARGV[2],
  'WITHSCORES')
for i = 1, #due, 2 do redis.call('ZREM', KEYS[1], due[i]) end
if #due > 0 then redis.call('SET', KEYS[2], cmsgpack.pack(due), 'PX', 60000) end
return due
"""

NODE_HEARTBEAT_LUA: Final = r"""
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
"""

NODE_AGES_LUA: Final = r"""
-- rawp node ages: how long ago each known node heartbeated, on Redis's clock.
-- KEYS[1] rawp:{~nodes}:live   KEYS[2] rawp:{~nodes}:all
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
"""

NODE_CLAIM_LUA: Final = r"""
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
"""

FENCE_LUA: Final = r"""
-- rawp fence: refuse a dead node's appends to this session under leases up to an epoch.
-- KEYS[1] rawp:{S}:hdr   ARGV[1] node_id   ARGV[2] its lease epoch when it was declared dead
-- The fence only ever rises. Returns 0 when there is no such session, else 1.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local field = 'f:' .. ARGV[1]
local current = tonumber(redis.call('HGET', KEYS[1], field) or '-1')
if tonumber(ARGV[2]) > current then redis.call('HSET', KEYS[1], field, ARGV[2]) end
return 1
"""

WRITE_HOLD_LUA: Final = r"""
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
"""

WRITE_DONE_LUA: Final = r"""
-- rawp write done: one REST write of the node to the session ended (see WRITE_HOLD_LUA).
-- KEYS[1] rawp:{~nodes}:writing:<N>   ARGV[1] session_id
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end
return 1
"""

NODE_SWEPT_LUA: Final = r"""
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
"""

UNLOCK_LUA: Final = r"""
-- rawp unlock: release a mutex only if the caller still holds it (its token is there).
-- KEYS[1] the mutex key   ARGV[1] the caller's token.   Returns 1 when released.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# --- encoding ---------------------------------------------------------------------------------

# APPEND_LUA assembles LogEntry's array by position: fail at import, not at read, if it changes.
if LogEntry.__struct_fields__ != (
    "seq",
    "message_id",
    "type",
    "data",
    "sender_id",
    "sender_role",
    "exclude",
    "edges_only",
) or NewEntry.__struct_fields__[:2] != ("message_id", "type"):
    raise ImportError("relay.store.redis: LogEntry layout changed; update APPEND_LUA")

_enc = msgspec.msgpack.Encoder()
_entry_dec = msgspec.msgpack.Decoder(LogEntry)
_published_dec = msgspec.msgpack.Decoder(tuple[str, list[LogEntry]])
_header_dec = msgspec.msgpack.Decoder(SessionHeader)
_participant_dec = msgspec.msgpack.Decoder(ParticipantRecord)
_credential_dec = msgspec.msgpack.Decoder(Credential)
_member_dec = msgspec.msgpack.Decoder(tuple[str, str])

_SMALL_STR_HEADERS: Final = tuple(
    bytes((0xA0 | n,)) if n < 32 else bytes((0xD9, n)) for n in range(256)
)


def _str_header(n: int) -> bytes:
    """msgpack str header for ``n`` bytes: APPEND_LUA's cmsgpack decodes str, never bin."""
    if n < 256:
        return _SMALL_STR_HEADERS[n]
    return b"\xda" + n.to_bytes(2, "big") if n < 65536 else b"\xdb" + n.to_bytes(4, "big")


def _array_header(n: int) -> bytes:
    if n < 16:
        return bytes((0x90 | n,))
    return b"\xdc" + n.to_bytes(2, "big") if n < 65536 else b"\xdd" + n.to_bytes(4, "big")


_MAX_BATCH_ENTRIES: Final = 1024  # per script call: bounds how long one call holds Redis
_MAX_BATCH_BYTES: Final = 4 << 20
_FORK_CHUNK: Final = 512
_DEADLINES: Final = "rawp:{~dl}:due"
# node coordination keys share one slot, so the node scripts may touch several at once
_NODES_LIVE: Final = "rawp:{~nodes}:live"
_NODES_ALL: Final = "rawp:{~nodes}:all"
_NODES_HELD: Final = "rawp:{~nodes}:held:"
_NODES_WRITING: Final = "rawp:{~nodes}:writing:"
_NODES_SWEEP: Final = "rawp:{~nodes}:sweep:"
_NODES_EPOCH: Final = "rawp:{~nodes}:epoch"
_CLAIM_MEMO: Final = "rawp:{~dl}:claim:"
_ARCHIVED: Final = "rawp:{~ar}:ended"  # sorted set: archived session id, score ended_at_ms
# The lease epoch the writes of the current task carry instead of the store's current one
# (see RedisStore.pinned_epoch): a REST request writes under the lease it arrived under.
_PINNED_EPOCH: Final[contextvars.ContextVar[int | None]] = contextvars.ContextVar(
    "rawp_pinned_epoch", default=None
)

# ResponseError prefixes that mean "Redis cannot take writes right now", not "bad request".
_UNAVAILABLE_REPLIES: Final = (
    "LOADING",
    "MISCONF",
    "NOREPLICAS",
    "OOM",
    "READONLY",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "MASTERDOWN",
    "BUSY",
)


def _store_error(exc: BaseException) -> StoreError:
    """The store's error for a redis-py (or socket) failure."""
    if isinstance(exc, TimeoutError | rexc.ConnectionError | rexc.TimeoutError | OSError):
        return StoreUnavailableError(f"redis unreachable: {exc}")
    if isinstance(exc, rexc.ResponseError):
        text = str(exc)
        if text.startswith(_UNAVAILABLE_REPLIES) or isinstance(exc, rexc.ClusterDownError):
            return StoreUnavailableError(f"redis refused the command: {text}")
        return StoreError(f"redis error: {text}")
    if isinstance(exc, rexc.RedisClusterException):
        return StoreUnavailableError(f"redis cluster unavailable: {exc}")
    return StoreError(f"redis error: {exc}")


@contextlib.contextmanager
def _mapped() -> Iterator[None]:
    """Raise the store's errors (StoreUnavailableError et al.) instead of redis-py's."""
    try:
        yield
    except (TimeoutError, OSError, rexc.RedisError) as exc:
        raise _store_error(exc) from exc


def _received_id(entry: NewEntry) -> str:
    """What ``welcome.received`` reports for the entry's sender once it is logged."""
    return entry.message_id if entry.received_id is None else entry.received_id


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _newer(session_id: str, version: int) -> FormatVersionError:
    return FormatVersionError(
        f"session {session_id} was written by a newer build (format {version} > "
        f"{FORMAT_VERSION}); upgrade this master"
    )


def _check_id(session_id: str) -> None:
    """Session ids become hash tags: braces would move the tag and split the session."""
    if not session_id or "{" in session_id or "}" in session_id:
        raise ValueError(f"invalid session id for the redis store: {session_id!r}")


@dataclass(slots=True)
class _Keys:
    hdr: str
    log: str
    ids: str
    parts: str
    tomb: str
    dl: str
    pub: str
    rcv: str

    @classmethod
    def of(cls, session_id: str) -> _Keys:
        _check_id(session_id)
        p = f"rawp:{{{session_id}}}:"
        return cls(
            p + "hdr",
            p + "log",
            p + "ids",
            p + "parts",
            p + "tomb",
            p + "dl",
            p + "pub",
            p + "rcv",
        )


def _mutex_key(session_id: str) -> str:
    """The session's cross-node mutex: in the session's slot, outside DELETE_LUA's keys (the
    mutex outlives a delete by at most its TTL)."""
    _check_id(session_id)
    return f"rawp:{{{session_id}}}:mutex"


class NodeFencedError(StoreUnavailableError):
    """The session refused this node's entries: the node was declared dead and the session
    recovered by another node (notes §12; docs/operations.md "fencing"). Nothing accepted
    under the fenced lease epoch may be logged; the node closes its connections."""


@dataclass(slots=True)
class _Pending:
    entries: Sequence[NewEntry]
    future: asyncio.Future[list[AppendResult]]
    after: asyncio.Future[list[AppendResult]] | None = None  # see Store.append_nowait
    epoch: int = 0  # the node's lease epoch when the entries were accepted (fencing)
    size: int = field(init=False)  # bytes of the entries, for the batch bound

    def __post_init__(self) -> None:
        self.size = sum(len(e.head) + len(e.tail) for e in self.entries)

    def orphaned(self) -> bool:
        """The append it was folded on top of failed: it must not be applied."""
        after = self.after
        return (
            after is not None
            and after.done()
            and (after.cancelled() or after.exception() is not None)
        )


@dataclass(slots=True)
class _Queue:
    """Appends of one session waiting for the next script call (group commit)."""

    items: deque[_Pending] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None


class Published(NamedTuple):
    """One append batch as published on the session's channel."""

    session_id: str
    node_id: str
    entries: list[LogEntry]


def _header_from(session_id: str, fields: dict[bytes, bytes]) -> SessionHeader:
    version = int(fields[b"v"])
    if version > FORMAT_VERSION:
        raise _newer(session_id, version)
    header = _header_dec.decode(fields[b"meta"])
    header.name = fields[b"name"].decode()
    header.revision = int(fields[b"rev"])
    header.format_version = version
    return header


def _pairs(flat: list[bytes]) -> dict[bytes, bytes]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


class RedisStore(Store):
    """Store on Redis or Redis Cluster (notes §12 ``redis``)."""

    name = "redis"

    def __init__(
        self,
        url: str,
        *,
        cluster: bool = False,
        retention: int | None = None,
        node_id: str | None = None,
        **client_options: Any,
    ) -> None:
        if retention is not None and retention < 1:
            raise ValueError("retention must be at least 1 entry")
        self.url = url
        self.cluster = cluster
        self.retention = retention
        self.node_id = node_id or f"node-{secrets.token_hex(6)}"
        options: dict[str, Any] = {
            "socket_connect_timeout": 1.0,
            "socket_timeout": 5.0,
            # a stale pooled socket after a Redis restart costs one quick retry, not an error;
            # the append and claim scripts make such retries exactly-once.
            "retry": Retry(ExponentialBackoff(cap=0.5, base=0.02), 2),
            "client_name": f"rawp-{self.node_id}",
        }
        options.update(client_options)
        self._client: Any = (
            RedisCluster.from_url(url, **options)
            if cluster
            else aioredis.Redis.from_url(url, **options)
        )
        self._append_script = self._client.register_script(APPEND_LUA)
        self._create_script = self._client.register_script(CREATE_LUA)
        self._fork_script = self._client.register_script(FORK_LUA)
        self._delete_script = self._client.register_script(DELETE_LUA)
        self._rename_script = self._client.register_script(RENAME_LUA)
        self._put_script = self._client.register_script(PUT_IF_SESSION_LUA)
        self._archive_script = self._client.register_script(ARCHIVE_LUA)
        self._claim_script = self._client.register_script(CLAIM_LUA)
        self._heartbeat_script = self._client.register_script(NODE_HEARTBEAT_LUA)
        self._ages_script = self._client.register_script(NODE_AGES_LUA)
        self._node_claim_script = self._client.register_script(NODE_CLAIM_LUA)
        self._node_swept_script = self._client.register_script(NODE_SWEPT_LUA)
        self._fence_script = self._client.register_script(FENCE_LUA)
        self._write_hold_script = self._client.register_script(WRITE_HOLD_LUA)
        self._write_done_script = self._client.register_script(WRITE_DONE_LUA)
        self._unlock_script = self._client.register_script(UNLOCK_LUA)
        self._node_packed = _enc.encode(self.node_id)
        # One writer per store instance: its batch numbers only grow (see APPEND_LUA).
        self._writer = f"{self.node_id}:{secrets.token_hex(6)}"
        self._batch_no = 0
        self.lease_epoch = 0
        """This node's lease epoch (set by :meth:`node_heartbeat`); appends carry it."""
        self.on_fenced: Callable[[], None] | None = None
        """Called when a session refuses an append under the current lease epoch."""
        self._queues: dict[str, _Queue] = {}
        self._subscriptions: set[Subscription] = set()
        self._closed = False
        self.batches = 0
        """Append script calls made (group commit makes this smaller than the append calls)."""

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Check that Redis answers and warn when it does not fsync every write."""
        with _mapped():
            await self._client.ping()
        try:
            conf = await self._client.config_get("append*")
        except (rexc.RedisError, OSError):
            return  # CONFIG may be disabled (managed Redis): nothing to check
        # a cluster client answers per node ({node: {...}}), a plain one with one mapping
        nodes = (
            list(conf.values()) if conf and isinstance(next(iter(conf.values())), dict) else [conf]
        )
        for node in nodes:
            flat = {_text(k): _text(v) for k, v in node.items()}
            if flat.get("appendonly") != "yes" or flat.get("appendfsync") != "always":
                _log.warning(
                    "redis at %s does not fsync every write (appendonly=%s appendfsync=%s): "
                    "acknowledged appends can be lost in a crash",
                    self.url,
                    flat.get("appendonly"),
                    flat.get("appendfsync"),
                )
                return

    async def close(self) -> None:
        """Finish queued appends, end the subscriptions, then close the connections."""
        if self._closed:
            return
        self._closed = True
        tasks = [q.task for q in self._queues.values() if q.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for sub in list(self._subscriptions):
            await sub.aclose()
        with contextlib.suppress(rexc.RedisError, OSError):
            await self._client.aclose()

    async def ping(self, timeout: float = 2.0) -> bool:
        """True when Redis answers within ``timeout`` seconds (retries included)."""
        try:
            async with asyncio.timeout(timeout):
                return bool(await self._client.ping())
        except (TimeoutError, rexc.RedisError, OSError):
            return False

    # --- sessions ---------------------------------------------------------------------------

    @staticmethod
    def _index(workspace: str) -> str:
        return f"rawp:ws:{workspace}"

    @staticmethod
    def _header_args(header: SessionHeader) -> list[bytes | str | int]:
        return [
            _enc.encode(header),
            header.workspace,
            header.name,
            header.format_version,
            header.revision,
        ]

    async def create_session(self, header: SessionHeader) -> tuple[SessionHeader, bool]:
        k = _Keys.of(header.session_id)
        with _mapped():
            reply = await self._create_script(
                keys=[k.hdr, k.log, k.ids, k.parts, k.tomb, k.rcv], args=self._header_args(header)
            )
            if int(reply[0]) == 1:
                await self._client.zadd(self._index(header.workspace), {header.session_id: 0})
                return header, True
            existing = _header_from(header.session_id, _pairs(reply[1]))
            # repairs an index entry lost to a crash between the two writes
            await self._client.zadd(self._index(existing.workspace), {header.session_id: 0})
        return existing, False

    async def get_session(self, session_id: str) -> SessionHeader | None:
        k = _Keys.of(session_id)
        with _mapped():
            fields = await self._client.hgetall(k.hdr)
        if not fields:
            return None
        return _header_from(session_id, fields)

    async def is_deleted(self, session_id: str) -> bool:
        k = _Keys.of(session_id)
        with _mapped():
            return bool(await self._client.exists(k.tomb))

    async def list_sessions(
        self, workspace: str, *, after: str | None = None, limit: int = 100
    ) -> list[SessionHeader]:
        out: list[SessionHeader] = []
        cursor = after
        while len(out) < limit:
            want = limit - len(out)
            start = b"-" if cursor is None else b"(" + cursor.encode()
            with _mapped():
                ids = await self._client.zrange(
                    self._index(workspace), start, b"+", bylex=True, offset=0, num=want
                )
                if not ids:
                    break
                pipe = self._client.pipeline(transaction=False)
                for raw in ids:
                    pipe.hgetall(_Keys.of(_text(raw)).hdr)
                rows = await pipe.execute()
            for raw, fields in zip(ids, rows, strict=True):
                if not fields:
                    continue  # deleted a moment ago (its index entry goes next)
                session_id = _text(raw)
                try:
                    out.append(_header_from(session_id, fields))
                except FormatVersionError:
                    # listing shows what it can: the header of a newer build, undecoded
                    out.append(self._foreign_header(session_id, workspace, fields))
            cursor = _text(ids[-1])
            if len(ids) < want:
                break
        return out

    @staticmethod
    def _foreign_header(
        session_id: str, workspace: str, fields: dict[bytes, bytes]
    ) -> SessionHeader:
        """A newer build's header, reduced to what every version stores beside ``meta``."""
        return SessionHeader(
            session_id=session_id,
            workspace=workspace,
            name=fields.get(b"name", b"").decode(),
            created_at="",
            epoch="",
            format_version=int(fields[b"v"]),
            revision=int(fields.get(b"rev", b"0")),
        )

    async def rename_session(self, session_id: str, name: str) -> None:
        k = _Keys.of(session_id)
        epoch = self.write_epoch()
        try:
            with _mapped():
                await self._rename_script(keys=[k.hdr], args=[name, self.node_id, epoch])
        except StoreError as exc:
            if "FENCED" in str(exc):
                raise self._fenced(session_id, epoch) from None
            raise

    async def delete_session(self, session_id: str) -> bool:
        k = _Keys.of(session_id)
        with _mapped():
            existed, workspace, pids = await self._delete_script(
                keys=[k.hdr, k.log, k.ids, k.parts, k.tomb, k.dl, k.rcv]
            )
            if workspace is not None:
                await self._client.zrem(self._index(_text(workspace)), session_id)
            if pids:
                members = [_enc.encode((session_id, _text(p))) for p in pids]
                await self._client.zrem(_DEADLINES, *members)
            await self._client.zrem(_ARCHIVED, session_id)
        return bool(existed)

    async def archive_session(
        self, session_id: str, *, ended_at: str, ended_at_ms: int, reason: str, deleted_by: str
    ) -> bool:
        header = await self.get_session(session_id)
        if header is None:
            return False
        ended = msgspec.structs.replace(
            header, ended_at=ended_at, ended_at_ms=ended_at_ms, reason=reason, deleted_by=deleted_by
        )
        k = _Keys.of(session_id)
        with _mapped():
            existed, pids = await self._archive_script(
                keys=[k.hdr, k.parts, k.dl], args=[_enc.encode(ended)]
            )
            if pids:
                members = [_enc.encode((session_id, _text(p))) for p in pids]
                await self._client.zrem(_DEADLINES, *members)
            if existed:
                await self._client.zadd(_ARCHIVED, {session_id: ended_at_ms})
        return bool(existed)

    async def archived_before(self, cutoff_ms: int, limit: int = 100) -> list[str]:
        with _mapped():
            ids = await self._client.zrangebyscore(
                _ARCHIVED, "-inf", f"({cutoff_ms}", start=0, num=limit
            )
        return [_text(i) for i in ids]

    # --- the log ----------------------------------------------------------------------------

    async def append(self, session_id: str, entries: Sequence[NewEntry]) -> list[AppendResult]:
        return await self.append_nowait(session_id, entries)

    def append_nowait(
        self,
        session_id: str,
        entries: Sequence[NewEntry],
        *,
        after: asyncio.Future[list[AppendResult]] | None = None,
    ) -> asyncio.Future[list[AppendResult]]:
        """Queue the append at once behind the session's others (see the base class): the
        drain sends it the moment the call before is answered, or fails it if that failed."""
        _check_id(session_id)
        future: asyncio.Future[list[AppendResult]] = asyncio.get_running_loop().create_future()
        if self._closed:
            future.set_exception(StoreUnavailableError("the redis store is closed"))
            return future
        pending = _Pending(entries, future, after, self.write_epoch())
        queue = self._queues.get(session_id)
        if queue is None:
            queue = self._queues[session_id] = _Queue()
            queue.items.append(pending)
            # the drain runs as its own task so a caller's cancellation never aborts a batch
            # that carries other callers' entries
            queue.task = asyncio.create_task(self._drain(session_id, queue))
        else:
            queue.items.append(pending)
        return future

    async def _drain(self, session_id: str, queue: _Queue) -> None:
        """Run the queued appends, one script call per batch, until the queue is empty."""
        try:
            while queue.items:
                first = queue.items.popleft()
                if first.orphaned():
                    self._orphan(first)
                    continue
                batch = [first]
                count, size = len(first.entries), first.size
                while queue.items:
                    nxt = queue.items[0]
                    if nxt.orphaned() or nxt.epoch != first.epoch:
                        break  # failed on its own turn / goes with its own lease epoch
                    if (
                        count + len(nxt.entries) > _MAX_BATCH_ENTRIES
                        or size + nxt.size > _MAX_BATCH_BYTES
                    ):
                        break
                    batch.append(queue.items.popleft())
                    count += len(nxt.entries)
                    size += nxt.size
                try:
                    results = await self._append_batch(
                        session_id, [e for p in batch for e in p.entries], first.epoch
                    )
                except asyncio.CancelledError:
                    for p in batch:  # the script may or may not have run: say so
                        if not p.future.done():
                            p.future.set_exception(
                                StoreUnavailableError("append interrupted; outcome unknown")
                            )
                    raise
                except Exception as exc:
                    for p in batch:
                        if not p.future.done():
                            p.future.set_exception(exc)
                    continue
                offset = 0
                for p in batch:
                    n = len(p.entries)
                    if not p.future.done():
                        p.future.set_result(results[offset : offset + n])
                    offset += n
        finally:
            if self._queues.get(session_id) is queue:
                del self._queues[session_id]
            for p in queue.items:  # only when the drain itself was cancelled
                if not p.future.done():
                    p.future.set_exception(StoreUnavailableError("the redis store is closed"))

    @staticmethod
    def _orphan(pending: _Pending) -> None:
        if not pending.future.done():
            pending.future.set_exception(
                StoreUnavailableError("not appended: the append before it failed")
            )

    async def _append_batch(
        self, session_id: str, entries: Sequence[NewEntry], epoch: int
    ) -> list[AppendResult]:
        k = _Keys.of(session_id)
        encode = _enc.encode
        parts = [_array_header(len(entries))]
        add = parts.extend
        for e in entries:
            mid = e.message_id.encode()
            pre = encode((e.message_id, e.type))[1:]  # [1:]: drop the fixarray header
            post = encode((e.sender_id, e.sender_role, e.exclude, e.edges_only))[1:]
            sender = e.sender_id.encode()
            got = b"" if e.sender_role == "master" else _received_id(e).encode()
            add((b"\x97", _str_header(len(mid)), mid, _str_header(len(pre)), pre))
            add((_str_header(len(e.head)), e.head, _str_header(len(e.tail)), e.tail))
            add((_str_header(len(post)), post, _str_header(len(sender)), sender))
            add((_str_header(len(got)), got))
        batch = b"".join(parts)
        self._batch_no += 1
        args: list[bytes | str | int] = [
            self.retention or 0,
            k.pub,
            self._node_packed,
            self._writer,
            self._batch_no,
            FORMAT_VERSION,
            batch,
            self.node_id,
            epoch,
        ]
        self.batches += 1
        try:
            with _mapped():
                reply = await self._append_script(keys=[k.hdr, k.log, k.ids, k.rcv], args=args)
        except StoreError as exc:
            text = str(exc)
            if "NOSESSION" in text:
                raise SessionMissing(session_id) from None
            if "FORMAT " in text:
                version = int(text.rsplit("FORMAT ", 1)[1].split()[0])
                raise _newer(session_id, version) from None
            if "FENCED" in text:
                raise self._fenced(session_id, epoch) from None
            if "STALE" in text:
                raise StoreUnavailableError("append superseded by a later batch") from None
            raise
        return [
            AppendResult(seq=-r, duplicate=True) if r < 0 else AppendResult(seq=r) for r in reply
        ]

    async def read(
        self,
        session_id: str,
        *,
        after_seq: int = 0,
        before_seq: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[LogEntry]:
        k = _Keys.of(session_id)
        lo = max(after_seq + 1, 1)
        if (before_seq is not None and before_seq - 1 < lo) or (limit is not None and limit <= 0):
            return []
        low = f"{lo}-0"
        high = "+" if before_seq is None else f"{before_seq - 1}-0"
        with _mapped():
            if newest_first:
                rows = await self._client.xrevrange(k.log, high, low, count=limit)
            else:
                rows = await self._client.xrange(k.log, low, high, count=limit)
        return [_entry_dec.decode(fields[b"e"]) for _id, fields in rows]

    async def head_seq(self, session_id: str) -> int:
        k = _Keys.of(session_id)
        with _mapped():
            head = await self._client.hget(k.hdr, "head")
        return 0 if head is None else int(head)

    async def trimmed_before(self, session_id: str) -> int:
        k = _Keys.of(session_id)
        with _mapped():
            head, first = await self._client.hmget(k.hdr, ["head", "first"])
        if head is None:
            return 1
        return min(int(first), int(head) + 1)

    async def last_received(self, session_id: str, participant_id: str) -> str | None:
        """Kept by the append script per sender, so it is right on every node at once."""
        k = _Keys.of(session_id)
        with _mapped():
            got = await self._client.hget(k.rcv, participant_id)
        return None if got is None else _text(got)

    def _fenced(self, session_id: str, epoch: int) -> NodeFencedError:
        if epoch == self.lease_epoch and self.on_fenced is not None:
            self.on_fenced()  # news to this node: it was declared dead
        return NodeFencedError(
            f"session {session_id} fenced this node's lease {epoch}: declared dead"
        )

    def write_epoch(self) -> int:
        """The lease epoch this task's writes carry: the pinned one, else the current one."""
        pinned = _PINNED_EPOCH.get()
        return self.lease_epoch if pinned is None else pinned

    @contextlib.contextmanager
    def pinned_epoch(self, epoch: int) -> Iterator[None]:
        """Within the block, this task's appends and renames carry ``epoch`` (not whatever
        lease the node holds by the time they are made): a REST request writes under the
        lease it arrived under, and is refused if that lease was fenced meanwhile."""
        token = _PINNED_EPOCH.set(epoch)
        try:
            yield
        finally:
            _PINNED_EPOCH.reset(token)

    async def hold_write(self, session_id: str, epoch: int) -> bool:
        """Record a write of this node to ``session_id`` outside a connection (REST), so a
        sweep that claims this node fences the session too. False (nothing recorded) when
        the node is no longer live under ``epoch``: claimed by a sweeper, or re-registered."""
        _check_id(session_id)
        keys = [_NODES_LIVE, _NODES_EPOCH, _NODES_WRITING + self.node_id]
        with _mapped():
            held = bool(
                await self._write_hold_script(keys=keys, args=[self.node_id, epoch, session_id])
            )
        if not held and epoch == self.lease_epoch and self.on_fenced is not None:
            self.on_fenced()  # claimed while we did not know: declared dead
        return held

    async def write_done(self, session_id: str) -> None:
        """The REST write :meth:`hold_write` recorded has ended."""
        keys = [_NODES_WRITING + self.node_id]
        with _mapped():
            await self._write_done_script(keys=keys, args=[session_id])

    async def fence_node(self, session_id: str, node_id: str, epoch: int) -> bool:
        """Refuse from now on ``node_id``'s appends to the session under leases up to
        ``epoch`` (the node was declared dead). False when there is no such session."""
        k = _Keys.of(session_id)
        with _mapped():
            return bool(await self._fence_script(keys=[k.hdr], args=[node_id, epoch]))

    async def message_seq(self, session_id: str, message_id: str) -> int | None:
        k = _Keys.of(session_id)
        with _mapped():
            seq = await self._client.hget(k.ids, message_id)
        return None if seq is None else int(seq)

    async def fork_session(self, source_id: str, header: SessionHeader, at_seq: int) -> bool:
        src = _Keys.of(source_id)
        dst = _Keys.of(header.session_id)
        with _mapped():
            if not await self._client.exists(src.hdr) or await self._client.exists(dst.hdr):
                return False
            # the source's prefix is immutable (only trimming touches it): page through it
            copied: list[tuple[int, bytes]] = []
            low = "-"
            while at_seq >= 1:
                rows = await self._client.xrange(src.log, low, f"{at_seq}-0", count=_FORK_CHUNK)
                for entry_id, fields in rows:
                    copied.append((int(_text(entry_id).split("-")[0]), fields[b"e"]))
                if len(rows) < _FORK_CHUNK:
                    break
                low = f"({_text(rows[-1][0])}"
            head = copied[-1][0] if copied else 0
            first = copied[0][0] if copied else 1
            keys = [dst.hdr, dst.log, dst.ids, dst.parts, dst.tomb, dst.rcv]
            chunks = [copied[i : i + _FORK_CHUNK] for i in range(0, len(copied), _FORK_CHUNK)]
            chunks = chunks or [[]]
            for i, chunk in enumerate(chunks):
                args: list[bytes | str | int] = [
                    "1" if i == 0 else "0",
                    "1" if i == len(chunks) - 1 else "0",
                    *self._header_args(header),
                    head,
                    first,
                ]
                for seq, packed in chunk:
                    args += [seq, _entry_dec.decode(packed).message_id, packed]
                if not await self._fork_script(keys=keys, args=args):
                    return False
            await self._client.zadd(self._index(header.workspace), {header.session_id: 0})
        return True

    # --- participants and deadlines ---------------------------------------------------------

    async def put_participant(self, session_id: str, record: ParticipantRecord) -> None:
        k = _Keys.of(session_id)
        with _mapped():
            await self._put_script(
                keys=[k.hdr, k.parts], args=[record.participant_id, _enc.encode(record)]
            )

    async def get_participant(
        self, session_id: str, participant_id: str
    ) -> ParticipantRecord | None:
        k = _Keys.of(session_id)
        with _mapped():
            raw = await self._client.hget(k.parts, participant_id)
        return None if raw is None else _participant_dec.decode(raw)

    async def list_participants(self, session_id: str) -> list[ParticipantRecord]:
        k = _Keys.of(session_id)
        with _mapped():
            rows = await self._client.hvals(k.parts)
        return [_participant_dec.decode(r) for r in rows]

    async def remove_participant(self, session_id: str, participant_id: str) -> None:
        k = _Keys.of(session_id)
        with _mapped():
            await self._client.hdel(k.parts, participant_id)

    async def set_deadline(self, deadline: Deadline) -> None:
        k = _Keys.of(deadline.session_id)
        member = _enc.encode((deadline.session_id, deadline.participant_id))
        with _mapped():
            # the per-session set first: delete_session finds every deadline it must drop
            await self._client.sadd(k.dl, deadline.participant_id)
            await self._client.zadd(_DEADLINES, {member: deadline.due_ms})

    async def clear_deadline(self, session_id: str, participant_id: str) -> None:
        k = _Keys.of(session_id)
        with _mapped():
            await self._client.zrem(_DEADLINES, _enc.encode((session_id, participant_id)))
            await self._client.srem(k.dl, participant_id)

    async def claim_due_deadlines(self, now_ms: int, limit: int = 100) -> list[Deadline]:
        if limit <= 0:
            return []
        memo = _CLAIM_MEMO + secrets.token_hex(12)
        with _mapped():
            flat = await self._claim_script(keys=[_DEADLINES, memo], args=[now_ms, limit])
        out: list[Deadline] = []
        for member, score in zip(flat[::2], flat[1::2], strict=True):
            session_id, participant_id = _member_dec.decode(member)
            out.append(
                Deadline(
                    session_id=session_id,
                    participant_id=participant_id,
                    due_ms=int(float(score)),
                )
            )
        return out

    # --- credentials ------------------------------------------------------------------------

    async def put_credential(self, credential: Credential) -> None:
        with _mapped():
            await self._client.set(f"rawp:cred:{credential.digest}", _enc.encode(credential))

    async def get_credential(self, digest: str) -> Credential | None:
        with _mapped():
            raw = await self._client.get(f"rawp:cred:{digest}")
        return None if raw is None else _credential_dec.decode(raw)

    # --- nodes and session mutexes (multi-node coordination: relay/cluster.py) ------------

    async def node_heartbeat(self, node_id: str, *, new_epoch: bool = False) -> bool:
        """Record that ``node_id`` is alive; False when it had been claimed as dead.

        Sets :attr:`lease_epoch` when ``node_id`` is this store's node: a node that was not
        registered (or asks with ``new_epoch``) gets a new one.
        """
        keys = [_NODES_LIVE, _NODES_ALL, _NODES_EPOCH]
        with _mapped():
            registered, epoch = await self._heartbeat_script(
                keys=keys, args=[node_id, "1" if new_epoch else "0"]
            )
        if node_id == self.node_id:
            if not new_epoch and self.lease_epoch and int(epoch) != self.lease_epoch:
                # A new epoch we did not ask for: we were not registered, i.e. declared
                # dead, even if a retry after a lost reply found us registered again.
                registered = 0
            self.lease_epoch = max(self.lease_epoch, int(epoch))
        return bool(registered)

    async def node_epoch(self, node_id: str) -> int:
        """``node_id``'s current lease epoch (0: it never registered)."""
        with _mapped():
            got = await self._client.hget(_NODES_EPOCH, node_id)
        return 0 if got is None else int(got)

    async def node_ages(self) -> dict[str, int]:
        """Every known node → ms since its last heartbeat (-1: claimed or never seen)."""
        with _mapped():
            flat = await self._ages_script(keys=[_NODES_LIVE, _NODES_ALL])
        return {_text(n): int(a) for n, a in zip(flat[::2], flat[1::2], strict=True)}

    async def claim_node(
        self, node_id: str, *, dead_after_ms: int, lease_ms: int, token: str, force: bool = False
    ) -> int | None:
        """Become the one sweeper of ``node_id`` if it is dead (or ``force``); atomic.

        Returns the node's lease epoch at the claim (to fence), or None when not claimed.
        """
        keys = [_NODES_LIVE, _NODES_SWEEP + node_id, _NODES_EPOCH]
        args: list[str | int] = [node_id, dead_after_ms, lease_ms, token, "1" if force else "0"]
        with _mapped():
            epoch = int(await self._node_claim_script(keys=keys, args=args))
        return None if epoch < 0 else epoch

    async def node_swept(self, node_id: str, token: str) -> bool:
        """The sweep of ``node_id`` ended; forget the node when nothing is left of it."""
        keys = [
            _NODES_ALL,
            _NODES_HELD + node_id,
            _NODES_SWEEP + node_id,
            _NODES_LIVE,
            _NODES_WRITING + node_id,
        ]
        with _mapped():
            return bool(await self._node_swept_script(keys=keys, args=[node_id, token]))

    async def retire_node(self, node_id: str) -> None:
        """Mark ``node_id`` dead now (a clean shutdown): the next sweep takes its sessions."""
        with _mapped():
            await self._client.zadd(_NODES_LIVE, {node_id: 0})

    async def hold_session(self, node_id: str, session_id: str) -> None:
        """Record that ``node_id`` holds connections of ``session_id``."""
        with _mapped():
            await self._client.sadd(_NODES_HELD + node_id, session_id)

    async def release_session(self, node_id: str, session_id: str) -> None:
        """``node_id`` holds no connection of ``session_id`` any more."""
        with _mapped():
            await self._client.srem(_NODES_HELD + node_id, session_id)

    async def held_sessions(self, node_id: str) -> list[str]:
        """The sessions ``node_id`` holds (or held when it died) connections for, or has a
        REST write in progress to (:meth:`hold_write`)."""
        with _mapped():
            held = await self._client.smembers(_NODES_HELD + node_id)
            writing = await self._client.hkeys(_NODES_WRITING + node_id)
        return sorted({_text(s) for s in (*held, *writing)})

    async def lock_session(self, session_id: str, token: str, ttl_ms: int) -> bool:
        """Try to take the session's cross-node mutex for ``ttl_ms``; False when held."""
        key = _mutex_key(session_id)
        with _mapped():
            return bool(await self._client.set(key, token, nx=True, px=ttl_ms))

    async def unlock_session(self, session_id: str, token: str) -> None:
        """Release the session's mutex if ``token`` still holds it."""
        key = _mutex_key(session_id)
        with _mapped():
            await self._unlock_script(keys=[key], args=[token])

    # --- pub/sub ----------------------------------------------------------------------------

    async def publish(self, session_id: str, entries: Sequence[LogEntry]) -> None:
        """Publish ``entries`` on the session's channel as this node (control messages).

        Subscribers get them as one :class:`Published` batch; entries with ``seq`` 0 are never
        mistaken for log entries (a log's seqs start at 1).
        """
        payload = _enc.encode((self.node_id, list(entries)))
        with _mapped():
            await self._client.publish(self.channel(session_id), payload)

    async def subscribe(self, *session_ids: str, own: bool = True) -> Subscription:
        """Receive every batch appended to these sessions from now on (any node's appends).

        Returns once Redis confirmed the subscriptions, so an append that starts after this
        returns is delivered. Use as ``async with await store.subscribe(s) as sub: async for
        batch in sub: ...``. See :class:`Subscription` for outages. ``own=False`` leaves out
        the batches this node published, undecoded (a node delivers its own appends itself).
        """
        if self._closed:
            raise StoreUnavailableError("the redis store is closed")
        sub = Subscription(self, own=own)
        self._subscriptions.add(sub)
        if session_ids:
            try:
                await sub.add(*session_ids)
            except BaseException:
                await sub.aclose()
                raise
        return sub

    def channel(self, session_id: str) -> str:
        """The session's pub/sub channel."""
        return _Keys.of(session_id).pub


class Subscription:
    """Published append batches of some sessions: an async iterator of :class:`Published`.

    One Redis connection carries every channel; a reader task owns it, so ``add`` and
    ``remove`` may be called while another task iterates.

    Outages: batches published while the connection is down are lost. The iterator raises
    StoreUnavailableError once when the connection fails (iterate again to go on); once it is
    back, it yields an empty batch (``node_id`` "") per session as its channel is subscribed
    again: the consumer then reads what it missed from the log (notes §12: a seq gap is filled
    from the log), and misses nothing published after that.
    """

    _CONFIRM_TIMEOUT: Final = 10.0

    def __init__(self, store: RedisStore, *, own: bool = True) -> None:
        self._store = store
        # a batch starts with msgpack [node_id, ...]: this prefix marks our node's own
        self._own_prefix = None if own else b"\x92" + store._node_packed
        self._pubsub: Any = store._client.pubsub()
        self._queue: asyncio.Queue[Published | BaseException | None] = asyncio.Queue()
        self._confirm: dict[bytes, list[asyncio.Future[None]]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._closed = False

    async def add(self, *session_ids: str) -> None:
        """Subscribe to more sessions; returns once Redis confirmed."""
        channels = [self._store.channel(s).encode() for s in session_ids]
        loop = asyncio.get_running_loop()
        waits: list[asyncio.Future[None]] = []
        for ch in channels:
            fut: asyncio.Future[None] = loop.create_future()
            self._confirm.setdefault(ch, []).append(fut)
            waits.append(fut)
        try:
            with _mapped():
                await self._pubsub.subscribe(*channels)
            if self._reader is None:
                self._reader = asyncio.create_task(self._read())
            async with asyncio.timeout(self._CONFIRM_TIMEOUT):
                await asyncio.gather(*waits)
        except TimeoutError as exc:
            raise StoreUnavailableError("redis did not confirm the subscription") from exc
        finally:
            for ch, fut in zip(channels, waits, strict=True):
                pending = self._confirm.get(ch, [])
                if fut in pending:
                    pending.remove(fut)
                if not pending:
                    self._confirm.pop(ch, None)

    async def remove(self, *session_ids: str) -> None:
        """Stop receiving these sessions' batches."""
        with _mapped():
            await self._pubsub.unsubscribe(*(self._store.channel(s) for s in session_ids))

    async def _read(self) -> None:
        backoff = 0.05
        failing = False
        while True:
            try:
                msg = await self._pubsub.get_message(timeout=None)
                backoff, failing = 0.05, False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the reader must outlive any one failure
                if not failing:  # one error per outage, not one per reconnect attempt
                    self._queue.put_nowait(_store_error(exc))
                    failing = True
                await asyncio.sleep(backoff)  # the next read reconnects and resubscribes
                backoff = min(backoff * 2, 1.0)
                continue
            if msg is None:
                continue
            channel = msg.get("channel")
            if not isinstance(channel, bytes):
                continue
            session_id = _text(channel).split("{", 1)[1].rsplit("}", 1)[0]
            if msg["type"] == "subscribe":
                waiters = self._confirm.pop(channel, [])
                for fut in waiters:
                    if not fut.done():
                        fut.set_result(None)
                if not waiters:
                    # resubscribed after a reconnect: from here on nothing is missed, what
                    # came before must be read from the log
                    self._queue.put_nowait(Published(session_id, "", []))
            elif msg["type"] == "message":
                own = self._own_prefix
                if own is not None and msg["data"].startswith(own):
                    continue
                try:
                    node_id, entries = _published_dec.decode(msg["data"])
                except msgspec.DecodeError:
                    _log.warning("undecodable batch on %s", _text(channel))
                    continue
                self._queue.put_nowait(Published(session_id, node_id, entries))

    def __aiter__(self) -> AsyncIterator[Published]:
        return self

    async def __anext__(self) -> Published:
        if self._closed and self._queue.empty():
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is None:
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            raise item
        return item

    async def aclose(self) -> None:
        """Unsubscribe and close the connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._store._subscriptions.discard(self)
        if self._reader is not None:
            # cancelled again until it ends: on Python 3.11 a cancel that lands inside
            # redis-py's asyncio.wait_for can be swallowed (gh-86296)
            while not self._reader.done():
                self._reader.cancel()
                await asyncio.wait({self._reader}, timeout=0.1)
        with contextlib.suppress(rexc.RedisError, OSError):
            await self._pubsub.aclose()
        self._queue.put_nowait(None)

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
