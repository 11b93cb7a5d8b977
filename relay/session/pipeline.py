"""The commit pipeline: inbox → check + fold → group-committed append → delivery.

Frames from participants go through an inbox drained by one worker task per session. The
worker takes the queued frames (up to 512), checks and folds each against the state machine,
and appends the accepted ones in one store call (group commit). While one batch's append is
in flight the worker already folds the next one and chains its append behind it, so the
store writes one batch while the master validates or delivers another (a pipeline of
:data:`_DEPTH` batches; delivery stays in log order). A batch the store refuses is answered
``store_unavailable``, so is every batch chained behind it, and the state is rebuilt from the
log, so nothing unlogged survives. The pipeline is empty whenever the session lock is free.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec
import structlog

from protocol import acts, codec, revisits
from protocol.errors import (
    FormatVersionError,
    InvalidFrame,
    MessageIdConflict,
    NotAllowed,
    ProtocolError,
    SessionMissing,
    StoreError,
    StoreUnavailable,
    StoreUnavailableError,
)
from protocol.finalize import fold, replay
from protocol.frames import Frame, GenericFrame, History
from protocol.state import (
    Effect,
    Phase,
    SenderRole,
    SessionState,
    check,
    effect_of,
    status_frame_due,
)

from ..faults import refusal
from ..store.base import AppendResult, LogEntry, NewEntry
from . import builders
from .core import Hooks, SessionCore
from .effects import Effects
from .participant import Participant
from .runs import RUN_WAIT_S, Held, busy_error

__all__ = [
    "CommitPipeline",
    "Decoded",
    "Pending",
    "decode_log",
    "rebuild_state",
    "same_frame",
    "state_of",
]

log = structlog.get_logger("rawp.session")

_BATCH: Final = 512
# Batches whose append is in flight at once (see _pipeline). The store merges those queued
# behind the one being written into one call, so a deeper pipeline means fewer, larger
# Redis calls under load: 4 carried ~6 % more than 2 (make bench ARGS=throughput).
_DEPTH: Final = 4
_BATCHES_PER_HOLD: Final = 16  # then the lock is released, so attaches are not starved
_MAYBE_LOGGED_MAX: Final = 4096  # refused frames remembered as perhaps logged (claim)
_FIRST: Final = asyncio.FIRST_COMPLETED
# Effects that end the session: the frame is the last of its batch, and nothing after it in
# the inbox is judged (the session is over once its effect is applied).
_ENDINGS: Final = frozenset({Effect.END_REQUESTED, Effect.END_WITH_ERROR})

Queued = tuple[Participant, Frame | GenericFrame, bytes]


Decoded = tuple[Frame | GenericFrame, SenderRole]


def same_frame(held: LogEntry, role: str, frame: Frame | GenericFrame, raw: bytes) -> bool:
    """Is ``frame`` (sent by ``role`` as ``raw``) the frame logged as ``held`` — a re-send,
    logged once — rather than another frame under the same id (notes §7: an id names one
    frame)? Same role, type and payload; the timestamp may differ (an HTTP append sent
    again is built anew). A history sent again is the same one (its entry is trimmed)."""
    if held.sender_role != role or held.type != frame.type:
        return False
    if isinstance(frame, History):
        return True
    try:
        logged = codec.decode_object(held.data)
        sent = codec.decode_object(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return False
    return bool(logged.get("payload") == sent.get("payload"))


def decode_log(entries: Sequence[LogEntry]) -> list[Decoded]:
    """Every entry of a log decoded, with its sender's role (once per load: the state and the
    load's recovery both read it)."""
    return list(_decoded(entries))


def rebuild_state(entries: Sequence[LogEntry], name: str = "") -> SessionState:
    """Fold a log from seq 1 into a fresh state (load, and after a refused batch)."""
    return state_of(decode_log(entries), name)


def state_of(decoded: Sequence[Decoded], name: str = "") -> SessionState:
    """:func:`rebuild_state` of a log decoded already (:func:`decode_log`)."""
    state = replay(decoded)
    state.name = state.name or name  # the header's name when the log holds no rename
    return state


