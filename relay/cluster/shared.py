"""What the parts of one cluster node share: its host, store, metrics and bookkeeping."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from protocol.errors import StoreError

from ..config import Settings
from ..lease import WriteLease
from ..metrics import Metrics
from ..session import Session
from ..store.base import LogEntry

if TYPE_CHECKING:
    from ..store.redis import RedisStore

__all__ = [
    "FENCE",
    "FENCED",
    "ClusterHost",
    "ClusterMetrics",
    "NodeShared",
    "cancel_and_wait",
    "check_cancelled",
    "control",
]

FENCE: Final = "rawp.fence"  # control entry: close participant ``message_id`` (generation)
FENCED: Final = "rawp.fenced"  # control entry: the answer


class ClusterHost(Protocol):
    """What a cluster node needs of its owner (the hub), so the cluster stays below it."""

    settings: Settings
    metrics: Metrics
    shutting_down: bool

    @property
    def sessions(self) -> dict[str, Session]:
        """Sessions loaded on this node."""
        ...

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> object:
        """Run a background task (cancelled at shutdown)."""
        ...

    def forget(self, session: Session) -> None:
        """Drop a session from this node's registry."""
        ...

    def unload_stale(self, session: Session) -> None:
        """One node alone: drop a session whose store write failed, closing its connections."""
        ...

    async def open(self, session_id: str) -> Session | None:
        """The loaded session, loading it from the store if needed; None if absent."""
        ...


def check_cancelled() -> None:
    """Raise the cancellation a library swallowed.

    On Python 3.11 ``asyncio.wait_for`` (which redis-py awaits inside its commands) returns
    the result instead of raising when the cancel lands just as the inner call completes
    (gh-86296), so a loop that calls Redis must look for a pending cancel itself.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def cancel_and_wait(tasks: Sequence[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` and wait for them, cancelling again any that swallowed it."""
    pending = {t for t in tasks if not t.done()}
    while pending:
        for task in pending:
            task.cancel()
        _done, pending = await asyncio.wait(pending, timeout=0.1)
    for task in tasks:
        if not task.cancelled():
            task.exception()  # retrieved: a task's own failure was logged where it happened


def control(kind: str, participant_id: str, *, to: str, data: bytes = b"") -> LogEntry:
    """A control message for node ``to`` (seq 0: never a log entry)."""
    return LogEntry(
        seq=0,
        message_id=participant_id,
        type=kind,
        data=data,
        sender_id="",
        sender_role="master",
        exclude=to,
    )


class ClusterMetrics:
    """The cluster's Prometheus metrics, on the master's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.nodes_alive = Gauge("rawp_cluster_nodes_alive", "Nodes heartbeating", registry=r)
        self.foreign = Counter(
            "rawp_cluster_foreign_entries", "Entries of other nodes delivered here", registry=r
        )
        self.gap_fills = Counter(
            "rawp_cluster_gap_fills", "Seq gaps filled from the log", registry=r
        )
        self.heartbeat_failures = Counter(
            "rawp_cluster_heartbeat_failures", "Heartbeats Redis did not take", registry=r
        )
        self.dead_nodes = Counter(
            "rawp_cluster_dead_nodes_swept", "Dead nodes this node swept", registry=r
        )
        self.recovered = Counter(
            "rawp_cluster_sessions_finalized", "Sessions finalized by crash recovery", registry=r
        )
        self.takeovers = Counter(
            "rawp_cluster_takeovers", "Connections fenced on another node", registry=r
        )
        self.stale = Gauge(
            "rawp_cluster_stale_sessions", "Sessions waiting for the store to refold", registry=r
        )
        self.declared_dead = Counter(
            "rawp_cluster_declared_dead", "Times this node found itself declared dead", registry=r
        )


class NodeShared:
    """The state every part of one node reads: who we are, where, and what we hold."""

    def __init__(self, host: ClusterHost, store: RedisStore) -> None:
        settings = host.settings
        if not settings.node_id:
            # records, heartbeats and master-made frames must all name this node the same
            raise ValueError("a master on the redis store needs a node id (Master sets one)")
        self.host = host
        self.store = store
        self.id = settings.node_id
        self.heartbeat_s = settings.node_heartbeat_s
        self.dead_after_ms = int(settings.node_dead_after_s * 1000)
        self.metrics = ClusterMetrics(host.metrics.registry)
        self.holding: set[str] = set()  # sessions in our held set
        self.reconcile = False  # records we could not write meanwhile: reconcile them
        self.rejoin = False  # a session fenced us: take a new lease epoch at the next beat
        self.lease = WriteLease(store, settings.node_dead_after_s)  # REST writes' guard

    def alive(self, ages: dict[str, int], node_id: str) -> bool:
        """Did ``node_id`` heartbeat within the dead-after interval (``ages``: Redis's)?"""
        age = ages.get(node_id)
        return age is not None and 0 <= age < self.dead_after_ms

    async def hold(self, session_id: str, *, again: bool = False) -> None:
        """Put the session in our held set (before anything is written for it here);
        ``again``: tell the store even when we believe it has it."""
        if again or session_id not in self.holding:
            await self.store.hold_session(self.id, session_id)
            self.holding.add(session_id)

    async def release_held(self, session_id: str) -> None:
        """Take the session out of our held set (best effort)."""
        self.holding.discard(session_id)
        with contextlib.suppress(StoreError):
            await self.store.release_session(self.id, session_id)
