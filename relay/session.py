"""One session on this node: validate → append → fold → fan out, attach, detach, terminate.

Everything that changes a session runs under its lock (``Session.lock``), so the log, the
folded state and the set of attached participants always move together: attach reads the
backlog and joins live delivery with no append in between, and delete and attach of the
same session are serialized (seed 001's race, notes §9).

Frames from participants go through an inbox drained by one worker task per session. The
worker takes the queued frames (up to 512), checks and folds each against the state machine,
and appends the accepted ones in one store call (group commit). While one batch's append is
in flight the worker already folds the next one and chains its append behind it, so the
store writes one batch while the master validates or delivers another (a pipeline of
:data:`_DEPTH` batches; delivery stays in log order). A batch the store refuses is answered
``store_unavailable``, so is every batch chained behind it, and the state is rebuilt from the
log, so nothing unlogged survives.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

import msgspec
import structlog

from protocol import acts, codec
from protocol.buffers import BoundedBuffer
from protocol.errors import (
    ClientAttached,
    CloseCode,
    Forbidden,
    FormatVersionError,
    InvalidFrame,
    NotAllowed,
    ProtocolError,
    SessionMissing,
    StoreError,
    StoreUnavailable,
    StoreUnavailableError,
)
from protocol.finalize import finalize, fold, make_final, plan_history, replay
from protocol.frames import (
    Ack,
    AckPayload,
    BufferGrant,
    Deleted,
    DeletedPayload,
    Frame,
    GenericFrame,
    Hello,
    History,
    HistoryPayload,
    Presence,
    PresenceChange,
    PresencePayload,
    Received,
    Renamed,
    Sender,
    SessionError,
    SessionErrorPayload,
    SessionInfo,
    ToolResult,
    ToolResultPayload,
    TurnEnd,
    TurnEndPayload,
    Welcome,
    WelcomePayload,
)
from protocol.state import SenderRole, SessionState, check, status

from .archive import end_session_in_store
from .fanout import SLOW_CONSUMER, Outbox, Sink
from .faults import refusal
from .store.base import AppendResult, LogEntry, NewEntry, ParticipantRecord, SessionHeader

if TYPE_CHECKING:
    from .auth import Principal
    from .hub import Hub

__all__ = ["Participant", "Session", "rebuild_state"]

log = structlog.get_logger("rawp.session")

_BATCH: Final = 512
# Batches whose append is in flight at once (see _pipeline). The store merges those queued
# behind the one being written into one call, so a deeper pipeline means fewer, larger
# Redis calls under load: 4 carried ~6 % more than 2 (make bench ARGS=throughput).
_DEPTH: Final = 4
_BATCHES_PER_HOLD: Final = 16  # then the lock is released, so attaches are not starved
_FIRST: Final = asyncio.FIRST_COMPLETED
_MAX_FLUSH_WAIT: Final = 0.02  # seconds: the most a delivery waits for the session's flush
# Presence (docs/protocol.md "Presence"): with this many local participants or more, the
# presence changes of one delivery step go out as one coalesced frame; below it, one frame
# per change at once (the audience is small: coalescing would only delay it).
_COALESCE_AUDIENCE: Final = 8
_MIN_PRESENCE_WAIT: Final = 0.0  # seconds: the least ... (one loop step)
_MAX_PRESENCE_WAIT: Final = 0.05  # ... and the most a presence change waits to coalesce
_RECENT_IDS: Final = 65536
_BACKLOG_PAGE: Final = 256  # log entries read at once while a backlog is built
_SUPERSEDED: Final = CloseCode.SUPERSEDED
_NORMAL: Final = 1000


def _now_ms() -> int:
    return int(time.time() * 1000)


def rebuild_state(entries: Sequence[LogEntry], name: str = "") -> SessionState:
    """Fold a log from seq 1 into a fresh state (load, and after a refused batch)."""
    state = replay(list(_decoded(entries)))
    state.name = state.name or name  # the header's name when the log holds no rename
    return state


def _decoded(entries: Sequence[LogEntry]) -> Iterator[tuple[Frame | GenericFrame, SenderRole]]:
    for entry in entries:
        try:
            yield codec.decode(entry.data), entry.sender_role  # type: ignore[misc]
        except ProtocolError:
            continue  # what the master logged was checked; tolerate entries of older builds


class Participant:
    """One attached connection of a participant (a client or an edge)."""

    def __init__(
        self,
        session: Session,
        record: ParticipantRecord,
        sink: Sink,
        principal: Principal,
        *,
        send_queue_bytes: int,
    ) -> None:
        self.session = session
        self.record = record
        self.sink = sink
        self.principal = principal
        self.generation = record.generation
        self.fenced = False
        self.sender = Sender(role=record.role, participant_id=record.participant_id)
        self.outbox = Outbox(
            sink,
            limit_bytes=send_queue_bytes,
            on_sent=self._sent,
            on_overflow=self._overflow,
        )
        self.acked: int | None = None
        # The oldest of its frames the store refused and it has not sent again: until it does,
        # its later frames are refused too, so what it re-sends is logged in order (notes §12).
        self.refused_from: str | None = None

    @property
    def id(self) -> str:
        """The participant id."""
        return self.record.participant_id

    @property
    def role(self) -> Literal["client", "edge"]:
        """client or edge."""
        return self.record.role

    def _sent(self, seq: int) -> None:
        if seq > self.record.cursor and self.acked is None:
            self.record.cursor = seq

    def ack(self, last_seq: int) -> None:
        """connection.ack: from now on the cursor follows what the participant confirmed."""
        self.acked = max(self.acked or 0, min(last_seq, self.session.head))
        self.record.cursor = self.acked

    def _overflow(self) -> None:
        log.warning("slow_consumer", participant_id=self.id, session_id=self.session.id)
        self.session.hub.metrics.slow_consumers.inc()
        asyncio.get_running_loop().create_task(
            self.sink.close(SLOW_CONSUMER, "slow_consumer: send queue over its bound")
        )

    def send_error(
        self,
        error: ProtocolError,
        *,
        lost_frame_count: int | None = None,
        ref_message_id: str | None = None,
    ) -> None:
        """Send a non-logged ``session.error`` to this participant only.

        ``ref_message_id`` names the frame the error refuses (notes §16.3); a warning about
        a frame that was accepted (``usage_missing``) carries none.
        """
        self.session.hub.metrics.errors.labels(error.code).inc()
        frame = SessionError(
            message_id=codec.new_message_id(),
            session_id=self.session.id,
            timestamp=codec.now(),
            sender=self.session.hub.master_sender,
            payload=SessionErrorPayload(
                error_code=error.code,
                message=error.message,
                fatal=error.fatal,
                lost_frame_count=lost_frame_count,
                ref_message_id=ref_message_id,
            ),
        )
        self.outbox.put(codec.encode(frame))

    def send_ack(self, entry: LogEntry) -> None:
        """``connection.ack`` (notes §16.3): ``entry`` is our latest committed frame."""
        if self.fenced:
            return
        frame = Ack(
            message_id=codec.new_message_id(),
            session_id=self.session.id,
            timestamp=codec.now(),
            sender=self.session.hub.master_sender,
            payload=AckPayload(last_seq=entry.seq, last_message_id=entry.message_id),
        )
        self.outbox.post(codec.encode(frame))


@dataclass(slots=True)
class _Pending:
    """A frame folded into the state and waiting for its batch to be appended."""

    participant: Participant | None
    frame: Frame | GenericFrame
    entry: NewEntry


@dataclass(slots=True)
class _InFlight:
    """A folded batch whose append was started and whose delivery waits for it."""

    pending: list[_Pending]
    appended: asyncio.Future[list[AppendResult]]
    started: float


class Session:
    """The coordinator of one session on this node."""

    def __init__(self, hub: Hub, header: SessionHeader, state: SessionState, head: int) -> None:
        self.hub = hub
        self.id = header.session_id
        self.header = header
        self.state = state
        self.head = head
        self.lock: contextlib.AbstractAsyncContextManager[Any] = hub.new_session_lock()
        self.participants: dict[str, Participant] = {}
        self.client_id: str | None = None
        self.terminated = False
        self.ended = asyncio.Event()  # set once a termination is over (store and registry)
        self.listeners: set[Callable[[LogEntry], None]] = set()
        self._inbox: deque[tuple[Participant, Frame | GenericFrame, bytes]] = deque()
        self._wake = asyncio.Event()
        self._space = asyncio.Event()
        self._space.set()
        self._recent: OrderedDict[str, None] = OrderedDict()
        # Batches folded into ``state`` whose appends are still in flight, oldest first, and
        # their message ids. Both are empty whenever the lock is free.
        self._inflight: deque[_InFlight] = deque()
        self._unsettled_ids: set[str] = set()
        self._refold = False  # a settled batch asked for a refold once the pipeline is empty
        self._arrival: asyncio.Future[None] | None = None  # the pipeline waits for frames
        self._flush_scheduled = False
        self._flush_cost = 0.0  # seconds the last flush took ...
        self._flush_end = 0.0  # ... and when it ended (perf_counter)
        self._worker: asyncio.Task[None] | None = None
        self._delivered = 0  # deliveries not yet added to the frames_out metric
        # notes §16.3: each sender's latest entry committed since the last flush
        self._acks_due: dict[Participant, LogEntry] = {}
        # Presence changes not yet logged (coalesced, docs/protocol.md "Presence"), and the
        # task that logs them; the cost of the last coalesced frame paces the next one.
        self._presence_due: list[PresenceChange] = []
        self._presence_task: asyncio.Task[None] | None = None
        self._presence_cost = 0.0

    @property
    def worker(self) -> asyncio.Task[None] | None:
        """The task draining the inbox, once a frame has arrived."""
        return self._worker

    # --- intake --------------------------------------------------------------------------

    async def submit(
        self, participant: Participant, frame: Frame | GenericFrame, raw: bytes
    ) -> None:
        """Queue a participant's frame for the worker; waits only when the inbox is full."""
        if self.terminated or participant.fenced:
            return
        self._inbox.append((participant, frame, raw))
        self._wake.set()
        arrival = self._arrival
        if arrival is not None and not arrival.done():
            arrival.set_result(None)
        if self._worker is None:
            # A context of its own: the worker serves every connection of the session, so it
            # must not log with the first submitter's conn / role / participant_id bound.
            self._worker = asyncio.get_running_loop().create_task(
                self._work(), context=contextvars.Context()
            )
        if len(self._inbox) >= self.hub.settings.inbox_frames:
            self._space.clear()
            await self._space.wait()

    async def submit_now(
        self, participant: Participant, frame: Frame | GenericFrame, raw: bytes
    ) -> None:
        """Commit one frame now on the inbox's own path (dedupe, state machine, log, fan-out).

        [http-api] For senders without a socket (``POST /v1/sessions/{id}/events``): the
        caller awaits the commit; refusals reach ``participant.send_error``.
        """
        async with self.lock:
            await self._commit_now([(participant, frame, raw)])

    async def _commit_now(
        self, batch: list[tuple[Participant, Frame | GenericFrame, bytes]]
    ) -> None:
        """Commit ``batch`` and wait until it is appended and delivered (caller holds the lock)."""
        try:
            await self._commit(batch)
        finally:
            await self._settle_all()

    async def _work(self) -> None:
        structlog.contextvars.bind_contextvars(session_id=self.id)
        while not self.terminated:
            await self._wake.wait()
            self._wake.clear()
            while self._inbox and not self.terminated:
                try:
                    async with self.lock:
                        await self._pipeline()
                except Exception:
                    log.exception("commit_failed", session_id=self.id)

    async def _pipeline(self) -> None:
        """Fold and append batches with up to _DEPTH appends in flight (caller holds the lock).

        While batch N's append is in flight, batch N+1 is folded and its append chained behind
        N's; N is delivered once its append returns, while N+1's is being written. Everything in
        flight is settled before the lock is released.
        """
        started = 0
        try:
            while not self.terminated:
                if self._inbox and len(self._inflight) < _DEPTH and started < _BATCHES_PER_HOLD:
                    # popped under the lock: a detach holding it takes its own frames first
                    n = min(_BATCH, len(self._inbox))
                    batch = [self._inbox.popleft() for _ in range(n)]
                    self._space.set()
                    self.hub.metrics.frames_in.inc(n)
                    started += 1
                    await self._commit(batch)
                elif self._inflight:
                    head = self._inflight[0].appended
                    if (
                        not head.done()
                        and len(self._inflight) < _DEPTH
                        and started < _BATCHES_PER_HOLD
                    ):
                        # fold what arrives meanwhile rather than wait idle for the store
                        arrival: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                        self._arrival = arrival
                        try:
                            await asyncio.wait([head, arrival], return_when=_FIRST)
                        finally:
                            self._arrival = None
                        continue
                    await self._settle_one()
                    # let the store send the next chained batch before more CPU-bound work
                    await asyncio.sleep(0)
                else:
                    return
        finally:
            await self._settle_all()

    async def _commit(self, batch: list[tuple[Participant, Frame | GenericFrame, bytes]]) -> None:
        """Judge and fold ``batch``, then start its append (settled by the caller)."""
        if self._inflight and self.hub.cluster.needs_sync(self):
            await self._settle_all()  # [multinode] a refold must not race our own appends
        if not await self.hub.cluster.ready(self, batch):
            return  # [multinode] the state may hold unlogged frames: refused, store_unavailable
        pending: list[_Pending] = []
        folded = self._unsettled_ids  # message ids folded but not yet in _recent
        for participant, frame, raw in batch:
            if self.terminated:
                return
            if participant.refused_from == frame.message_id:
                participant.refused_from = None  # sent again (maybe logged after all)
            if participant.fenced or frame.message_id in self._recent or frame.message_id in folded:
                continue  # fenced generation, or a duplicate: logged once (notes §7)
            if participant.refused_from is not None and not self._resends(participant, frame):
                continue
            if isinstance(frame, History):
                await self._flush(pending)
                pending = []
                await self._accept_history(participant, frame)
                continue
            # [trust] the act table: may this credential do what the frame does (§16.6)?
            act = acts.act_of(
                frame.type, fatal=isinstance(frame, SessionError) and frame.payload.fatal
            )
            try:
                if act is not None:
                    acts.require(act, participant.role, participant.principal)
            except NotAllowed as exc:
                # non-fatal, not logged, nothing ends
                participant.send_error(exc, ref_message_id=frame.message_id)
                continue
            head, tail = codec.stamp_parts(raw, frame, participant.sender)
            if not self._fits(participant, frame, len(head) + len(tail)):
                continue
            try:
                # A delete request is checked, not folded: it is not logged, and folding it
                # would close the open calls and turn before the cleanup frames are made.
                judge = check if isinstance(frame, Deleted) else fold
                warnings = judge(self.state, frame, participant.role)
            except ProtocolError as exc:
                if not await self._logged(frame.message_id):
                    participant.send_error(exc, ref_message_id=frame.message_id)
                continue
            for warning in warnings:
                participant.send_error(warning)
            if isinstance(frame, Deleted):
                # A delete request is not relayed; the master's own session.deleted is (§15.8).
                await self._flush(pending)
                await self._terminate("user_request", participant.role)
                return
            entry = NewEntry(
                message_id=frame.message_id,
                type=frame.type,
                head=head,
                tail=tail,
                sender_id=participant.id,
                sender_role=participant.role,
                # A rename goes back to the edge that asked, too (notes §15.9).
                exclude=None if isinstance(frame, Renamed) else participant.id,
            )
            pending.append(_Pending(participant, frame, entry))
            folded.add(frame.message_id)
            if isinstance(frame, SessionError) and frame.payload.fatal:
                await self._flush(pending)
                await self._terminate("error", participant.role)
                return
        self._launch(pending)

    def _fits(self, participant: Participant, frame: Frame | GenericFrame, stamped: int) -> bool:
        """Will the frame, as delivered (seq and sender added), fit the welcome's
        ``max_frame_bytes``? If not it is refused ``invalid_frame``, not logged (docs §2)."""
        limit = self.hub.settings.max_frame_bytes
        size = stamped + len(str(self.head * 10 + 10))  # room for the seq it will get
        if size <= limit:
            return True
        participant.send_error(
            InvalidFrame(
                f"frame {frame.message_id} would be {size} bytes as delivered (seq and sender "
                f"added); max_frame_bytes is {limit}"
            )
        )
        return False

    def _resends(self, participant: Participant, frame: Frame | GenericFrame) -> bool:
        """Has a participant whose frame the store refused now sent it again? If not, this
        later frame is refused too: a re-send is logged in its production order (notes §12)."""
        if isinstance(frame, History):
            participant.refused_from = None
            return True
        participant.send_error(
            StoreUnavailable(
                f"frame {frame.message_id} was not stored: frame {participant.refused_from} "
                "before it was refused; send again from there"
            ),
            ref_message_id=frame.message_id,  # notes §16.3: a refusal names its frame
        )
        return False

    async def _logged(self, message_id: str) -> bool:
        """Is the frame in the log already (a re-sent frame whose reply the store lost, or a
        session loaded since)? Then the state refused it for being there: a duplicate."""
        try:
            return await self.hub.store.message_seq(self.id, message_id) is not None
        except StoreError:
            return False

    async def _flush(self, pending: list[_Pending]) -> bool:
        """Append folded frames behind those in flight and deliver all. False if refused."""
        self._launch(pending)
        return await self._settle_all()

    def _launch(self, pending: list[_Pending]) -> None:
        """Start appending ``pending`` in one store call, behind the batch in flight."""
        if not pending:
            return
        before = self._inflight[-1].appended if self._inflight else None
        appended = self.hub.store.append_nowait(self.id, [p.entry for p in pending], after=before)
        self._inflight.append(_InFlight(pending, appended, time.perf_counter()))

    async def _settle_all(self) -> bool:
        """Deliver every batch in flight, in order. False if any was refused."""
        ok = True
        while self._inflight:
            ok = await self._settle_one() and ok
        return ok

    async def _settle_one(self) -> bool:
        """Wait for the oldest append in flight, then deliver its batch. False if refused."""
        item = self._inflight[0]
        try:
            results = await asyncio.shield(item.appended)
        except StoreError as exc:  # any store failure (SessionMissing too): answered, never fatal
            self._inflight.popleft()
            self.hub.metrics.store_errors.inc()
            self._refuse(item.pending, exc)
            # every later batch was folded on top of this one: the store refuses it too
            while self._inflight:
                later = self._inflight.popleft()
                with contextlib.suppress(Exception):
                    await asyncio.shield(later.appended)
                self._refuse(later.pending, exc)
            self._unsettled_ids.clear()
            self._refold = False
            await self._rebuild()
            return False
        self._inflight.popleft()
        self.hub.metrics.store_latency.observe(time.perf_counter() - item.started)
        pending = item.pending
        for p in pending:
            self._unsettled_ids.discard(p.entry.message_id)
        # [multinode] another node appended first: its entries go out before ours, then refold
        rebuild = await self.hub.cluster.before_delivery(self, results)
        for p, result in zip(pending, results, strict=True):
            if result.duplicate:
                rebuild = True  # folded speculatively but already in the log
                continue
            self._committed(p.entry.committed(result.seq), p.participant)
            if isinstance(p.frame, Renamed):
                self.header.name = p.frame.payload.name
                await self.hub.store.rename_session(self.id, p.frame.payload.name)
        if self._delivered:
            self.hub.metrics.frames_out.inc(self._delivered)
            self._delivered = 0
        # A refold reads the log: only once nothing folded is still on its way into it.
        self._refold = self._refold or rebuild
        if self._refold and not self._inflight:
            self._refold = False
            await self._rebuild()
        return True

    def _refuse(self, pending: list[_Pending], cause: BaseException) -> None:
        for p in pending:
            if p.participant is not None:
                if p.participant.refused_from is None and _retryable(cause):
                    p.participant.refused_from = p.frame.message_id
                p.participant.send_error(
                    refusal(cause, p.frame.message_id), ref_message_id=p.frame.message_id
                )

    def _committed(self, entry: LogEntry, sender: Participant | None) -> None:
        self.head = max(self.head, entry.seq)
        self._remember(entry.message_id)
        if sender is not None:
            sender.record.last_received_message_id = entry.message_id
            # notes §16.3: one ack per sender per delivery step, sent with the step's flush
            self._acks_due[sender] = entry
            self._schedule_flush()
        self.deliver(entry)

    def deliver(self, entry: LogEntry) -> None:
        """Fan one committed entry out to this node's participants and listeners.

        The hot path: the same bytes to every recipient's outbox (notes §15.4 audience rules
        inlined from :meth:`LogEntry.delivered_to`); metrics are counted once per batch.
        """
        data, seq, exclude, edges_only = entry.data, entry.seq, entry.exclude, entry.edges_only
        sent = 0
        for participant_id, q in self.participants.items():
            if participant_id == exclude or (edges_only and q.role != "edge"):
                continue
            q.outbox.post(data, seq)
            sent += 1
        self._delivered += sent
        if sent:
            self._schedule_flush()
        if not self.listeners:  # nothing listens (no SSE watcher, no other node): no copy
            return
        for listener in tuple(self.listeners):
            listener(entry)

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            # One flush per session per loop step: every entry delivered in this step goes
            # out in one socket write per recipient, with no writer wake-up when it can.
            # A flush waits as long as the previous one took, so a session with a great
            # many recipients spends at most about half the loop on its writes and what it
            # delivers meanwhile coalesces (a few recipients: microseconds, no delay).
            self._flush_scheduled = True
            loop = asyncio.get_running_loop()
            wait = self._flush_cost - (time.perf_counter() - self._flush_end)
            if wait > 0:
                loop.call_later(wait, self._flush_outboxes)
            else:
                loop.call_soon(self._flush_outboxes)

    def _post_acks(self) -> None:
        """Queue each sender's ``connection.ack`` for what this step committed of theirs."""
        acks, self._acks_due = self._acks_due, {}
        for participant, entry in acks.items():
            participant.send_ack(entry)

    def _flush_outboxes(self) -> None:
        self._flush_scheduled = False
        started = time.perf_counter()  # not loop.time(): uvloop caches it per iteration
        for q in self.participants.values():
            q.outbox.flush()
        if self._acks_due:
            # After the recipients' writes: an ack never delays the frames it acknowledges.
            acked = list(self._acks_due)
            self._post_acks()
            for q in acked:
                q.outbox.flush()
        self._flush_end = time.perf_counter()
        self._flush_cost = min(self._flush_end - started, _MAX_FLUSH_WAIT)

    def _remember(self, message_id: str) -> None:
        self._recent[message_id] = None
        if len(self._recent) > _RECENT_IDS:
            self._recent.popitem(last=False)

    async def _rebuild(self) -> None:
        """Refold the state from the log (after a refused or partly duplicate batch)."""
        try:
            entries = await self.hub.store.read(self.id)
        except StoreUnavailableError:
            self.hub.schedule_reload(self)
            return
        # Entries past our head (another node's, or ours whose reply was lost) were never
        # delivered here: deliver them, in seq order, rather than skip past them.
        for entry in entries:
            if entry.seq > self.head:
                self._committed(entry, None)
        self.state = rebuild_state(entries, self.header.name)

    # --- master-made frames --------------------------------------------------------------

    async def append_master(
        self,
        frames: Sequence[Frame],
        *,
        exclude: str | None = None,
        edges_only: bool = False,
    ) -> bool:
        """Fold, log and deliver frames the master makes (notes §15.2). False if not logged."""
        sender = self.hub.master_sender
        pending: list[_Pending] = []
        for frame in frames:
            bare = msgspec.structs.replace(frame, sender=None)
            fold(self.state, bare, "master")
            head, tail = codec.stamp_parts(codec.encode(bare), bare, sender)
            entry = NewEntry(
                message_id=frame.message_id,
                type=frame.type,
                head=head,
                tail=tail,
                sender_id=sender.participant_id,
                sender_role="master",
                exclude=exclude,
                edges_only=edges_only,
            )
            pending.append(_Pending(None, bare, entry))
        return await self._flush(pending)

    def _envelope(self) -> dict[str, Any]:
        return {
            "message_id": codec.new_message_id(),
            "session_id": self.id,
            "timestamp": codec.now(),
        }

    async def log_presence(self, changes: list[PresenceChange]) -> bool:
        """Log ``changes`` now as one frame (caller holds the lock); False if not logged."""
        if not changes:
            return True
        exclude = changes[0].participant_id if len(changes) == 1 else None
        return await self.append_master([self._presence(changes)], exclude=exclude)

    def _presence(self, changes: list[PresenceChange]) -> Presence:
        first = changes[0]
        return Presence(
            payload=PresencePayload(
                participant_id=first.participant_id,
                role=first.role,
                state=first.state,
                changes=changes if len(changes) > 1 else None,
            ),
            **self._envelope(),
        )

    async def _announce(self, record: ParticipantRecord, state: str) -> None:
        """A presence change (caller holds the lock): logged now, or coalesced (big audience).

        One change is not sent to the participant it is about (notes §15.4); a coalesced
        frame goes to every attached participant, who reads its own change as a no-op.
        """
        self._presence_due.append(presence_change(record, state))
        if len(self.participants) < _COALESCE_AUDIENCE and self._presence_task is None:
            await self._log_presence()
        elif self._presence_task is None:
            self._presence_task = asyncio.get_running_loop().create_task(self._coalesce())

    async def _log_presence(self) -> None:
        """Log the presence changes due, in order, as one frame (caller holds the lock)."""
        due, self._presence_due = self._presence_due, []
        if due and not self.terminated:
            await self.log_presence(due)

    async def _coalesce(self) -> None:
        """Wait one delivery step (paced by the last one's cost), then log what is due."""
        try:
            wait = max(_MIN_PRESENCE_WAIT, min(self._presence_cost * 2, _MAX_PRESENCE_WAIT))
            await asyncio.sleep(wait)
            async with self.lock, self.hub.cluster.guard(self):
                self._presence_task = None
                started = time.perf_counter()
                await self._log_presence()
                self._presence_cost = time.perf_counter() - started
        except StoreUnavailableError:
            self.hub.schedule_reload(self)
        except Exception:
            log.exception("presence_failed", session_id=self.id)
        finally:
            if self._presence_task is asyncio.current_task():
                self._presence_task = None

    # --- history from the client (§7.1.1, §7.8.3, notes §15.1, §15.10) -------------------

    async def _accept_history(self, participant: Participant, frame: History) -> None:
        frames: list[Frame | GenericFrame] = []
        raw_of: dict[int, bytes] = {}  # the history's own bytes travel untouched
        for raw in frame.payload.frames:
            try:
                inner = codec.decode(raw)
            except ProtocolError as exc:
                participant.send_error(exc)
                continue
            if inner.session_id != self.id:
                participant.send_error(
                    ProtocolError(f"history frame {inner.message_id} names another session"),
                    ref_message_id=inner.message_id,
                )
                continue
            try:
                logged = inner.message_id in self._recent or await self.hub.store.message_seq(
                    self.id, inner.message_id
                )
            except StoreError as exc:
                # Refused like a failed append: answered, and later frames refused until it
                # is sent again (never judged against a state the history would have changed).
                self.hub.metrics.store_errors.inc()
                if participant.refused_from is None and _retryable(exc):
                    participant.refused_from = frame.message_id
                participant.send_error(
                    refusal(exc, frame.message_id), ref_message_id=frame.message_id
                )
                return
            if logged:
                continue  # already logged live: logged once (notes §7)
            # [trust] a history's frames are acts like live ones: what the credential may
            # not do is neither logged nor relayed (every view would fold it, §16.6).
            act = acts.act_of(
                inner.type, fatal=isinstance(inner, SessionError) and inner.payload.fatal
            )
            try:
                if act is not None:
                    acts.require(act, participant.role, participant.principal)
            except NotAllowed as exc:
                participant.send_error(
                    NotAllowed(f"history frame {inner.message_id} refused: {exc.message}")
                )
                continue
            frames.append(inner)
            raw_of[id(inner)] = bytes(raw)
        try:
            plan = plan_history(self.state, frames, frame.payload.buffer_status, participant.role)
        except ProtocolError as exc:
            participant.send_error(exc, ref_message_id=frame.message_id)
            return
        for refused, error in plan.refused:
            participant.send_error(
                type(error)(f"history frame {refused.message_id} refused: {error.message}"),
                ref_message_id=refused.message_id,
            )
        kept = [raw_of[id(f)] for f in plan.accepted]
        entry_frame = History(
            message_id=frame.message_id,
            session_id=self.id,
            timestamp=frame.timestamp,
            metadata=frame.metadata,
            payload=HistoryPayload(
                frames=[msgspec.Raw(b) for b in kept],
                buffer_status=frame.payload.buffer_status,
                last_sync_timestamp=frame.payload.last_sync_timestamp,
                last_message_id=frame.payload.last_message_id,
            ),
        )
        previous = self.state
        self.state = plan.state
        encoded = codec.encode(entry_frame)
        head, tail = codec.stamp_parts(encoded, entry_frame, participant.sender)
        entry = NewEntry(
            message_id=frame.message_id,
            type="session.history",
            head=head,
            tail=tail,
            sender_id=participant.id,
            sender_role=participant.role,
            exclude=participant.id,
            # welcome.received reports the history's last frame (notes §4); none kept: unchanged
            received_id=plan.accepted[-1].message_id if plan.accepted else "",
        )
        if not await self._flush([_Pending(participant, entry_frame, entry)]):
            self.state = previous
            return
        for inner in plan.accepted:
            self._remember(inner.message_id)  # logged inside the history: logged once (§7)
        if plan.accepted:
            participant.record.last_received_message_id = plan.accepted[-1].message_id
        status_ = frame.payload.buffer_status
        if status_.truncated:
            # §7.1.1 MUST: tell the users the data is incomplete.
            self.hub.metrics.truncations.inc()
            lost = status_.lost_frame_count
            notice = SessionError(
                payload=SessionErrorPayload(
                    error_code="history_truncated",
                    message=(
                        "the client's history was truncated: "
                        + (f"{lost} frames were lost" if lost is not None else "frames were lost")
                        + f" ({status_.policy_applied} buffer); this session's data is incomplete"
                    ),
                    fatal=False,
                    lost_frame_count=lost,
                ),
                **self._envelope(),
            )
            await self.append_master([notice], edges_only=True)
        await self._act_on_history(participant, plan.accepted)

    async def _act_on_history(
        self, participant: Participant, accepted: Sequence[Frame | GenericFrame]
    ) -> None:
        """Frames inside a client's history that do more than fold: renames and endings."""
        for inner in accepted:
            if isinstance(inner, Renamed):
                self.header.name = inner.payload.name
                await self.hub.store.rename_session(self.id, inner.payload.name)
            elif isinstance(inner, Deleted) and acts.allowed(
                "request_deletion", participant.role, participant.principal
            ):
                await self._terminate("user_request", participant.role)
                return
            elif (
                isinstance(inner, SessionError)
                and inner.payload.fatal
                and acts.allowed("end_with_fatal_error", participant.role, participant.principal)
            ):
                await self._terminate("error", participant.role)
                return

    # --- attach / detach -----------------------------------------------------------------

    async def attach(self, sink: Sink, hello: Hello, principal: Principal) -> Participant:
        """Attach a connection (caller holds ``self.lock``); queues welcome and backlog."""
        store = self.hub.store
        settings = self.hub.settings
        p = hello.payload
        role: Literal["client", "edge"] = p.role
        record = None
        if p.participant_id:
            record = await store.get_participant(self.id, p.participant_id)
            if record is not None and record.role != role:
                record = None
        current = self._attached_client()
        if role == "client":
            if current is not None and (record is None or current.id != record.participant_id):
                raise ClientAttached("another client is attached to this session")
            if self.client_id is not None and (
                record is None or record.participant_id != self.client_id
            ):
                await self._expire_record(self.client_id)
        elif len(self.participants) - (current is not None) >= settings.max_edges_per_session:
            raise Forbidden("this session has its maximum number of edges attached")
        resumed = record is not None
        if record is None:
            record = ParticipantRecord(participant_id=_new_participant_id(), role=role)
        previous = self.participants.pop(record.participant_id, None)
        if previous is not None:
            # Takeover: fence the older generation; no finalization (notes §15.6).
            previous.fenced = True
            previous.outbox.close()
            asyncio.get_running_loop().create_task(
                previous.sink.close(_SUPERSEDED, "superseded by a newer connection")
            )
        record.generation += 1
        record.attached = True
        record.node_id = settings.node_id
        record.detached_at_ms = None
        record.buffer = self._grant(p.buffer, record.buffer)
        if resumed:
            # From the log, not the record: right at once after a takeover on another node.
            record.last_received_message_id = await store.last_received(
                self.id, record.participant_id
            )
        await store.clear_deadline(self.id, record.participant_id)
        participant = Participant(
            self, record, sink, principal, send_queue_bytes=settings.send_queue_bytes
        )
        participant.outbox.put(codec.encode(self._welcome(record, resumed)))
        cursor = p.resume.last_seq if p.resume is not None else None
        if cursor is None and resumed:
            cursor = record.cursor
        if cursor is not None:
            resume_id = p.resume.last_message_id if p.resume is not None else None
            participant.outbox.put(await self._backlog(participant, cursor, resume_id))
            record.cursor = max(min(cursor, self.head), record.cursor if resumed else 0)
        else:
            record.cursor = self.head
        self.participants[record.participant_id] = participant
        if role == "client":
            self.client_id = record.participant_id
        await store.put_participant(self.id, record)
        if previous is None:
            await self._announce(record, "attached")
        participant.outbox.start()
        return participant

    def _attached_client(self) -> Participant | None:
        q = self.participants.get(self.client_id) if self.client_id is not None else None
        return q if q is not None and q.role == "client" else None

    def _grant(self, asked: Any, previous: BufferGrant | None) -> BufferGrant:
        """Policy: the hello's, else the previous one, else RING at the server cap (§15.5)."""
        cap = self.hub.settings.buffer_capacity
        if asked is not None:
            return BufferGrant(policy=asked.policy, capacity_bytes=min(asked.capacity_bytes, cap))
        if previous is not None:
            return BufferGrant(
                policy=previous.policy, capacity_bytes=min(previous.capacity_bytes, cap)
            )
        return BufferGrant(policy="RING", capacity_bytes=cap)

    def _welcome(self, record: ParticipantRecord, resumed: bool) -> Welcome:
        settings = self.hub.settings
        assert record.buffer is not None
        return Welcome(
            payload=WelcomePayload(
                participant_id=record.participant_id,
                generation=record.generation,
                resumed=resumed,
                session=SessionInfo(
                    session_id=self.id,
                    name=self.header.name,
                    status=status(self.state),
                    head_seq=self.head,
                    epoch=self.header.epoch,
                    created_at=codec.parse_time(self.header.created_at),
                ),
                reattach_window_ms=int(settings.reattach_window_s * 1000),
                heartbeat_interval_ms=int(settings.heartbeat_interval_s * 1000),
                max_frame_bytes=settings.max_frame_bytes,
                buffer=record.buffer,
                received=Received(last_message_id=record.last_received_message_id),
            ),
            sender=self.hub.master_sender,
            **self._envelope(),
        )

    async def _backlog(
        self, participant: Participant, cursor: int, resume_id: str | None
    ) -> bytearray:
        """The M→participant ``session.history`` for everything after ``cursor`` (notes §7).

        Streamed: the log is read a page at a time into the participant's bounded buffer,
        and the frame is assembled from the buffer's entries as they are released, so a
        backlog costs about one copy of what it keeps (docs/protocol.md §7). The frame fits
        the welcome's ``max_frame_bytes``: what does not fit is lost by the policy's rule.
        """
        store = self.hub.store
        grant = participant.record.buffer
        assert grant is not None
        head = self.head  # up to our head only: later entries reach the participant live
        first_kept = await store.trimmed_before(self.id)
        anchor = (await store.read(self.id, after_seq=cursor - 1, limit=1)) if cursor > 0 else []
        anchor_entry = anchor[0] if anchor and anchor[0].seq == cursor else None
        # A cursor past our head, or naming another frame, is from a log we no longer have.
        foreign = cursor > head or (
            resume_id is not None
            and anchor_entry is not None
            and anchor_entry.message_id != resume_id
        )
        trimmed = max(0, first_kept - cursor - 1) if cursor < first_kept else 0
        buffer: BoundedBuffer[int] = BoundedBuffer(grant.policy, grant.capacity_bytes)
        after = cursor
        while after < head:
            page = await store.read(
                self.id, after_seq=after, before_seq=head + 1, limit=_BACKLOG_PAGE
            )
            if not page:
                break
            for entry in page:
                if entry.delivered_to(participant.id, participant.role):
                    buffer.push(entry.data, entry.seq)
            after = page[-1].seq
        if anchor_entry is not None:
            last_id = anchor_entry.message_id
            last_time = codec.decode(anchor_entry.data).timestamp
        else:
            last_id = ""
            last_time = codec.parse_time(self.header.created_at)

        def envelope(dropped: int) -> bytes:
            status_ = buffer.status(extra_lost=trimmed + dropped, unknown_loss=foreign)
            history = History(
                payload=HistoryPayload(
                    frames=[],
                    buffer_status=status_,
                    last_sync_timestamp=last_time,
                    last_message_id=last_id,
                ),
                sender=self.hub.master_sender,
                **self._envelope(),
            )
            return codec.encode(history)

        kept = deque(buffer.kept_bytes())
        size = sum(len(data) for data in kept) + max(0, len(kept) - 1)
        dropped = 0
        bare = envelope(0)
        limit = self.hub.settings.max_frame_bytes
        while kept and len(bare) + size > limit:
            # RING keeps the newest, DROP the oldest: the other end goes (never a gap)
            data = kept.popleft() if grant.policy == "RING" else kept.pop()
            size -= len(data) + (1 if kept else 0)
            dropped += 1
            bare = envelope(dropped)
        buffer.drain()  # from here on ``kept`` holds the only references
        before, _, rest = bare.partition(b'"frames":[]')
        out = bytearray(before)
        out += b'"frames":['
        while kept:
            out += kept.popleft()  # each entry released once it is copied
            if kept:
                out += b","
        out += b"]"
        out += rest
        return out

    async def detach(self, participant: Participant, *, finalize_client: bool = True) -> None:
        """The participant's connection is gone (notes §5): presence, window, §7.8.1."""
        participant.outbox.close()  # the socket is gone, whatever happened to the session
        async with self.lock:
            if self.terminated or participant.fenced:
                return
            if self.participants.get(participant.id) is not participant:
                return
            own = [item for item in self._inbox if item[0] is participant]
            if own:
                # Frames it sent before its socket closed come before its detach and the
                # finalization (a slow store may still hold them queued); the others' wait.
                others = [item for item in self._inbox if item[0] is not participant]
                self._inbox.clear()
                self._inbox.extend(others)
                self._space.set()
                try:
                    await self._commit_now(own)
                except Exception:
                    log.exception("commit_failed", session_id=self.id)
                if self.terminated:
                    return
            del self.participants[participant.id]
            record = participant.record
            record.attached = False
            record.detached_at_ms = _now_ms()
            store = self.hub.store
            try:
                if not await self.hub.cluster.detaching(self, participant):
                    return  # [multinode] taken over on another node, or swept: not ours
                await store.put_participant(self.id, record)
                await store.set_deadline(self.hub.deadline_for(self.id, record.participant_id))
                await self._announce(record, "detached")
                if participant.role == "client" and finalize_client:
                    synthetic = finalize(
                        self.state, session_id=self.id, sender=self.hub.master_sender
                    )
                    if synthetic:
                        await self.append_master(synthetic)
            except StoreUnavailableError:
                self.hub.schedule_reload(self)
            finally:
                await self.hub.cluster.release(self)  # [multinode] what detaching() took

    async def expire(self, participant_id: str) -> None:
        """The participant's reattach window ran out (notes §5, §9)."""
        async with self.lock, self.hub.cluster.guard(self):  # [multinode] cross-node mutex
            if self.terminated or participant_id in self.participants:
                return
            if await self.hub.cluster.attached_elsewhere(self, participant_id):
                return  # [multinode] it reattached on another node meanwhile
            if participant_id == self.client_id:
                await self._terminate("timeout", "system")
            else:
                await self._expire_record(participant_id)

    async def _expire_record(self, participant_id: str) -> None:
        record = await self.hub.store.get_participant(self.id, participant_id)
        await self.hub.store.remove_participant(self.id, participant_id)
        await self.hub.store.clear_deadline(self.id, participant_id)
        if participant_id == self.client_id:
            self.client_id = None
        if record is not None:
            await self._announce(record, "expired")

    # --- termination (§7.5.3, §7.7, notes §9) ---------------------------------------------

    async def terminate(self, reason: str, deleted_by: str) -> None:
        """Delete the session with the §7.5.3 / §7.7 order to every attached participant."""
        async with self.lock:
            await self._terminate(reason, deleted_by)

    async def _terminate(self, reason: str, deleted_by: str) -> None:
        if self.terminated:
            return
        frames: list[Frame] = []
        for call in self.state.open_calls:
            frames.append(
                ToolResult(
                    payload=ToolResultPayload(
                        call_id=call, status="cancelled", output="Session deleted"
                    ),
                    **self._envelope(),
                )
            )
        if self.state.turn_id is not None:
            frames.append(
                TurnEnd(
                    payload=TurnEndPayload(turn_id=self.state.turn_id, stop_reason="error"),
                    **self._envelope(),
                )
            )
        frames.append(
            Deleted(
                payload=DeletedPayload(
                    session_id=self.id,
                    reason=reason,  # type: ignore[arg-type]
                    deleted_by=deleted_by,  # type: ignore[arg-type]
                ),
                **self._envelope(),
            )
        )
        make_final(self.state)
        # What was committed before the end is acknowledged before the §9 frames: nothing
        # may follow session.deleted on the wire.
        self._post_acks()
        if not await self.append_master(frames):
            # Not durable, but the participants must still hear the order before close.
            for frame in frames:
                data = codec.encode(msgspec.structs.replace(frame, sender=self.hub.master_sender))
                for q in self.participants.values():
                    q.outbox.put(data)
        self.terminated = True
        self._space.set()
        self._wake.set()  # lets the worker see ``terminated`` and end
        try:
            await self.close_participants(f"session deleted ({reason})")
            with contextlib.suppress(StoreUnavailableError):
                # expiry and fatal errors archive, deletions purge (notes §16.1)
                await end_session_in_store(self.hub.store, self.id, reason, deleted_by)
            self.hub.forget(self)
        finally:
            self.ended.set()
        log.info("session_deleted", session_id=self.id, reason=reason, deleted_by=deleted_by)

    async def close_participants(self, reason: str) -> None:
        """Let each attached participant's queued frames out (bounded), fence it, close it
        1000 with ``reason``, and forget it: the end of a deleted session on this node."""
        attached = list(self.participants.values())
        # session.deleted is the last frame (§9): an ack still due (a commit that raced the
        # end) is dropped, never written after it; _terminate acknowledged what came before.
        self._acks_due.clear()
        for q in attached:
            q.outbox.flush()
        timeout = self.hub.settings.shutdown_timeout_s
        await asyncio.gather(*(q.outbox.drain(timeout) for q in attached))
        for q in attached:
            q.fenced = True
            q.outbox.close()
        await asyncio.gather(
            *(q.sink.close(_NORMAL, reason) for q in attached), return_exceptions=True
        )
        self.participants.clear()


def _retryable(cause: BaseException) -> bool:
    """A refusal the sender may retry (``store_unavailable``): its re-send must be in order.

    Not a newer format (``version_unsupported``) nor a session the store no longer has
    (``not_allowed``): re-sending cannot help those."""
    return isinstance(cause, StoreError) and not isinstance(
        cause, FormatVersionError | SessionMissing
    )


def presence_change(record: ParticipantRecord, state: str) -> PresenceChange:
    """The presence change ``state`` of the participant of ``record``."""
    return PresenceChange(
        participant_id=record.participant_id,
        role=record.role,
        state=state,  # type: ignore[arg-type]
    )


def _new_participant_id() -> str:
    return "p-" + codec.new_message_id()
