"""Node liveness: heartbeats, sweeps of dead nodes, crash recovery of what they held.

Each node heartbeats into ``rawp:{~nodes}:live`` (Redis's clock) every ``--node-heartbeat``
seconds and records the sessions it holds connections for. A node silent for
``--node-dead-after`` seconds is dead: the first node to claim it (one atomic script) runs
crash recovery (relay/recovery.py) over its sessions. A starting node sweeps its own previous
incarnation first. A node that finds it was claimed while it was only cut off closes its
connections (1001) so its clients reattach cleanly. The sweep also refolds stale sessions,
reconciles this node's own records once the store is back, and unloads idle sessions.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Final

import structlog

from protocol.errors import StoreError

from ..recovery import recover_locked
from .following import Following
from .mutex import SessionMutex
from .shared import NodeShared, check_cancelled

__all__ = ["Liveness"]

log = structlog.get_logger("rawp.cluster")

_SWEEP_LEASE_MS: Final = 30_000  # a sweeper that dies mid-sweep is replaced after this
_UNLOAD_AFTER_S: Final = 60.0  # a session nobody here uses is forgotten (and unsubscribed)
_GOING_AWAY: Final = 1001


class Liveness:
    """This node's heartbeats and sweeps."""

    def __init__(self, shared: NodeShared, following: Following, mutex: SessionMutex) -> None:
        self.shared = shared
        self.following = following
        self.mutex = mutex

    async def join(self) -> None:
        """Sweep this node's previous incarnation and register a new lease epoch."""
        shared = self.shared
        # What an earlier process with this node id held is stale: it has no connections now.
        # Claimed before we register (a new lease epoch), recovered after: the sweep fences
        # the old epoch in each session, our appends carry the new one.
        token = secrets.token_hex(8)
        previous = await shared.store.claim_node(
            shared.id,
            dead_after_ms=shared.dead_after_ms,
            lease_ms=_SWEEP_LEASE_MS,
            token=token,
            force=True,
        )
        sent = time.monotonic()
        await shared.store.node_heartbeat(shared.id, new_epoch=True)
        shared.lease.confirmed(sent)
        if previous is not None:
            await self._recover_node(shared.id, previous, token)

    def fenced_self(self) -> None:
        """A session refused our append under the current lease: we were declared dead."""
        if self.shared.rejoin:
            return  # already known; the next heartbeat takes the new lease
        self.shared.rejoin = True
        self._declared_dead()

    async def heartbeats(self) -> None:
        """Heartbeat until cancelled (a new lease epoch after we were fenced)."""
        shared = self.shared
        failing = False
        while True:
            check_cancelled()
            await asyncio.sleep(shared.heartbeat_s)
            try:
                rejoin = shared.rejoin
                sent = time.monotonic()
                registered = await shared.store.node_heartbeat(shared.id, new_epoch=rejoin)
                shared.lease.confirmed(sent)
                if rejoin:
                    shared.rejoin = False
            except StoreError as exc:
                shared.metrics.heartbeat_failures.inc()
                if not failing:
                    log.warning("heartbeat_failed", error=str(exc))
                failing = True
                continue
            except Exception:
                log.exception("heartbeat_failed")
                continue
            if failing:
                failing = False
                shared.reconcile = True  # records we could not write meanwhile
                log.info("store_back")
            if not registered:
                self._declared_dead()

    def _declared_dead(self) -> None:
        """Another node swept us while we were cut off: our connections are no longer ours."""
        shared = self.shared
        shared.metrics.declared_dead.inc()
        log.error("node_declared_dead", node_id=shared.id)
        shared.holding.clear()
        for session in list(shared.host.sessions.values()):
            for participant in list(session.participants.values()):
                session.drop(participant)
                shared.host.spawn(
                    participant.sink.close(_GOING_AWAY, "this node lost its place; reattach")
                )

    async def sweeps(self) -> None:
        """Sweep until cancelled."""
        while True:
            check_cancelled()
            try:
                await self._sweep_once()
            except StoreError:
                pass  # the store is down: the heartbeat loop says so; retry next tick
            except Exception:
                log.exception("sweep_failed")
            await asyncio.sleep(self.shared.heartbeat_s)

    async def _sweep_once(self) -> None:
        shared = self.shared
        ages = await shared.store.node_ages()
        shared.metrics.nodes_alive.set(sum(1 for n in ages if shared.alive(ages, n)))
        for node in sorted(ages):
            if node != shared.id and not shared.alive(ages, node):
                await self._sweep(node)
        if shared.reconcile:
            shared.reconcile = False
            try:
                await self._reconcile_own()
            except BaseException:
                shared.reconcile = True
                raise
        stale = self.following.stale
        for session_id in list(stale):
            session = shared.host.sessions.get(session_id)
            if session is None:
                stale.discard(session_id)
                continue
            async with session.lock:
                await self.following.sync(session)
        self._unload_idle()

    async def _sweep(self, node_id: str, *, force: bool = False) -> None:
        """Claim a dead node (exactly one claimer wins) and recover every session it held."""
        shared = self.shared
        token = secrets.token_hex(8)
        epoch = await shared.store.claim_node(
            node_id,
            dead_after_ms=shared.dead_after_ms,
            lease_ms=_SWEEP_LEASE_MS,
            token=token,
            force=force,
        )
        if epoch is None:
            return
        await self._recover_node(node_id, epoch, token)

    async def _recover_node(self, node_id: str, epoch: int, token: str) -> None:
        """Fence and recover every session the claimed node held (``epoch``: its lease)."""
        shared = self.shared
        held = await shared.store.held_sessions(node_id)
        if node_id != shared.id:
            shared.metrics.dead_nodes.inc()
            log.warning("node_dead", node_id=node_id, sessions=len(held))
        for session_id in held:
            check_cancelled()
            try:
                await self._recover(session_id, node_id, fence_epoch=epoch)
            except StoreError:
                return  # the lease runs out and the next sweep does the rest
            except Exception:
                log.exception("recovery_failed", session_id=session_id, node_id=node_id)
            await shared.store.release_session(node_id, session_id)
        await shared.store.node_swept(node_id, token)

    async def _recover(
        self, session_id: str, node_id: str, *, fence_epoch: int | None = None
    ) -> bool:
        """Recover ``session_id`` from ``node_id``'s loss (relay/recovery.py).

        ``fence_epoch`` (a sweep of a node declared dead): the session first refuses the
        node's appends under that lease epoch, then the mutex catches up with what it logged
        before, so nothing the node accepted after the sweep reaches the log.
        """
        shared = self.shared
        session = await shared.host.open(session_id)
        if session is None:
            return False  # deleted meanwhile: nothing to recover
        if fence_epoch is not None:
            await shared.store.fence_node(session.id, node_id, fence_epoch)
        async with session.lock, self.mutex.guard(session):
            return await recover_locked(
                session, node_id, shared.metrics.recovered, fenced_epoch=fence_epoch
            )

    async def _reconcile_own(self) -> None:
        """Records that say "attached here" without a connection here: detach them now."""
        shared = self.shared
        for session_id in await shared.store.held_sessions(shared.id):
            await self._recover(session_id, shared.id)
            session = shared.host.sessions.get(session_id)
            if session is None or not session.participants:
                shared.holding.discard(session_id)
                await shared.store.release_session(shared.id, session_id)

    def _unload_idle(self) -> None:
        """Forget sessions nobody on this node has used for a while (and unsubscribe)."""
        now = time.monotonic()
        for follow in list(self.following.follows.values()):
            session = follow.session
            busy = (
                session.participants
                or session.listeners  # an SSE or AG-UI watcher
                or session.queued
                or getattr(session.lock, "locked", lambda: True)()
                or session.id in self.following.stale
                or self.mutex.holds(session.id)
            )
            if busy:
                follow.idle_since = None
                continue
            if follow.idle_since is None:
                follow.idle_since = now
            elif now - follow.idle_since >= _UNLOAD_AFTER_S:
                session.cancel_worker()  # idle: it waits for frames that cannot come
                self.shared.host.forget(session)
