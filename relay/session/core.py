"""What one session is made of and shares among its parts, and its fan-out.

:class:`SessionDeps` is what a session is handed when it is made (store, settings, metrics,
the master's sender, the coordinator), so nothing in the session package looks anything up
on the hub. :class:`SessionCore` holds the state every part reads (the folded state, the
head, the attached participants, the lock) and delivers committed entries: the same bytes
to every recipient's outbox, one flush per session per loop step, each sender's
``connection.ack`` with that flush (notes §16.3).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import structlog

from protocol.frames import Frame, History, Sender
from protocol.state import SessionState

from ..config import Settings
from ..coordination import Coordinator
from ..metrics import Metrics
from ..store.base import PRESENCE, Deadline, LogEntry, SessionHeader, Store
from .participant import Participant
from .runs import RunGate

__all__ = ["NEVER_DUE_MS", "Hooks", "PresenceSteps", "SessionCore", "SessionDeps"]

log = structlog.get_logger("rawp.session")

_MAX_FLUSH_WAIT: Final = 0.02  # seconds: the most a delivery waits for the session's flush
_RECENT_IDS: Final = 65536
NEVER_DUE_MS: Final = (1 << 53) - 1
"""The due time of a reattach deadline under ``--reattach-window never``: exact as a double
(a Redis sorted-set score) and never reached."""


@dataclass(slots=True)
class PresenceSteps:
    """How many of the node's sessions have a presence step waiting: their steps are paced
    together (docs/protocol.md §5 item 11), since they share the node's time."""

    waiting: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionDeps:
    """What a session is handed when it is made (by the hub, or a test)."""

    settings: Settings
    store: Store
    metrics: Metrics
    master_sender: Sender
    # One node: relay.coordination.SoleNode; several: relay.cluster.ClusterNode. Typed on
    # Any: the coordinator is generic in the session type, which is defined above this module.
    coordinator: Coordinator[Any, Any]
    new_lock: Callable[[], contextlib.AbstractAsyncContextManager[Any]]
    # Drops an ended session from the node's registry (the hub's ``forget``).
    forget: Callable[[Any], None]
    presence: PresenceSteps = field(default_factory=PresenceSteps)
    # Told of a loaded session one of whose pending revisits has no wake record (the store
    # refused it): the hub's wake sweep puts it once the store takes writes again.
    wake_unscheduled: Callable[[Any], None] = field(default=lambda session: None)

    def deadline_for(self, session_id: str, participant_id: str) -> Deadline:
        """The reattach-window deadline of a participant that detaches now."""
        window = self.settings.reattach_window
        # ``never``: a deadline that never comes due, so every path that arms, re-arms or
        # clears a participant's deadline stays the same (a later start with a finite
        # window arms it again from the detach: relay/restart.py).
        due = NEVER_DUE_MS if math.isinf(window) else int((time.time() + window) * 1000)
        return Deadline(session_id=session_id, participant_id=participant_id, due_ms=due)


class Hooks(Protocol):
    """What the parts hand back to the session itself (so a test that wraps one of these on
    ``Session`` sees every call, wherever it comes from)."""

    async def append_master(
        self,
        frames: Sequence[Frame],
        *,
        exclude: str | None = None,
        edges_only: bool = False,
    ) -> bool:
        """Fold, log and deliver frames the master makes. False if not logged."""
        ...

    async def terminate_locked(self, reason: str, deleted_by: str) -> None:
        """End the session (caller holds the lock)."""
        ...

    async def accept_history(self, participant: Participant, frame: History) -> None:
        """Log a client's ``session.history`` (caller holds the lock)."""
        ...


