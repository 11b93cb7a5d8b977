"""Several master nodes on one Redis: follow sessions, fence takeovers, watch node liveness.

With the memory store a master is one node and :class:`Node` makes every hook below a no-op.
With the redis store :class:`ClusterNode` makes the nodes behave as one master (notes §12,
docs/operations.md):

* **Following.** While a node has a session loaded it subscribes to the session's channel.
  Every append batch is published there by the Lua script that commits it, so a frame accepted
  on node A reaches edges on node B. The follower applies foreign entries in seq order under
  the session lock: each is folded into ``Session.state`` and delivered to this node's
  participants. A seq gap (a lost message, or a resubscription after an outage) is filled
  from the log. Batches this node published itself are ignored: they were delivered when
  they were committed.
* **Interleaving.** When this node's own append comes back with seqs past ``head + 1``,
  another node appended in between: :meth:`ClusterNode.before_delivery` delivers those
  entries first and the speculative fold is redone from the log.
* **The session mutex.** Everything that changes who a session's client is, and the
  finalization that follows from it, runs under the session's cross-node mutex (a token key
  in Redis with a TTL): attach, detach, expiry, delete and crash recovery. Each holder first
  catches up with the log, so §7.8.1 finalization is computed on the current state and an
  already finalized state yields no frames: finalization happens exactly once however many
  nodes notice the loss.
* **One client per session.** A client hello while the session's client is attached on
  another live node is refused 4409; a takeover (same participant id) publishes a fence on
  the session's channel, and the old node closes that connection 4409 and accepts nothing
  more from it before it answers.
* **Liveness.** Each node heartbeats into ``rawp:{~nodes}:live`` (Redis's clock) every
  ``--node-heartbeat`` seconds and records the sessions it holds connections for. A node
  silent for ``--node-dead-after`` seconds is dead: the first node to claim it (one atomic
  script) runs crash recovery (relay/recovery.py) over its sessions. A starting node sweeps
  its own previous incarnation first. A node that finds it was claimed while it was only cut
  off closes its connections (1001) so its clients reattach cleanly.
* **Redis faults.** A session whose store write failed is *stale*: its state may hold frames
  that were never logged, so nothing is judged against it until it has been refolded from
  the log (frames meanwhile get ``store_unavailable``). Stale sessions are resynced, and this
  node's own participant records reconciled, as soon as Redis answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from protocol import codec
from protocol.errors import (
    ClientAttached,
    CloseCode,
    ProtocolError,
    StoreError,
    StoreUnavailable,
    StoreUnavailableError,
)
from protocol.frames import Frame, GenericFrame, Presence, Renamed

from .recovery import recover_locked, recover_session
from .store.base import AppendResult, LogEntry, ParticipantRecord

if TYPE_CHECKING:
    from .hub import Hub
    from .session import Participant, Session
    from .store.redis import Published, RedisStore, Subscription

__all__ = ["ClusterNode", "Node", "cancel_and_wait", "node_for"]

log = structlog.get_logger("rawp.cluster")

_MUTEX_TTL_MS: Final = 3000  # a crashed holder blocks its session at most this long
_MUTEX_WAIT_S: Final = 4.0  # > the TTL: a waiter always outlasts a dead holder
_FENCE_WAIT_S: Final = 2.0  # how long a takeover waits for the old node's answer
_FENCE_DRAIN_S: Final = 1.0  # how long a fenced node lets an in-flight batch land
_SWEEP_LEASE_MS: Final = 30_000  # a sweeper that dies mid-sweep is replaced after this
_UNLOAD_AFTER_S: Final = 60.0  # a session nobody here uses is forgotten (and unsubscribed)
_FENCE: Final = "rawp.fence"  # control entry: close participant ``message_id`` (generation)
_FENCED: Final = "rawp.fenced"  # control entry: the answer
_SUPERSEDED: Final = CloseCode.SUPERSEDED
_GOING_AWAY: Final = 1001


def _check_cancelled() -> None:
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


def node_for(hub: Hub) -> Node:
    """The multi-node coordinator for the hub's store: a no-op unless it is Redis."""
    if hub.store.name == "redis":
        from .store.redis import RedisStore  # lazy: the embedded path never imports redis

        if isinstance(hub.store, RedisStore):
            return ClusterNode(hub, hub.store)
    return Node(hub)