def _decoded(entries: Sequence[LogEntry]) -> Iterator[Decoded]:
    for entry in entries:
        try:
            yield codec.decode(entry.data), entry.sender_role  # type: ignore[misc]
        except ProtocolError:
            continue  # what the master logged was checked; tolerate entries of older builds


@dataclass(slots=True)
class Pending:
    """A frame folded into the state and waiting for its batch to be appended."""

    participant: Participant | None
    frame: Frame | GenericFrame
    entry: NewEntry


@dataclass(slots=True)
class _InFlight:
    """A folded batch whose append was started and whose delivery waits for it."""

    pending: list[Pending]
    appended: asyncio.Future[list[AppendResult]]
    started: float


def _retryable(cause: BaseException) -> bool:
    """A refusal the sender may retry (``store_unavailable``): its re-send must be in order.

    Not a newer format (``version_unsupported``) nor a session the store no longer has
    (``not_allowed``): re-sending cannot help those."""
    return isinstance(cause, StoreError) and not isinstance(
        cause, FormatVersionError | SessionMissing
    )


class CommitPipeline:
    """One session's inbox, worker and append pipeline."""

    def __init__(self, core: SessionCore, hooks: Hooks, effects: Effects) -> None:
        self.core = core
        self.hooks = hooks
        self.effects = effects
        self._inbox: deque[Queued] = deque()
        self._wake = asyncio.Event()
        self._space = asyncio.Event()
        self._space.set()
        # Batches folded into the state whose appends are still in flight, oldest first, and
        # their message ids. Both are empty whenever the lock is free.
        self._inflight: deque[_InFlight] = deque()
        self._unsettled_ids: set[str] = set()
        self._refold = False  # a settled batch asked for a refold once the pipeline is empty
        # Message ids of this node's frames refused on a store error the store may have
        # applied all the same (its reply lost): found in the log later, they are ours, and
        # their effects are the owner's (see claim). Oldest first, bounded.
        self._maybe_logged: dict[str, None] = {}
        self._arrival: asyncio.Future[None] | None = None  # the pipeline waits for frames
        self._worker: asyncio.Task[None] | None = None

    @property
    def worker(self) -> asyncio.Task[None] | None:
        """The task draining the inbox, once a frame has arrived."""
        return self._worker

    @property
    def queued(self) -> int:
        """Frames waiting in the inbox."""
        return len(self._inbox)

    @property
    def in_flight(self) -> int:
        """Batches whose append was started and not yet settled."""
        return len(self._inflight)

    def stop(self) -> None:
        """The session ended (``core.terminated`` is set): wake the worker and any submitter
        waiting for inbox space, so both see it and return."""
        self._space.set()
        self._wake.set()

    def cancel_worker(self) -> None:
        """Cancel the worker of a session being unloaded (it waits for frames that cannot
        come)."""
        if self._worker is not None:
            self._worker.cancel()

    # --- intake -----------------------------------------------------------------------------

    def offer(self, participant: Participant, frame: Frame | GenericFrame, raw: bytes) -> bool:
        """Queue a participant's frame for the worker; False once the inbox is full, when the
        caller stops reading until :meth:`room` (its socket's backpressure)."""
        if self.core.terminated or participant.fenced:
            return True
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
        if len(self._inbox) >= self.core.settings.inbox_frames:
            self._space.clear()
            return False
        return True

    async def room(self) -> None:
        """Return once the inbox takes frames again."""
        await self._space.wait()

    def take_queued(self, participant: Participant) -> list[Queued]:
        """Take ``participant``'s frames out of the inbox (caller holds the lock): a detach
        commits them before it finalizes; the others' frames stay queued."""
        own = [item for item in self._inbox if item[0] is participant]
        if own:
            others = [item for item in self._inbox if item[0] is not participant]
            self._inbox.clear()
            self._inbox.extend(others)
            self._space.set()
        return own

    async def commit_now(self, batch: list[Queued]) -> None:
        """Commit ``batch`` and wait until it is appended and delivered (caller holds the lock)."""
        try:
            await self._commit(batch)
        finally:
            await self.settle_all()

    async def _work(self) -> None:
        core = self.core
        structlog.contextvars.bind_contextvars(session_id=core.id)
        while not core.terminated:
            await self._wake.wait()
            self._wake.clear()
            while self._inbox and not core.terminated:
                try:
                    async with core.lock:
                        await self._pipeline()
                except Exception:
                    log.exception("commit_failed", session_id=core.id)

    async def _pipeline(self) -> None:
        """Fold and append batches with up to _DEPTH appends in flight (caller holds the lock).

        While batch N's append is in flight, batch N+1 is folded and its append chained behind
        N's; N is delivered once its append returns, while N+1's is being written. Everything in
        flight is settled before the lock is released.
        """
        started = 0
        try:
            while not self.core.terminated:
                if self._inbox and len(self._inflight) < _DEPTH and started < _BATCHES_PER_HOLD:
                    # popped under the lock: a detach holding it takes its own frames first
                    n = min(_BATCH, len(self._inbox))
                    batch = [self._inbox.popleft() for _ in range(n)]
                    self._space.set()
                    self.core.metrics.frames_in.inc(n)
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
            await self.settle_all()

    # --- judging a batch --------------------------------------------------------------------

    async def _commit(self, batch: list[Queued]) -> None:
        """Judge and fold ``batch``, then start its append (settled by the caller)."""
        core = self.core
        coordinator = core.coordinator
        if self._inflight and coordinator.needs_sync(core):
            await self.settle_all()  # [multinode] a refold must not race our own appends
        if not await coordinator.ready(core, batch):
            return  # [multinode] the state may hold unlogged frames: refused, store_unavailable
        pending: list[Pending] = []
        folded = self._unsettled_ids  # message ids folded but not yet remembered
        for participant, frame, raw in batch:
            if core.terminated:
                return
            if participant.refused_from == frame.message_id:
                participant.refused_from = None  # sent again (maybe logged after all)
            if participant.fenced:
                continue  # a fenced generation
            if core.seen(frame.message_id) or frame.message_id in folded:
                if frame.message_id in folded:
                    # The frame holding this id is on its way into the log: settle it first.
                    await self.flush(pending)
                    pending = []
                    if core.terminated:
                        return
                held = await self.holder(frame.message_id)
                if held is not None:
                    if not same_frame(held, participant.role, frame, raw):
                        self.conflict(participant, frame, held)
                    continue  # a re-send: logged once (notes §7)
                # not in the log after all (its append was refused): judged like any frame
            if participant.refused_from is not None and not self._resends(participant, frame):
                continue
            effect = effect_of(frame, participant.role)
            if effect is Effect.HISTORY and isinstance(frame, History):
                # folded by plan_history (against what the detach finalized), not the table
                await self.flush(pending)
                pending = []
                await self.hooks.accept_history(participant, frame)
                continue
            # [trust] the act table: may this credential do what the frame does (§16.6)?
            act = acts.act_of(frame.type, fatal=effect is Effect.END_WITH_ERROR)
            try:
                if act is not None:
                    acts.require(act, participant.role, participant.principal)
            except NotAllowed as exc:
                # non-fatal, not logged, nothing ends
                participant.send_error(exc, ref_message_id=frame.message_id)
                continue
            if (
                frame.type == "user.message"
                and participant.role == "edge"
                and not self._may_run(participant, frame, raw)
            ):
                continue
            head, tail = codec.stamp_parts(raw, frame, participant.sender)
            if not self._fits(participant, frame, len(head) + len(tail)):
                continue
            try:
                if effect is Effect.REVISIT:
                    revisits.check_request(frame, codec.now())  # the master's clock judges `at`
                # A delete request is checked, not folded: it is not logged, and folding it
                # would close the open calls and turn before the cleanup frames are made.
                judge = check if effect is Effect.END_REQUESTED else fold
                warnings = judge(core.state, frame, participant.role)
            except ProtocolError as exc:
                held = await self.holder(frame.message_id)
                if held is None:
                    participant.send_error(exc, ref_message_id=frame.message_id)
                elif not same_frame(held, participant.role, frame, raw):
                    self.conflict(participant, frame, held)
                continue  # else a re-send of a logged frame the state now refuses
            for warning in warnings:
                participant.send_error(warning)
            if effect is Effect.END_REQUESTED:
                # A delete request is not logged nor relayed; the master's own session.deleted
                # is (§15.8). Its effect follows the delivery of what came before it.
                await self.flush(pending)
                await self.effects.apply(
                    frame,
                    participant.role,
                    owner=True,
                    sender_id=participant.id,
                    sender=participant,
                )
                return
            entry = NewEntry(
                message_id=frame.message_id,
                type=frame.type,
                head=head,
                tail=tail,
                sender_id=participant.id,
                sender_role=participant.role,
                # A rename goes back to the edge that asked, too (notes §15.9).
                exclude=None if effect is Effect.RENAME else participant.id,
            )
            pending.append(Pending(participant, frame, entry))
            folded.add(frame.message_id)
            if status_frame_due(core.state):
                pending.append(self._master_pending(builders.status_frame(core.id, core.state)))
            if effect in _ENDINGS:
                await self.flush(pending)  # its effect ends the session once it is delivered
                return
        self._launch(pending)
        core.runs.observe()

    def _may_run(self, participant: Participant, frame: Frame | GenericFrame, raw: bytes) -> bool:
        """One run at a time (runs.py): may this edge's user.message be judged now? If not,
        it is held for the agent (a WebSocket edge, whose later messages wait behind it) or
        refused ``busy`` (its wait is over, or an HTTP caller, which waits in its request)."""
        runs = self.core.runs
        if runs.steering():
            return True
        again = participant.releasing
        if again is not None and again[0].message_id == frame.message_id:
            if not runs.busy():
                return True
            if time.monotonic() < again[2]:
                participant.held.appendleft(again)  # another message came first: wait on
                return False
        elif participant.held or runs.busy():
            item = (frame, raw, time.monotonic() + RUN_WAIT_S)
            if participant.held:
                participant.held.append(item)  # behind its earlier ones (their releaser runs)
                return False
            if runs.hold(participant, item, self._commit_held):
                return False
        else:
            return True  # the agent is free
        participant.send_error(busy_error(), ref_message_id=frame.message_id)
        return False

    async def _commit_held(self, participant: Participant, item: Held) -> None:
        """Judge a held message again, under the lock (runs.RunGate's releaser)."""
        core = self.core
        async with core.lock:
            if core.terminated or participant.fenced:
                return
            participant.releasing = item
            try:
                await self.commit_now([(participant, item[0], item[1])])
            finally:
                participant.releasing = None

    def _fits(self, participant: Participant, frame: Frame | GenericFrame, stamped: int) -> bool:
        """Will the frame, as delivered (seq and sender added), fit the welcome's
        ``max_frame_bytes``? If not it is refused ``invalid_frame``, not logged (docs §2)."""
        limit = self.core.settings.max_frame_bytes
        size = stamped + len(str(self.core.head * 10 + 10))  # room for the seq it will get
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

    async def holder(self, message_id: str) -> LogEntry | None:
        """The logged entry whose id is ``message_id`` (a re-sent frame whose reply the store
        lost, a session loaded since, or another sender's frame); None when there is none or
        the store cannot tell now (the append's own dedupe then judges it)."""
        core = self.core
        try:
            seq = await core.store.message_seq(core.id, message_id)
            if seq is None:
                return None
            entries = await core.store.read(core.id, after_seq=seq - 1, limit=1)
        except StoreError:
            return None
        return entries[0] if entries and entries[0].message_id == message_id else None

    @staticmethod
    def conflict(participant: Participant, frame: Frame | GenericFrame, held: LogEntry) -> None:
        """Refuse a frame whose id another frame holds: never dropped as a re-send (its sender
        would count it committed), never logged (one id names one frame)."""
        participant.send_error(
            MessageIdConflict(
                f"message_id {frame.message_id} already names another frame of this session "
                f"(seq {held.seq}); send this one with a fresh id"
            ),
            ref_message_id=frame.message_id,
        )

    # --- appending and settling -------------------------------------------------------------

    async def flush(self, pending: list[Pending]) -> bool:
        """Append folded frames behind those in flight and deliver all. False if refused."""
        self._launch(pending)
        return await self.settle_all()

    def _launch(self, pending: list[Pending]) -> None:
        """Start appending ``pending`` in one store call, behind the batch in flight."""
        if not pending:
            return
        core = self.core
        before = self._inflight[-1].appended if self._inflight else None
        entries = [p.entry for p in pending]
        epoch = 0
        if core.coordinator.lease_epoch:  # one node holds no lease: no per-frame work here
            # [multinode] a participant's frames are written under the lease it attached
            # under, never under one this node took later (after it was declared dead, §16.9):
            # refused if that lease was fenced, whatever the timing of judging and new lease.
            epoch = min(
                (p.participant.record.epoch for p in pending if p.participant is not None),
                default=0,
            )
        with core.coordinator.writes_under(epoch) if epoch else contextlib.nullcontext():
            appended = core.store.append_nowait(core.id, entries, after=before)
        self._inflight.append(_InFlight(pending, appended, time.perf_counter()))

    async def settle_all(self) -> bool:
        """Deliver every batch in flight, in order. False if any was refused."""
        ok = True
        while self._inflight:
            ok = await self._settle_one() and ok
        return ok

    async def _settle_one(self) -> bool:
        """Wait for the oldest append in flight, then deliver its batch. False if refused."""
        core = self.core
        item = self._inflight[0]
        appended = item.appended
        try:
            # Done already (the memory store appends at once): no shield, no suspension.
            results = appended.result() if appended.done() else await asyncio.shield(appended)
        except StoreError as exc:  # any store failure (SessionMissing too): answered, never fatal
            self._inflight.popleft()
            core.count_store_error(exc)
            self._refuse(item.pending, exc)
            # every later batch was folded on top of this one: the store refuses it too
            while self._inflight:
                later = self._inflight.popleft()
                with contextlib.suppress(Exception):
                    await asyncio.shield(later.appended)
                self._refuse(later.pending, exc)
            self._unsettled_ids.clear()
            self._refold = False
            await self.rebuild()
            return False
        self._inflight.popleft()
        core.metrics.store_latency.observe(time.perf_counter() - item.started)
        pending = item.pending
        maybe_logged = self._maybe_logged  # empty but after a refusal: no per-frame work then
        for p in pending:
            self._unsettled_ids.discard(p.entry.message_id)
            if maybe_logged:
                maybe_logged.pop(p.entry.message_id, None)  # re-sent and settled: known now
        # [multinode] another node appended first: its entries go out before ours, then refold
        rebuild = await core.coordinator.before_delivery(core, results)
        delivered: list[Pending] = []
        duplicates: list[Pending] = []
        for p, result in zip(pending, results, strict=True):
            if result.duplicate:
                rebuild = True  # folded speculatively but already in the log
                duplicates.append(p)
                continue
            core.committed(p.entry.committed(result.seq), p.participant)
            delivered.append(p)
        core.count_delivered()
        for p in duplicates:
            # Already logged: a re-send, or another frame holding its id (then refused).
            if p.participant is None:
                continue
            held = await self.holder(p.entry.message_id)
            raw = p.entry.head + b"0" + p.entry.tail
            if held is not None and not same_frame(held, p.participant.role, p.frame, raw):
                self.conflict(p.participant, p.frame, held)
        # The whole batch is delivered before any effect is applied: an effect whose store
        # write fails never holds back the entries committed with it.
        for p in delivered:
            if core.terminated:
                return True  # an entry ended the session: it was the last of its batch
            sender = p.participant
            await self.effects.apply(
                p.frame,
                "master" if sender is None else sender.role,
                owner=True,
                sender_id=p.entry.sender_id,
                sender=sender,
            )
        if core.terminated:
            return True
        # A refold reads the log: only once nothing folded is still on its way into it.
        self._refold = self._refold or rebuild
        if self._refold and not self._inflight:
            self._refold = False
            await self.rebuild()
        return True

    def _refuse(self, pending: list[Pending], cause: BaseException) -> None:
        retryable = _retryable(cause)  # the store may have applied it all the same
        for p in pending:
            if retryable:
                self._maybe_logged[p.entry.message_id] = None
                if len(self._maybe_logged) > _MAYBE_LOGGED_MAX:
                    del self._maybe_logged[next(iter(self._maybe_logged))]
            if p.participant is not None:
                self.refuse(p.participant, p.frame.message_id, cause)

    def claim(self, message_id: str) -> bool:
        """Is ``message_id`` one of this node's frames the store refused with an error yet
        logged (the reply was lost)? Then its effects are the owner's (once), wherever the
        entry is found: a refold of the log or the session's own entry coming back."""
        if message_id not in self._maybe_logged:
            return False
        del self._maybe_logged[message_id]
        return True

    @staticmethod
    def refuse(participant: Participant, message_id: str, cause: BaseException) -> None:
        """Answer a frame the store could not take (``cause``) with its ``session.error``; a
        retryable refusal also refuses the participant's later frames until this one is sent
        again, so a re-send is logged in production order (notes §12)."""
        if participant.refused_from is None and _retryable(cause):
            participant.refused_from = message_id
        participant.send_error(refusal(cause, message_id), ref_message_id=message_id)

    async def rebuild(self) -> list[Decoded] | None:
        """Refold the state from the log (after a refused or partly duplicate batch, or on
        another node's say-so); entries past the head are delivered first, in seq order.
        Returns the log it read, decoded (None when the store could not read it)."""
        core = self.core
        try:
            entries = await core.store.read(core.id)
        except StoreUnavailableError:
            core.coordinator.store_failed(core)
            return None
        # Entries past our head (another node's, or ours whose reply was lost) were never
        # delivered here: deliver them, in seq order, rather than skip past them.
        past = [entry for entry in entries if entry.seq > core.head]
        for entry in past:
            core.committed(entry, None)
        decoded = decode_log(entries)
        core.state = state_of(decoded, core.header.name)
        for entry in past:
            # Another node's (what they do to this node's memory, not the owner's side
            # effects), or ours whose reply was lost: the owner's, ending included.
            await self.effects.apply_entry(entry, owner=self.claim(entry.message_id))
        return decoded

    # --- master-made frames -----------------------------------------------------------------

    async def append_master(
        self,
        frames: Sequence[Frame],
        *,
        exclude: str | None = None,
        edges_only: bool = False,
    ) -> bool:
        """Fold, log and deliver frames the master makes (notes §15.2). False if not logged
        (also once the session has ended here: nothing more is written for it)."""
        if self.core.terminated:
            return False
        pending: list[Pending] = []
        for frame in frames:
            pending.append(self._master_pending(frame, exclude=exclude, edges_only=edges_only))
        state = self.core.state
        if status_frame_due(state) and state.phase is not Phase.TERMINATED:
            pending.append(self._master_pending(builders.status_frame(self.core.id, state)))
        try:
            return await self.flush(pending)
        finally:
            self.core.runs.observe()

    def _master_pending(
        self, frame: Frame, *, exclude: str | None = None, edges_only: bool = False
    ) -> Pending:
        """Fold a master-made frame and make its entry (the caller appends it)."""
        sender = self.core.master_sender
        bare = frame if frame.sender is None else msgspec.structs.replace(frame, sender=None)
        fold(self.core.state, bare, "master")
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
        return Pending(None, bare, entry)