class SessionCore:
    """The state of one session the parts share, and delivery of its committed entries."""

    def __init__(
        self, deps: SessionDeps, header: SessionHeader, state: SessionState, head: int
    ) -> None:
        self.deps = deps
        self.id = header.session_id
        self.header = header
        self.state = state
        self.head = head
        self.lock: contextlib.AbstractAsyncContextManager[Any] = deps.new_lock()
        self.participants: dict[str, Participant] = {}
        self.client_id: str | None = None
        self.terminated = False
        # ``unloaded``: ended by a store failure on a sole node, not by a termination: the
        # session goes on, loaded again (Hub.unload_stale). ``ending``: a termination runs.
        self.unloaded = False
        self.ending = False
        # A sole node's load whose recovery the store refused: readable, attached only once
        # the recovery succeeds (Hub.attach retries it).
        self.needs_recovery = False
        self.ended = asyncio.Event()  # set once a termination is over (store and registry)
        # True once an ending is durable: its session.deleted logged, or the store's header
        # archived or purged (a logged ending is finished later if the store change was lost).
        self.end_stored = False
        self.listeners: set[Callable[[LogEntry], None]] = set()
        self.runs = RunGate(self)  # one run at a time (notes §17.3)
        self._recent: OrderedDict[str, None] = OrderedDict()
        self._flush_scheduled = False
        self._flush_cost = 0.0  # seconds the last flush took ...
        self._flush_end = 0.0  # ... and when it ended (perf_counter)
        self._delivered = 0  # deliveries not yet added to the frames_out metric
        # notes §16.3: each sender's latest entry committed since the last flush
        self._acks_due: dict[Participant, LogEntry] = {}

    # --- what the session is handed ---------------------------------------------------------

    @property
    def store(self) -> Store:
        """The store the session's log lives in."""
        return self.deps.store

    @property
    def settings(self) -> Settings:
        """The master's settings."""
        return self.deps.settings

    @property
    def metrics(self) -> Metrics:
        """The master's metrics."""
        return self.deps.metrics

    @property
    def master_sender(self) -> Sender:
        """The ``sender`` of the frames this node's master makes."""
        return self.deps.master_sender

    @property
    def coordinator(self) -> Coordinator[Any, Any]:
        """The multi-node hooks (a no-op on one node)."""
        return self.deps.coordinator

    # --- participants -----------------------------------------------------------------------

    def attached_client(self) -> Participant | None:
        """The session's client, when it is attached on this node."""
        q = self.participants.get(self.client_id) if self.client_id is not None else None
        return q if q is not None and q.role == "client" else None

    # --- dedupe -----------------------------------------------------------------------------

    def seen(self, message_id: str) -> bool:
        """Was ``message_id`` committed lately (the dedupe window, notes §7)?"""
        return message_id in self._recent

    def remember(self, message_id: str) -> None:
        """``message_id`` is in the log: a frame that comes again is a duplicate."""
        self._recent[message_id] = None
        if len(self._recent) > _RECENT_IDS:
            self._recent.popitem(last=False)

    # --- delivery ---------------------------------------------------------------------------

    def committed(self, entry: LogEntry, sender: Participant | None) -> None:
        """``entry`` is in the log: advance the head, acknowledge its sender, fan it out.

        ``sender`` is the local participant that sent it (None for the master's frames and
        other nodes' entries). The state is not folded here: the caller did, or refolds.
        """
        self.head = max(self.head, entry.seq)
        self.remember(entry.message_id)
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
        presence = entry.type == PRESENCE
        sent = 0
        for participant_id, q in self.participants.items():
            if (
                participant_id == exclude
                or (edges_only and q.role != "edge")
                or (presence and not q.record.presence)
            ):
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

    def count_store_error(self, exc: BaseException) -> None:
        """A store failure refused frames of this session: counted (``rawp_store_errors``)
        and logged with the store's own text, which the senders never read
        (:func:`relay.faults.shown`)."""
        self.metrics.store_errors.inc()
        log.warning("store_refused", session_id=self.id, error=str(exc), kind=type(exc).__name__)

    def count_delivered(self) -> None:
        """Add the deliveries since the last call to the ``frames_out`` metric."""
        if self._delivered:
            self.metrics.frames_out.inc(self._delivered)
            self._delivered = 0

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

    @property
    def flush_cost(self) -> float:
        """Seconds the last write round took (at most the 20 ms a flush waits)."""
        return self._flush_cost

    def post_acks(self) -> None:
        """Queue each sender's ``connection.ack`` for what this step committed of theirs."""
        acks, self._acks_due = self._acks_due, {}
        for participant, entry in acks.items():
            participant.send_ack(entry)

    def drop_acks(self) -> None:
        """Forget the acks due: the session ended, and nothing may follow its last frame."""
        self._acks_due.clear()

    def _flush_outboxes(self) -> None:
        self._flush_scheduled = False
        started = time.perf_counter()  # not loop.time(): uvloop caches it per iteration
        for q in self.participants.values():
            q.outbox.flush()
        if self._acks_due:
            # After the recipients' writes: an ack never delays the frames it acknowledges.
            acked = list(self._acks_due)
            self.post_acks()
            for q in acked:
                q.outbox.flush()
        self._flush_end = time.perf_counter()
        self._flush_cost = min(self._flush_end - started, _MAX_FLUSH_WAIT)
