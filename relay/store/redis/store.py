"""RedisStore: the durable store on Redis (or Redis Cluster), shared by every master node.

It keeps sessions, their logs (reads here, appends through :class:`Appender`), participants,
deadlines and credentials itself, and hands node coordination to :class:`Coordination` and
pub/sub to :class:`PubSub`; the key layout is in ``keys.py``, the scripts in ``scripts/``.

Writes are acknowledged only once durable: run Redis with ``appendonly yes`` and
``appendfsync always`` (``start`` warns otherwise).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec
import redis.asyncio as aioredis
import redis.exceptions as rexc
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from protocol.errors import FormatVersionError, StoreError, StoreUnavailableError

from ..base import (
    AppendResult,
    Credential,
    Deadline,
    LogEntry,
    NewEntry,
    ParticipantRecord,
    SessionHeader,
    Store,
    WakeRecord,
)
from .appender import Appender
from .coordination import Coordination
from .errors import mapped
from .framing import (
    LAYOUT_VERSION,
    AttachView,
    credential_dec,
    encode,
    entry_dec,
    foreign_header,
    header_args,
    header_from,
    member_dec,
    pairs,
    participant_dec,
    stamped,
    text,
)
from .keys import (
    ARCHIVED,
    CLAIM_MEMO,
    DEADLINES,
    EARLIER_DEADLINES,
    KEYS_INDEX,
    WAKE_DUE,
    WAKE_PENDING,
    WAKE_RECORDS,
    SessionKeys,
    channel,
    credential_key,
    credential_used_key,
    mutex_key,
    workspace_index,
)
from .lease import Lease
from .lua import Scripts
from .pool import WaitingPool
from .pubsub import PubSub, Subscription
from .sharing import SharedReads

__all__ = ["Entered", "RedisStore"]

_wake_enc: Final = msgspec.json.Encoder()
_wake_dec: Final = msgspec.json.Decoder(WakeRecord)

_log = logging.getLogger("relay.store.redis")

_FORK_CHUNK: Final = 512
# Connections to one Redis, at most (a ``max_connections`` in the URL's query wins), and how
# long a command waits for one of them before the store is unavailable. Waiting, not failing:
# a burst of attaches (a reconnect storm) asks for more at once than any pool holds.
_POOL_SIZE: Final = 100
_POOL_WAIT_S: Final = 5.0


@dataclass(frozen=True, slots=True)
class Entered:
    """What a session's mutex holder found on taking it (:meth:`RedisStore.enter_session`)."""

    entries: list[LogEntry] | None
    """the log after the seq asked for (None: not asked)"""
    view: AttachView
    page: list[LogEntry] | None = None
    """the page of the log asked for as well (None: not asked)"""