class Node:
    """This master alone (memory store): every multi-node hook is a no-op."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.id = hub.settings.node_id

    async def start(self) -> None:
        """Join the cluster (nothing to join here)."""

    async def stop(self) -> None:
        """Leave the cluster."""

    async def follow(self, session: Session) -> None:
        """A session was loaded on this node."""

    def unfollow(self, session: Session) -> None:
        """A session was forgotten on this node."""

    def guard(self, session: Session) -> contextlib.AbstractAsyncContextManager[None]:
        """Hold the session's cross-node mutex (caller holds ``session.lock``)."""
        return contextlib.nullcontext()

    def attaching(
        self, session: Session, role: str, participant_id: str | None
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """Around an attach (caller holds ``session.lock``): cross-node checks and takeover."""
        return contextlib.nullcontext()

    async def detaching(self, session: Session, participant: Participant) -> bool:
        """Before a detach writes anything: is the participant's record still this node's?"""
        return True

    async def release(self, session: Session) -> None:
        """After a detach: let go of what :meth:`detaching` took."""

    async def ready(
        self, session: Session, batch: Sequence[tuple[Participant, Frame | GenericFrame, bytes]]
    ) -> bool:
        """May the worker judge ``batch`` against ``session.state``? (False: refused.)"""
        return True

    def needs_sync(self, session: Session) -> bool:
        """Will :meth:`ready` refold the session from the log first?"""
        return False

    async def before_delivery(self, session: Session, results: Sequence[AppendResult]) -> bool:
        """Deliver entries another node appended before ours; True when there were some."""
        return False

    async def attached_elsewhere(self, session: Session, participant_id: str) -> bool:
        """Is the participant attached on another node (so its deadline is moot)?"""
        return False

    async def fence(self, session: Session, node_id: str, epoch: int) -> None:
        """Refuse the dead ``node_id``'s appends to the session under leases up to ``epoch``."""

    def store_failed(self, session: Session) -> None:
        """The store failed mid-change: the next use reloads the session."""
        self.hub.forget(session)


@dataclass(eq=False)
class _Follow:
    """One loaded session's subscription state on this node."""

    session: Session
    batches: list[Published] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    observer: Any = None
    idle_since: float | None = None


class _Metrics:
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


def _control(kind: str, participant_id: str, *, to: str, data: bytes = b"") -> LogEntry:
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


class ClusterNode(Node):
    """This master as one node of several sharing a Redis store."""

    def __init__(self, hub: Hub, store: RedisStore) -> None:
        super().__init__(hub)
        if not hub.settings.node_id:
            # records, heartbeats and master-made frames must all name this node the same
            raise ValueError("a master on the redis store needs a node id (Master sets one)")
        self.store = store
        self.heartbeat_s = hub.settings.node_heartbeat_s
        self.dead_after_ms = int(hub.settings.node_dead_after_s * 1000)
        self.metrics = _Metrics(hub.metrics.registry)
        self._sub: Subscription | None = None
        self._sub_lock = asyncio.Lock()
        self._follows: dict[str, _Follow] = {}
        self._mutex: dict[str, str] = {}  # session id -> our token (one holder per session)
        self._stale: set[str] = set()
        self._holding: set[str] = set()  # sessions in our held set
        self._fence_waits: dict[tuple[str, str], asyncio.Future[None]] = {}
        self._reconcile = False
        self._rejoin = False  # a session fenced us: take a new lease epoch at the next beat
        self._tasks: list[asyncio.Task[None]] = []

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Subscribe, sweep this node's previous incarnation, register, start the loops."""
        loop = asyncio.get_running_loop()
        self._sub = await self.store.subscribe(own=False)
        self._tasks.append(loop.create_task(self._dispatch()))
        self.store.on_fenced = self._fenced_self
        # What an earlier process with this node id held is stale: it has no connections now.
        # Claimed before we register (a new lease epoch), recovered after: the sweep fences
        # the old epoch in each session, our appends carry the new one.
        token = secrets.token_hex(8)
        previous = await self.store.claim_node(
            self.id,
            dead_after_ms=self.dead_after_ms,
            lease_ms=_SWEEP_LEASE_MS,
            token=token,
            force=True,
        )
        await self.store.node_heartbeat(self.id, new_epoch=True)
        if previous is not None:
            await self._recover_node(self.id, previous, token)
        self._tasks.append(loop.create_task(self._heartbeats()))
        self._tasks.append(loop.create_task(self._sweeps()))
        log.info("node_joined", node_id=self.id)

    async def stop(self) -> None:
        """Stop the loops; mark this node dead now so another node finalizes what it held."""
        tasks = [*self._tasks, *(f.task for f in self._follows.values() if f.task is not None)]
        await cancel_and_wait(tasks)
        self._tasks.clear()
        with contextlib.suppress(StoreError):
            await self.store.retire_node(self.id)
        if self._sub is not None:
            await self._sub.aclose()

    # --- following sessions ----------------------------------------------------------------

    async def follow(self, session: Session) -> None:
        """Subscribe to a session being loaded, then catch up with what its load missed."""
        if self._sub is None:
            return
        follow = _Follow(session, observer=self._observer(session))
        self._follows[session.id] = follow
        session.listeners.add(follow.observer)
        follow.task = asyncio.get_running_loop().create_task(self._follow(follow))
        try:
            async with self._sub_lock:
                await self._sub.add(session.id)
            # appended between the load's read and the subscription: not published to us
            async with session.lock:
                await self._sync(session)
        except BaseException:
            self._drop(session)
            raise

    def unfollow(self, session: Session) -> None:
        """Unsubscribe from a forgotten session (in the background)."""
        if self._drop(session):
            self.hub.spawn(self._unsubscribe(session.id))
            if session.id in self._holding:
                self._holding.discard(session.id)
                self.hub.spawn(self._release_held(session.id))

    def _drop(self, session: Session) -> bool:
        follow = self._follows.get(session.id)
        if follow is None or follow.session is not session:
            return False
        del self._follows[session.id]
        session.listeners.discard(follow.observer)
        self._stale.discard(session.id)
        self.metrics.stale.set(len(self._stale))
        if follow.task is not None:
            follow.task.cancel()
        return True

    async def _unsubscribe(self, session_id: str) -> None:
        async with self._sub_lock:
            if session_id in self._follows or self._sub is None:
                return  # loaded again meanwhile: keep the channel
            with contextlib.suppress(StoreError):
                await self._sub.remove(session_id)

    async def _release_held(self, session_id: str) -> None:
        with contextlib.suppress(StoreError):
            await self.store.release_session(self.id, session_id)

    async def _dispatch(self) -> None:
        """Route every published batch to its session's follower (or control handler)."""
        assert self._sub is not None
        while True:
            _check_cancelled()
            try:
                async for published in self._sub:
                    self._route(published)
                return
            except StoreUnavailableError as exc:
                # The subscription reconnects by itself and then yields an empty batch per
                # session: each follower reads what it missed from the log.
                log.warning("subscription_lost", error=str(exc))
            except Exception:
                log.exception("dispatch_failed")
                await asyncio.sleep(0.1)

    def _route(self, published: Published) -> None:
        if published.entries and published.entries[0].seq == 0:
            for entry in published.entries:
                self._on_control(published, entry)
            return
        follow = self._follows.get(published.session_id)
        if follow is None:
            return
        if published.entries and published.node_id == self.store.node_id:
            return  # our own appends were delivered here when they were committed
        follow.batches.append(published)
        follow.wake.set()

    async def _follow(self, follow: _Follow) -> None:
        session = follow.session
        while True:
            _check_cancelled()
            await follow.wake.wait()
            follow.wake.clear()
            batches, follow.batches = follow.batches, []
            try:
                async with session.lock:
                    if session.terminated:
                        return
                    for published in batches:
                        await self._receive(session, published.entries)
            except StoreError:
                self.store_failed(session)
            except Exception:
                log.exception("follow_failed", session_id=session.id)

    async def _receive(self, session: Session, entries: Sequence[LogEntry]) -> None:
        """Apply a published batch in seq order, filling any gap before it from the log."""
        if not entries:  # resubscribed after an outage: the log has what was missed
            await self._sync(session)
            return
        for entry in entries:
            if entry.seq <= session.head:
                continue
            if entry.seq > session.head + 1:
                self.metrics.gap_fills.inc()
                await self._sync(session, before=entry.seq)
            self._apply(session, entry)

    async def _sync(self, session: Session, before: int | None = None) -> None:
        """Catch up with the log (caller holds the lock): fold and deliver what we lack."""
        if session.id in self._stale:
            # The state may hold frames that were never logged: refold it from scratch.
            self._stale.discard(session.id)
            await session.rebuild()  # delivers what we lack, marks stale again on failure
            self.metrics.stale.set(len(self._stale))
            if session.id in self._stale:
                raise StoreUnavailableError("the store is unavailable")
            return
        for entry in await self.store.read(session.id, after_seq=session.head, before_seq=before):
            self._apply(session, entry)

    def _apply(self, session: Session, entry: LogEntry) -> None:
        if entry.seq <= session.head:
            return
        session.receive(entry)
        self.metrics.foreign.inc()

    def _observer(self, session: Session) -> Any:
        """A listener that keeps what is not in the state in step with any node's entries."""

        def observe(entry: LogEntry) -> None:
            kind = entry.type
            if kind == "session.deleted":
                if entry.sender_role == "master" and entry.sender_id != self.id:
                    self._deleted_elsewhere(session)
            elif kind in ("session.presence", "session.renamed"):
                try:
                    frame = codec.decode(entry.data)
                except ProtocolError:
                    return
                if isinstance(frame, Presence):
                    for change in frame.payload.all_changes():  # coalesced: several
                        if change.role != "client":
                            continue
                        pid = change.participant_id
                        if change.state == "attached":
                            session.client_id = pid
                        elif change.state == "expired" and session.client_id == pid:
                            session.client_id = None
                elif isinstance(frame, Renamed):
                    session.header.name = frame.payload.name

        observe.rawp_cluster = True  # type: ignore[attr-defined]  # not an SSE listener
        return observe

    def _deleted_elsewhere(self, session: Session) -> None:
        """Another node terminated the session: accept nothing more, then close ours 1000."""
        if session.terminated:
            return
        session.end_here()  # a submitter waiting for inbox space returns, the worker ends
        self.hub.spawn(self._close_deleted(session))

    async def _close_deleted(self, session: Session) -> None:
        try:
            async with session.lock:  # after whatever holds it now (e.g. an attach) is done
                await session.close_participants("session deleted")
                self.hub.forget(session)
        finally:
            session.ended.set()  # a hello that waited for the deletion resolves the id again

    # --- the session mutex -----------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def guard(self, session: Session) -> AsyncIterator[None]:
        """Hold the session's mutex, caught up with the log (caller holds ``session.lock``)."""
        await self._enter(session)
        try:
            yield
        finally:
            await self.release(session)

    async def _enter(self, session: Session) -> None:
        token = secrets.token_hex(8)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _MUTEX_WAIT_S
        delay = 0.002
        try:
            while not await self.store.lock_session(session.id, token, _MUTEX_TTL_MS):
                _check_cancelled()
                if loop.time() > deadline:
                    raise StoreUnavailableError(f"session {session.id}'s mutex stays taken")
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.05)
            self._mutex[session.id] = token
            if session.id not in self._holding:
                # Held before anything is written under the mutex (an expiry, a detach, a
                # recovery): if we are declared dead meanwhile, the sweep fences this session
                # too, so a paused node's late write cannot land after it.
                await self.store.hold_session(self.id, session.id)
                self._holding.add(session.id)
            await self._sync(session)
            await self._refresh_client(session)
        except StoreError as exc:
            await self.release(session)
            self.store_failed(session)
            if isinstance(exc, StoreUnavailableError):
                raise
            raise StoreUnavailableError(str(exc)) from exc

    async def release(self, session: Session) -> None:
        """Let go of the mutex; forget our hold on a session we no longer serve."""
        token = self._mutex.pop(session.id, None)
        if token is not None:
            with contextlib.suppress(StoreError):
                await self.store.unlock_session(session.id, token)
        if (
            session.id in self._holding
            and not session.participants
            and session.id not in self._stale
            # shutting down, clients are detached without finalization: the sweep of this
            # node, once retired, must still find the session (§7.8.2)
            and not self.hub.shutting_down
        ):
            self._holding.discard(session.id)
            await self._release_held(session.id)

    async def _refresh_client(
        self, session: Session, records: list[ParticipantRecord] | None = None
    ) -> None:
        """``session.client_id`` as the store has it (another node may have changed it)."""
        if records is None:
            records = await self.store.list_participants(session.id)
        clients = sorted((r for r in records if r.role == "client"), key=lambda r: not r.attached)
        session.client_id = clients[0].participant_id if clients else None

    @contextlib.asynccontextmanager
    async def attaching(
        self, session: Session, role: str, participant_id: str | None
    ) -> AsyncIterator[None]:
        """Hold the mutex around an attach and apply the cross-node rules first."""
        async with self.guard(session):
            if not session.terminated:
                await self._admit(session, role, participant_id)
            yield

    async def _admit(self, session: Session, role: str, participant_id: str | None) -> None:
        # Held before the record says "attached here": if we die, the sweep finds the session.
        await self.store.hold_session(self.id, session.id)
        self._holding.add(session.id)
        records = await self.store.list_participants(session.id)
        remote = [r for r in records if r.attached and r.node_id != self.id]
        if not remote:
            return
        ages = await self.store.node_ages()
        dead = {r.node_id for r in remote if not self._alive(ages, r.node_id)}
        for node in sorted(dead):
            # Its node died and no sweep reached this session yet: fence it here, catch up
            # with what it logged before the fence, and recover the session now (once).
            await self.fence(session, node, await self.store.node_epoch(node))
            await self._sync(session)
            await recover_locked(self.hub, session, node, self.metrics.recovered)
        if dead:
            records = await self.store.list_participants(session.id)
            await self._refresh_client(session, records)
        for r in records:
            if not r.attached or r.node_id == self.id or r.node_id in dead:
                continue
            if r.participant_id == participant_id and r.role == role:
                await self._fence(session, r)  # a takeover of a connection on another node
            elif role == "client" and r.role == "client":
                raise ClientAttached("another client is attached to this session")

    def _alive(self, ages: dict[str, int], node_id: str) -> bool:
        age = ages.get(node_id)
        return age is not None and 0 <= age < self.dead_after_ms

    async def _fence(self, session: Session, record: ParticipantRecord) -> None:
        """Have the node holding ``record``'s connection close it 4409 and wait (bounded)."""
        key = (session.id, record.participant_id)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._fence_waits[key] = waiter
        try:
            fence = _control(
                _FENCE,
                record.participant_id,
                to=record.node_id,
                data=str(record.generation).encode(),
            )
            await self.store.publish(session.id, [fence])
            self.metrics.takeovers.inc()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter, _FENCE_WAIT_S)
        finally:
            self._fence_waits.pop(key, None)

    def _on_control(self, published: Published, entry: LogEntry) -> None:
        if entry.exclude != self.id:
            return  # for another node
        if entry.type == _FENCE:
            self.hub.spawn(self._fenced(published.session_id, published.node_id, entry))
        elif entry.type == _FENCED:
            waiter = self._fence_waits.get((published.session_id, entry.message_id))
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    async def _fenced(self, session_id: str, requester: str, entry: LogEntry) -> None:
        """Another node took over one of our connections: close it, accept nothing more."""
        session = self.hub.sessions.get(session_id)
        participant = session.participants.get(entry.message_id) if session else None
        generation = int(entry.data or b"0")
        if session is not None and participant is not None and participant.generation <= generation:
            session.drop(participant)  # from now on nothing it sent is accepted
            # Let a batch of its frames already being appended land first, so the new
            # connection's frames come after it in the log.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_FENCE_DRAIN_S), session.lock:
                    pass
            self.hub.spawn(participant.sink.close(_SUPERSEDED, "superseded by a newer connection"))
        answer = _control(_FENCED, entry.message_id, to=requester)
        with contextlib.suppress(StoreError):
            await self.store.publish(session_id, [answer])

    # --- hooks on the session's paths ------------------------------------------------------

    async def fence(self, session: Session, node_id: str, epoch: int) -> None:
        """Refuse ``node_id``'s appends to the session under leases up to ``epoch``."""
        await self.store.fence_node(session.id, node_id, epoch)

    async def detaching(self, session: Session, participant: Participant) -> bool:
        """Take the mutex; True when the participant's record is still ours to write."""
        await self._enter(session)
        record = await self.store.get_participant(session.id, participant.id)
        return (
            record is not None
            and record.attached
            and record.node_id == self.id
            and record.generation == participant.generation
        )

    async def ready(
        self, session: Session, batch: Sequence[tuple[Participant, Frame | GenericFrame, bytes]]
    ) -> bool:
        """Refold a stale session before judging frames; refuse them while that fails."""
        if session.id not in self._stale:
            return True
        try:
            await self._sync(session)
            return True
        except StoreError:
            self.hub.metrics.store_errors.inc()
            for participant, frame, _raw in batch:
                if not participant.fenced:
                    if participant.refused_from is None:  # its re-send must start here
                        participant.refused_from = frame.message_id
                    participant.send_error(
                        StoreUnavailable(
                            f"frame {frame.message_id} was not stored: the store is unavailable"
                        ),
                        ref_message_id=frame.message_id,
                    )
            return False

    def needs_sync(self, session: Session) -> bool:
        """True while the session waits for a refold from the log (see :meth:`store_failed`)."""
        return session.id in self._stale

    async def before_delivery(self, session: Session, results: Sequence[AppendResult]) -> bool:
        """Another node appended between our head and our seqs: deliver those entries first."""
        seqs = [r.seq for r in results if not r.duplicate]
        if not seqs or min(seqs) <= session.head + 1:
            return False
        self.metrics.gap_fills.inc()
        try:
            entries = await self.store.read(
                session.id, after_seq=session.head, before_seq=min(seqs)
            )
        except StoreError:
            self.store_failed(session)
            return True
        for entry in entries:
            session.committed(entry, None)  # not folded: the caller refolds from the log
            self.metrics.foreign.inc()
        return True

    async def attached_elsewhere(self, session: Session, participant_id: str) -> bool:
        """True when the store says the participant is attached on another node."""
        record = await self.store.get_participant(session.id, participant_id)
        return record is not None and record.attached and record.node_id != self.id

    def store_failed(self, session: Session) -> None:
        """Keep the session (and its connections); refold it once the store answers."""
        if session.id not in self._follows:
            self.hub.forget(session)
            return
        self._stale.add(session.id)
        self._reconcile = True
        self.metrics.stale.set(len(self._stale))

    # --- liveness ---------------------------------------------------------------------------

    def _fenced_self(self) -> None:
        """A session refused our append under the current lease: we were declared dead."""
        if self._rejoin:
            return  # already known; the next heartbeat takes the new lease
        self._rejoin = True
        self._declared_dead()

    async def _heartbeats(self) -> None:
        failing = False
        while True:
            _check_cancelled()
            await asyncio.sleep(self.heartbeat_s)
            try:
                rejoin = self._rejoin
                registered = await self.store.node_heartbeat(self.id, new_epoch=rejoin)
                if rejoin:
                    self._rejoin = False
            except StoreError as exc:
                self.metrics.heartbeat_failures.inc()
                if not failing:
                    log.warning("heartbeat_failed", error=str(exc))
                failing = True
                continue
            except Exception:
                log.exception("heartbeat_failed")
                continue
            if failing:
                failing = False
                self._reconcile = True  # records we could not write meanwhile
                log.info("store_back")
            if not registered:
                self._declared_dead()

    def _declared_dead(self) -> None:
        """Another node swept us while we were cut off: our connections are no longer ours."""
        self.metrics.declared_dead.inc()
        log.error("node_declared_dead", node_id=self.id)
        self._holding.clear()
        for session in list(self.hub.sessions.values()):
            for participant in list(session.participants.values()):
                session.drop(participant)
                self.hub.spawn(
                    participant.sink.close(_GOING_AWAY, "this node lost its place; reattach")
                )

    async def _sweeps(self) -> None:
        while True:
            _check_cancelled()
            try:
                await self._sweep_once()
            except StoreError:
                pass  # the store is down: the heartbeat loop says so; retry next tick
            except Exception:
                log.exception("sweep_failed")
            await asyncio.sleep(self.heartbeat_s)

    async def _sweep_once(self) -> None:
        ages = await self.store.node_ages()
        self.metrics.nodes_alive.set(sum(1 for n in ages if self._alive(ages, n)))
        for node in sorted(ages):
            if node != self.id and not self._alive(ages, node):
                await self._sweep(node)
        if self._reconcile:
            self._reconcile = False
            try:
                await self._reconcile_own()
            except BaseException:
                self._reconcile = True
                raise
        for session_id in list(self._stale):
            session = self.hub.sessions.get(session_id)
            if session is None:
                self._stale.discard(session_id)
                continue
            async with session.lock:
                await self._sync(session)
        self._unload_idle()

    async def _sweep(self, node_id: str, *, force: bool = False) -> None:
        """Claim a dead node (exactly one claimer wins) and recover every session it held."""
        token = secrets.token_hex(8)
        epoch = await self.store.claim_node(
            node_id,
            dead_after_ms=self.dead_after_ms,
            lease_ms=_SWEEP_LEASE_MS,
            token=token,
            force=force,
        )
        if epoch is None:
            return
        await self._recover_node(node_id, epoch, token)

    async def _recover_node(self, node_id: str, epoch: int, token: str) -> None:
        """Fence and recover every session the claimed node held (``epoch``: its lease)."""
        held = await self.store.held_sessions(node_id)
        if node_id != self.id:
            self.metrics.dead_nodes.inc()
            log.warning("node_dead", node_id=node_id, sessions=len(held))
        for session_id in held:
            _check_cancelled()
            try:
                await recover_session(
                    self.hub, session_id, node_id, self.metrics.recovered, fence_epoch=epoch
                )
            except StoreError:
                return  # the lease runs out and the next sweep does the rest
            except Exception:
                log.exception("recovery_failed", session_id=session_id, node_id=node_id)
            await self.store.release_session(node_id, session_id)
        await self.store.node_swept(node_id, token)

    async def _reconcile_own(self) -> None:
        """Records that say "attached here" without a connection here: detach them now."""
        for session_id in await self.store.held_sessions(self.id):
            await recover_session(self.hub, session_id, self.id, self.metrics.recovered)
            session = self.hub.sessions.get(session_id)
            if session is None or not session.participants:
                self._holding.discard(session_id)
                await self.store.release_session(self.id, session_id)

    def _unload_idle(self) -> None:
        """Forget sessions nobody on this node has used for a while (and unsubscribe)."""
        now = time.monotonic()
        for follow in list(self._follows.values()):
            session = follow.session
            busy = (
                session.participants
                or any(not getattr(x, "rawp_cluster", False) for x in session.listeners)
                or session.queued
                or getattr(session.lock, "locked", lambda: True)()
                or session.id in self._stale
                or session.id in self._mutex
            )
            if busy:
                follow.idle_since = None
                continue
            if follow.idle_since is None:
                follow.idle_since = now
            elif now - follow.idle_since >= _UNLOAD_AFTER_S:
                session.cancel_worker()  # idle: it waits for frames that cannot come
                self.hub.forget(session)