class RedisStore(Store):
    """Store on Redis or Redis Cluster (notes §12 ``redis``)."""

    name = "redis"
    format_version = LAYOUT_VERSION

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
        if cluster:
            # The cluster client has no waiting pool: past max_connections per node (100) a
            # command fails at once, unavailable (docs/operations.md §2).
            self._client: Any = RedisCluster.from_url(url, **options)
        else:
            pool = WaitingPool.from_url(
                url, **{"max_connections": _POOL_SIZE, "timeout": _POOL_WAIT_S, **options}
            )
            self._client = aioredis.Redis.from_pool(pool)  # closed with the client
        self._scripts = Scripts(self._client)
        self.lease = Lease(self._scripts, self.node_id)
        """This node's lease epoch, what its writes carry, REST write holds."""
        self.appender = Appender(
            self._scripts.append,
            node_id=self.node_id,
            retention=retention,
            fenced=self.lease.fenced,
        )
        """The append queue (group commit, the writer's batch numbers)."""
        self.coordination = Coordination(self._client, self._scripts)
        """Node heartbeats, sweeps, lease epochs, held sets, session mutexes."""
        self.pubsub = PubSub(self._client, self.node_id)
        """The sessions' channels."""
        self._header_reads: SharedReads[dict[bytes, bytes]] = SharedReads()
        self._credential_reads: SharedReads[bytes | None] = SharedReads()
        self._closed = False

    @property
    def lease_epoch(self) -> int:
        """This node's lease epoch (set by :meth:`node_heartbeat`); appends carry it."""
        return self.lease.epoch

    @lease_epoch.setter
    def lease_epoch(self, epoch: int) -> None:
        self.lease.epoch = epoch

    @property
    def on_fenced(self) -> Callable[[], None] | None:
        """Called when a session refuses a write under the current lease epoch."""
        return self.lease.on_fenced

    @on_fenced.setter
    def on_fenced(self, callback: Callable[[], None] | None) -> None:
        self.lease.on_fenced = callback

    @property
    def retention(self) -> int | None:
        """Keep the newest N entries of each log (None: everything)."""
        return self.appender.retention

    @property
    def batches(self) -> int:
        """Append script calls made (group commit makes this smaller than the append calls)."""
        return self.appender.batches

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Check that Redis answers and warn when it does not fsync every write."""
        with mapped():
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
            flat = {text(k): text(v) for k, v in node.items()}
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
        await self.appender.close()
        await self.pubsub.close()
        await self.coordination.close()
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

    async def create_session(self, header: SessionHeader) -> tuple[SessionHeader, bool]:
        header = stamped(header)
        k = SessionKeys.of(header.session_id)
        with self._writes_header(header.session_id), mapped():
            reply = await self._scripts.create(keys=k.created(), args=header_args(header))
            if int(reply[0]) == 1:
                await self._client.zadd(workspace_index(header.workspace), {header.session_id: 0})
                return header, True
            existing = header_from(header.session_id, pairs(reply[1]))
            # repairs an index entry lost to a crash between the two writes
            await self._client.zadd(workspace_index(existing.workspace), {header.session_id: 0})
        return existing, False

    async def get_session(self, session_id: str) -> SessionHeader | None:
        """The header; a read of it already on its way is shared (see :mod:`.sharing`)."""
        fields = await self._header_reads.read(session_id, lambda: self._header_fields(session_id))
        if not fields:
            return None
        return header_from(session_id, fields)

    async def _header_fields(self, session_id: str) -> dict[bytes, bytes]:
        with mapped():
            fields: dict[bytes, bytes] = await self._client.hgetall(SessionKeys.of(session_id).hdr)
        return fields

    @contextlib.contextmanager
    def _writes_header(self, session_id: str) -> Iterator[None]:
        """Around a write of the session's header: reads that start after it read it anew."""
        try:
            yield
        finally:
            self._header_reads.forget(session_id)

    async def is_deleted(self, session_id: str) -> bool:
        k = SessionKeys.of(session_id)
        with mapped():
            return bool(await self._client.exists(k.tomb))

    async def list_sessions(
        self, workspace: str, *, after: str | None = None, limit: int = 100
    ) -> list[SessionHeader]:
        out: list[SessionHeader] = []
        cursor = after
        while len(out) < limit:
            want = limit - len(out)
            start = b"-" if cursor is None else b"(" + cursor.encode()
            with mapped():
                ids = await self._client.zrange(
                    workspace_index(workspace), start, b"+", bylex=True, offset=0, num=want
                )
                if not ids:
                    break
                pipe = self._client.pipeline(transaction=False)
                for raw in ids:
                    pipe.hgetall(SessionKeys.of(text(raw)).hdr)
                rows = await pipe.execute()
            for raw, fields in zip(ids, rows, strict=True):
                if not fields:
                    continue  # deleted a moment ago (its index entry goes next)
                session_id = text(raw)
                try:
                    out.append(header_from(session_id, fields))
                except FormatVersionError:
                    # listing shows what it can: the header of a newer build, undecoded
                    out.append(foreign_header(session_id, workspace, fields))
            cursor = text(ids[-1])
            if len(ids) < want:
                break
        return out

    async def _fenced_write(
        self, session_id: str, script: Any, keys: list[Any], *args: Any, then: Sequence[Any] = ()
    ) -> Any:
        """Run a write script with this node's id and lease epoch appended to ``args`` (and
        ``then`` after them); the script refuses it FENCED when the session fenced that lease
        (like an append)."""
        epoch = self.lease.write_epoch()
        try:
            with mapped():
                return await script(keys=keys, args=[*args, self.node_id, epoch, *then])
        except StoreError as exc:
            if "FENCED" in str(exc):
                raise self.lease.fenced(session_id, epoch) from None
            raise

    async def rename_session(self, session_id: str, name: str) -> None:
        k = SessionKeys.of(session_id)
        with self._writes_header(session_id):
            await self._fenced_write(session_id, self._scripts.rename, [k.hdr], name)

    async def delete_session(self, session_id: str) -> bool:
        k = SessionKeys.of(session_id)
        keys = [k.hdr, k.log, k.ids, k.parts, k.tomb, k.dl, k.rcv, *k.index()]
        with self._writes_header(session_id):
            existed, workspace, pids = await self._fenced_write(
                session_id, self._scripts.delete, keys
            )
        with mapped():
            if workspace is not None:
                await self._client.zrem(workspace_index(text(workspace)), session_id)
            if pids:
                await self._disarm(session_id, [text(p) for p in pids])
            await self._client.zrem(ARCHIVED, session_id)
            await self._wakes("drop", session_id)
        return bool(existed)

    async def archive_session(
        self, session_id: str, *, ended_at: str, ended_at_ms: int, reason: str, deleted_by: str
    ) -> bool:
        fields = await self._header_fields(session_id)  # not shared: rewritten below
        if not fields:
            return False
        header = header_from(session_id, fields)
        ended = msgspec.structs.replace(
            header, ended_at=ended_at, ended_at_ms=ended_at_ms, reason=reason, deleted_by=deleted_by
        )
        k = SessionKeys.of(session_id)
        keys = [k.hdr, k.parts, k.dl, *k.index()]
        with self._writes_header(session_id):
            existed, pids = await self._fenced_write(
                session_id, self._scripts.archive, keys, encode(ended)
            )
        with mapped():
            if pids:
                await self._disarm(session_id, [text(p) for p in pids])
            if existed:
                await self._client.zadd(ARCHIVED, {session_id: ended_at_ms})
                await self._wakes("drop", session_id)
        return bool(existed)

    async def archived_before(self, cutoff_ms: int, limit: int = 100) -> list[str]:
        with mapped():
            ids = await self._client.zrangebyscore(
                ARCHIVED, "-inf", f"({cutoff_ms}", start=0, num=limit
            )
        return [text(i) for i in ids]

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
        return self.appender.append_nowait(
            session_id, entries, after=after, epoch=self.lease.write_epoch()
        )

    async def read(
        self,
        session_id: str,
        *,
        after_seq: int = 0,
        before_seq: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[LogEntry]:
        k = SessionKeys.of(session_id)
        lo = max(after_seq + 1, 1)
        if (before_seq is not None and before_seq - 1 < lo) or (limit is not None and limit <= 0):
            return []
        low = f"{lo}-0"
        high = "+" if before_seq is None else f"{before_seq - 1}-0"
        with mapped():
            if newest_first:
                rows = await self._client.xrevrange(k.log, high, low, count=limit)
            else:
                rows = await self._client.xrange(k.log, low, high, count=limit)
        return [entry_dec.decode(fields[b"e"]) for _id, fields in rows]

    async def head_seq(self, session_id: str) -> int:
        k = SessionKeys.of(session_id)
        with mapped():
            head = await self._client.hget(k.hdr, "head")
        return 0 if head is None else int(head)

    async def trimmed_before(self, session_id: str) -> int:
        k = SessionKeys.of(session_id)
        with mapped():
            head, first = await self._client.hmget(k.hdr, ["head", "first"])
        if head is None:
            return 1
        return min(int(first), int(head) + 1)

    async def last_received(self, session_id: str, participant_id: str) -> str | None:
        """Kept by the append script per sender, so it is right on every node at once."""
        k = SessionKeys.of(session_id)
        with mapped():
            got = await self._client.hget(k.rcv, participant_id)
        return None if got is None else text(got)

    async def message_seq(self, session_id: str, message_id: str) -> int | None:
        k = SessionKeys.of(session_id)
        with mapped():
            seq = await self._client.hget(k.ids, message_id)
        return None if seq is None else int(seq)

    async def fork_session(self, source_id: str, header: SessionHeader, at_seq: int) -> bool:
        header = stamped(header)
        src = SessionKeys.of(source_id)
        dst = SessionKeys.of(header.session_id)
        with self._writes_header(header.session_id), mapped():
            if not await self._client.exists(src.hdr) or await self._client.exists(dst.hdr):
                return False
            # the source's prefix is immutable (only trimming touches it): page through it
            copied: list[tuple[int, bytes]] = []
            low = "-"
            while at_seq >= 1:
                rows = await self._client.xrange(src.log, low, f"{at_seq}-0", count=_FORK_CHUNK)
                for entry_id, fields in rows:
                    copied.append((int(text(entry_id).split("-")[0]), fields[b"e"]))
                if len(rows) < _FORK_CHUNK:
                    break
                low = f"({text(rows[-1][0])}"
            head = copied[-1][0] if copied else 0
            first = copied[0][0] if copied else 1
            keys = dst.created()
            chunks = [copied[i : i + _FORK_CHUNK] for i in range(0, len(copied), _FORK_CHUNK)]
            chunks = chunks or [[]]
            for i, chunk in enumerate(chunks):
                args: list[bytes | str | int] = [
                    "1" if i == 0 else "0",
                    "1" if i == len(chunks) - 1 else "0",
                    *header_args(header),
                    head,
                    first,
                ]
                for seq, packed in chunk:
                    args += [seq, entry_dec.decode(packed).message_id, packed]
                if not await self._scripts.fork(keys=keys, args=args):
                    return False
            await self._client.zadd(workspace_index(header.workspace), {header.session_id: 0})
        return True

    # --- participants and deadlines ---------------------------------------------------------

    async def put_participant(self, session_id: str, record: ParticipantRecord) -> None:
        await self._put_record(session_id, record, "")

    async def _put_record(
        self, session_id: str, record: ParticipantRecord, deadline: str, due_ms: int = 0
    ) -> bool:
        """The record (fenced); ``deadline`` "+" / "-": the participant put in / taken out of
        the session's set of those that may have an armed deadline, by the same script, and
        on one Redis (not a Cluster, where it lives in another slot) the deadline itself
        armed at ``due_ms`` / disarmed too. True when the deadline was (no need to)."""
        k = SessionKeys.of(session_id)
        keys = [k.hdr, k.parts, *k.index(), k.dl]
        args: list[Any] = [
            record.participant_id,
            encode(record),
            record.node_id if record.attached else "",
            "1" if record.role == "client" else "0",
            deadline,
        ]
        whole = bool(deadline) and not self.cluster
        then: list[Any] = []
        if whole:
            keys += [DEADLINES, EARLIER_DEADLINES]
            then = [encode((session_id, record.participant_id)), due_ms]
        await self._fenced_write(session_id, self._scripts.put_participant, keys, *args, then=then)
        return whole

    async def get_participant(
        self, session_id: str, participant_id: str
    ) -> ParticipantRecord | None:
        k = SessionKeys.of(session_id)
        with mapped():
            raw = await self._client.hget(k.parts, participant_id)
        return None if raw is None else participant_dec.decode(raw)

    async def list_participants(self, session_id: str) -> list[ParticipantRecord]:
        k = SessionKeys.of(session_id)
        with mapped():
            rows = await self._client.hvals(k.parts)
        return [participant_dec.decode(r) for r in rows]

    async def remove_participant(self, session_id: str, participant_id: str) -> None:
        k = SessionKeys.of(session_id)
        with mapped():
            await self._scripts.remove_participant(
                keys=[k.parts, *k.index()], args=[participant_id]
            )

    async def attach_view(self, session_id: str, participant_id: str = "") -> AttachView:
        """Who is attached on which node, ``participant_id``'s record and the client records,
        in one read whose size does not grow with the session's audience (layout 2; a
        layout-1 session is read whole). Empty for a session that does not exist."""
        read = await self._read_view(session_id, participant_id)
        assert read is not None  # only a mutex taken by another reads nothing
        return read.view

    async def enter_session(
        self,
        session_id: str,
        token: str,
        ttl_ms: int,
        *,
        participant_id: str = "",
        after_seq: int | None = None,
        page_after: int | None = None,
        page_limit: int = 0,
        released: str = "",
    ) -> Entered | None:
        """Take the session's mutex (as :meth:`lock_session`, renewed while held) and, in the
        same round trip, read what its holder needs: the log after ``after_seq`` (None: none),
        :meth:`attach_view`, and at most ``page_limit`` entries after ``page_after`` (None:
        none; an attach's first backlog page). None when another holds the mutex.
        ``released``: a token of ours given to :meth:`unlock_soon` whose release may not
        have landed yet: if it still holds the mutex, ``token`` takes it over."""
        entered = await self._read_view(
            session_id,
            participant_id,
            token=token,
            ttl_ms=ttl_ms,
            after_seq=after_seq,
            page_after=page_after,
            page_limit=page_limit,
            released=released,
        )
        if entered is not None:
            self.coordination.renew_while_held(session_id, token, ttl_ms)
        return entered

    async def _read_view(
        self,
        session_id: str,
        participant_id: str,
        *,
        token: str = "",
        ttl_ms: int = 0,
        after_seq: int | None = None,
        page_after: int | None = None,
        page_limit: int = 0,
        released: str = "",
    ) -> Entered | None:
        k = SessionKeys.of(session_id)
        keys = [k.hdr, k.parts, k.nodes, k.cli, mutex_key(session_id), k.log, k.rcv]
        first = "" if after_seq is None else max(after_seq + 1, 1)
        page_first = "" if page_after is None or page_limit <= 0 else max(page_after + 1, 1)
        with mapped():
            reply = await self._scripts.attach_view(
                keys=keys,
                args=[participant_id, token, ttl_ms, first, page_first, page_limit, released],
            )
        if int(reply[0]) == 0:
            return None
        _taken, log, view, page = reply
        entries = None if after_seq is None else [entry_dec.decode(row[1][1]) for row in log]
        return Entered(
            entries,
            AttachView.decoded(view, participant_id),
            None if page_first == "" else [entry_dec.decode(row[1][1]) for row in page],
        )

    async def set_deadline(self, deadline: Deadline) -> None:
        k = SessionKeys.of(deadline.session_id)
        with mapped():
            # the per-session set first: delete_session finds every deadline it must drop
            await self._client.sadd(k.dl, deadline.participant_id)
        await self._arm(deadline)

    async def _arm(self, deadline: Deadline) -> None:
        """The deadline in the global index (its participant already in the session's set)."""
        member = encode((deadline.session_id, deadline.participant_id))
        with mapped():
            await self._client.zadd(DEADLINES, {member: deadline.due_ms})

    async def clear_deadline(self, session_id: str, participant_id: str) -> None:
        k = SessionKeys.of(session_id)
        await self._disarm(session_id, [participant_id])
        with mapped():
            await self._client.srem(k.dl, participant_id)

    async def _disarm(self, session_id: str, participant_ids: list[str]) -> None:
        """Drop these deadlines of the session from this build's set and the earlier one."""
        members = [encode((session_id, p)) for p in participant_ids]
        with mapped():
            await self._scripts.disarm(keys=[DEADLINES, EARLIER_DEADLINES], args=members)

    async def participant_and_received(
        self, session_id: str, participant_id: str
    ) -> tuple[ParticipantRecord | None, str | None]:
        """Both reads sent together: one round trip's wait (Store.participant_and_received)."""
        record, received = await asyncio.gather(
            self.get_participant(session_id, participant_id),
            self.last_received(session_id, participant_id),
        )
        return record, received

    async def put_attached(self, session_id: str, record: ParticipantRecord) -> None:
        """The record (fenced) and its removal from the session's deadline set in one script,
        then the deadline's removal from the global index: two round trips, in this order, on
        a Redis Cluster; one script on one Redis.

        Not sent together: a record the store refused (a fenced lease, an outage) left the
        deadline disarmed all the same, so the participant — still detached in the store, its
        connection closed 1013 — never expired, and a fenced node cleared the deadline its
        sweeper had armed. The deadline lives in another hash slot (``rawp:{~dl}``), so one
        transaction cannot take both in a Redis Cluster. Stopped between the two, the global
        deadline is left: when due, it finds the participant attached and does nothing.
        """
        if not await self._put_record(session_id, record, "-"):
            await self._disarm(session_id, [record.participant_id])

    async def put_detached(
        self, session_id: str, record: ParticipantRecord, deadline: Deadline
    ) -> None:
        """The record (fenced) and its entry in the session's deadline set in one script, then
        the deadline in the global index: two round trips on a Redis Cluster (the set first,
        so a deletion finds every deadline it must drop; a refused record arms nothing); one
        script on one Redis."""
        if not await self._put_record(session_id, record, "+", deadline.due_ms):
            await self._arm(deadline)

    async def claim_due_deadlines(self, now_ms: int, limit: int = 100) -> list[Deadline]:
        if limit <= 0:
            return []
        memo = CLAIM_MEMO + secrets.token_hex(12)
        with mapped():
            flat = await self._scripts.claim_deadlines(
                keys=[DEADLINES, EARLIER_DEADLINES, memo], args=[now_ms, limit]
            )
        out: list[Deadline] = []
        for member, score in zip(flat[::2], flat[1::2], strict=True):
            session_id, participant_id = member_dec.decode(member)
            out.append(
                Deadline(
                    session_id=session_id,
                    participant_id=participant_id,
                    due_ms=int(float(score)),
                )
            )
        return out

    # --- wakes (notes §17.5; scripts/wakes.lua) ----------------------------------------------

    async def _wakes(self, op: str, *args: Any) -> Any:
        with mapped():
            return await self._scripts.wakes(
                keys=[WAKE_RECORDS, WAKE_DUE, WAKE_PENDING], args=[op, *args]
            )

    async def put_wake(self, record: WakeRecord) -> None:
        await self._wakes("put", _wake_enc.encode(record))

    async def cancel_wake(self, session_id: str, revisit_id: str) -> None:
        await self._wakes("cancel", session_id, revisit_id)

    async def get_wake(self, session_id: str, wake_id: str) -> WakeRecord | None:
        with mapped():
            raw = await self._client.hget(WAKE_RECORDS, f"{session_id}\n{wake_id}")
        return None if raw is None else _wake_dec.decode(raw)

    async def claim_due_wakes(
        self, now_ms: int, lease_ms: int, limit: int = 100
    ) -> list[WakeRecord]:
        token = secrets.token_hex(8)
        got = await self._wakes("claim", now_ms, lease_ms, limit, token)
        return [_wake_dec.decode(raw) for raw in got]

    async def settle_wake(self, record: WakeRecord, claim: str) -> bool:
        return bool(await self._wakes("settle", _wake_enc.encode(record), claim))

    async def wakes_seen(self, session_id: str) -> list[WakeRecord]:
        got = await self._wakes("seen", session_id)
        return [_wake_dec.decode(raw) for raw in got]

    async def list_wakes(
        self, workspace: str, *, due_only: bool, after: tuple[str, str] | None, limit: int
    ) -> list[WakeRecord]:
        index = f"rawp:{{~wk}}:ws:{workspace}"
        low = "-" if after is None else f"({after[0]}\n{after[1]}"
        states = ("due",) if due_only else ("pending", "due")
        out: list[WakeRecord] = []
        while len(out) < limit:
            with mapped():
                members = await self._client.zrangebylex(index, low, "+", start=0, num=256)
                if not members:
                    break
                raws = await self._client.hmget(WAKE_RECORDS, members)
            for raw in raws:
                if raw is None:
                    continue
                record = _wake_dec.decode(raw)
                if record.state in states:
                    out.append(record)
                    if len(out) == limit:
                        break
            low = "(" + text(members[-1])
        return out

    async def release_wake_claims(self) -> None:
        await self._wakes("release")

    # --- credentials ------------------------------------------------------------------------

    async def put_credential(self, credential: Credential) -> None:
        try:
            with mapped():
                await self._client.set(credential_key(credential.digest), encode(credential))
                if credential.kind == "key":
                    await self._client.sadd(KEYS_INDEX, credential.digest)
        finally:
            self._credential_reads.forget(credential.digest)  # read anew from now on

    async def list_keys(self) -> list[Credential]:
        with mapped():
            digests = sorted(d.decode() for d in await self._client.smembers(KEYS_INDEX))
            out: list[Credential] = []
            for digest in digests:
                raw = await self._client.get(credential_key(digest))
                if raw is None:
                    continue
                record = credential_dec.decode(raw)
                used = await self._client.get(credential_used_key(digest))
                if used is not None:
                    record.last_used_ms = int(used)
                out.append(record)
        return out

    async def touch_credential(self, digest: str, at_ms: int) -> None:
        with mapped():
            await self._client.set(credential_used_key(digest), at_ms)

    async def get_credential(self, digest: str) -> Credential | None:
        """The record; a read of it already on its way is shared (see :mod:`.sharing`): a
        storm of hellos with one credential reads it once per round trip."""

        async def fetch() -> bytes | None:
            with mapped():
                raw: bytes | None = await self._client.get(credential_key(digest))
            return raw

        raw = await self._credential_reads.read(digest, fetch)
        return None if raw is None else credential_dec.decode(raw)

    # --- nodes and session mutexes (multi-node coordination: relay/cluster/) ------------

    async def node_heartbeat(self, node_id: str, *, new_epoch: bool = False) -> bool:
        """Record that ``node_id`` is alive; False when it had been claimed as dead.

        Sets :attr:`lease_epoch` when ``node_id`` is this store's node: a node that was not
        registered (or asks with ``new_epoch``) gets a new one.
        """
        registered, epoch = await self.coordination.node_heartbeat(node_id, new_epoch=new_epoch)
        if node_id == self.node_id:
            return self.lease.heard(registered=registered, epoch=epoch, new_epoch=new_epoch)
        return registered

    def write_epoch(self) -> int:
        """The lease epoch this task's writes carry: the pinned one, else the current one."""
        return self.lease.write_epoch()

    def pinned_epoch(self, epoch: int) -> contextlib.AbstractContextManager[None]:
        """Within the block, this task's appends and renames carry ``epoch`` (not whatever
        lease the node holds by the time they are made): a REST request writes under the
        lease it arrived under, and is refused if that lease was fenced meanwhile."""
        return self.lease.pinned(epoch)

    async def hold_write(self, session_id: str, epoch: int) -> bool:
        """Record a write of this node to ``session_id`` outside a connection (REST), so a
        sweep that claims this node fences the session too. False (nothing recorded) when
        the node is no longer live under ``epoch``: claimed by a sweeper, or re-registered."""
        return await self.lease.hold_write(session_id, epoch)

    async def write_done(self, session_id: str) -> None:
        """The REST write :meth:`hold_write` recorded has ended."""
        await self.lease.write_done(session_id)

    async def node_epoch(self, node_id: str) -> int:
        """``node_id``'s current lease epoch (0: it never registered)."""
        return await self.coordination.node_epoch(node_id)

    async def node_ages(self) -> dict[str, int]:
        """Every known node → ms since its last heartbeat (-1: claimed or never seen)."""
        return await self.coordination.node_ages()

    async def claim_node(
        self, node_id: str, *, dead_after_ms: int, lease_ms: int, token: str, force: bool = False
    ) -> int | None:
        """Become the one sweeper of ``node_id`` if it is dead (or ``force``); atomic. Its
        lease epoch at the claim (to fence), or None when not claimed."""
        return await self.coordination.claim_node(
            node_id, dead_after_ms=dead_after_ms, lease_ms=lease_ms, token=token, force=force
        )

    async def node_swept(self, node_id: str, token: str) -> bool:
        """The sweep of ``node_id`` ended; forget the node when nothing is left of it."""
        return await self.coordination.node_swept(node_id, token)

    async def retire_node(self, node_id: str) -> None:
        """Mark ``node_id`` dead now (a clean shutdown): the next sweep takes its sessions."""
        await self.coordination.retire_node(node_id)

    async def fence_node(self, session_id: str, node_id: str, epoch: int) -> bool:
        """Refuse from now on ``node_id``'s appends to the session under leases up to
        ``epoch`` (the node was declared dead). False when there is no such session."""
        return await self.coordination.fence_node(session_id, node_id, epoch)

    async def hold_session(self, node_id: str, session_id: str) -> None:
        """Record that ``node_id`` holds connections of ``session_id``."""
        await self.coordination.hold_session(node_id, session_id)

    async def release_session(self, node_id: str, session_id: str) -> None:
        """``node_id`` holds no connection of ``session_id`` any more."""
        await self.coordination.release_session(node_id, session_id)

    async def held_sessions(self, node_id: str) -> list[str]:
        """The sessions ``node_id`` holds (or held when it died) connections for, or has a
        REST write in progress to (:meth:`hold_write`)."""
        return await self.coordination.held_sessions(node_id)

    async def lock_session(self, session_id: str, token: str, ttl_ms: int) -> bool:
        """Try to take the session's cross-node mutex; False when held. Renewed while held
        (see :meth:`Coordination.lock_session`): it expires ``ttl_ms`` after its holder
        stops renewing, never while the holder works."""
        return await self.coordination.lock_session(session_id, token, ttl_ms)

    async def extend_session_lock(self, session_id: str, token: str, ttl_ms: int) -> bool:
        """Renew the mutex to ``ttl_ms`` if ``token`` holds it; False when it does not."""
        return await self.coordination.extend_session_lock(session_id, token, ttl_ms)

    async def unlock_session(self, session_id: str, token: str) -> None:
        """Stop renewing the session's mutex and release it if ``token`` still holds it."""
        await self.coordination.unlock_session(session_id, token)

    def unlock_soon(self, session_id: str, token: str) -> Awaitable[None]:
        """Stop renewing the session's mutex now; the returned awaitable releases it if
        ``token`` still holds it (sent in the background by a holder that does not wait:
        its next :meth:`enter_session` may take the mutex over from ``token`` meanwhile)."""
        return self.coordination.release_soon(session_id, token)

    # --- pub/sub ----------------------------------------------------------------------------

    async def publish(self, session_id: str, entries: Sequence[LogEntry]) -> None:
        """Publish ``entries`` on the session's channel as this node (control messages):
        subscribers get one :class:`Published` batch; ``seq`` 0 is never a log entry's."""
        await self.pubsub.publish(session_id, entries)

    async def subscribe(self, *session_ids: str, own: bool = True) -> Subscription:
        """Receive every batch appended to these sessions from now on (any node's appends).

        Returns once Redis confirmed the subscriptions, so an append that starts after this
        returns is delivered. Use as ``async with await store.subscribe(s) as sub: async for
        batch in sub: ...``. See :class:`Subscription` for outages. ``own=False`` leaves out
        the batches this node published, undecoded (a node delivers its own appends itself).
        """
        if self._closed:
            raise StoreUnavailableError("the redis store is closed")
        return await self.pubsub.subscribe(*session_ids, own=own)

    def channel(self, session_id: str) -> str:
        """The session's pub/sub channel."""
        return channel(session_id)
