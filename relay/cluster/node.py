"""A master as one node of several sharing a Redis store: the coordinator a session is handed.

:class:`ClusterNode` implements :class:`relay.coordination.Node` by composing the parts of
this package: following (:mod:`.following`), the session mutex (:mod:`.mutex`), takeover
(:mod:`.takeover`) and liveness (:mod:`.liveness`). :func:`node_for` picks it for the Redis
store and :class:`relay.coordination.SoleNode` for every other.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

import structlog

from protocol.errors import StoreError, StoreUnavailable
from protocol.frames import Frame, GenericFrame

from ..coordination import Node, ParticipantRead, SoleNode
from ..session import Participant, Session
from ..store.base import AppendResult, Store
from .following import Following
from .liveness import Liveness
from .mutex import SessionMutex
from .shared import ClusterHost, NodeShared, cancel_and_wait
from .takeover import Takeover

if TYPE_CHECKING:
    from ..store.redis import RedisStore

__all__ = ["ClusterNode", "node_for"]

log = structlog.get_logger("rawp.cluster")


def node_for(host: ClusterHost, store: Store) -> Node[Session, Participant]:
    """The coordinator for ``store``: a Redis-backed node, else this master alone."""
    if store.name == "redis":
        from ..store.redis import RedisStore  # lazy: the embedded path never imports redis

        if isinstance(store, RedisStore):
            return ClusterNode(host, store)
    return SoleNode(host.settings.node_id, host.unload_stale)


class ClusterNode:
    """This master as one node of several sharing a Redis store."""

    def __init__(self, host: ClusterHost, store: RedisStore) -> None:
        self.shared = NodeShared(host, store)
        self.following = Following(self.shared)
        self.mutex = SessionMutex(self.shared, self.following)
        self.takeover = Takeover(self.shared, self.following, self.mutex)
        self.liveness = Liveness(self.shared, self.following, self.mutex)
        self.following.on_control = self.takeover.on_control
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def id(self) -> str:
        """This node's id."""
        return self.shared.id

    @property
    def lease_epoch(self) -> int:
        """This node's lease epoch now (the store's, from the heartbeats)."""
        return self.shared.store.lease_epoch

    def arrived(self) -> None:
        """An HTTP request arrived: its writes carry this node's current lease epoch."""
        self.shared.lease.arrived()

    def writing(self, session_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        """Around a REST write: refused unless our lease is current (relay/lease.py)."""
        return self.shared.lease.writing(session_id)

    def writes_under(self, epoch: int) -> contextlib.AbstractContextManager[None]:
        """Appends made in the block carry ``epoch``: refused if it was fenced since."""
        return self.shared.store.pinned_epoch(epoch)

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Subscribe, sweep this node's previous incarnation, register, start the loops."""
        loop = asyncio.get_running_loop()
        self._tasks.append(await self.following.subscribe())
        self.shared.store.on_fenced = self.liveness.fenced_self
        await self.liveness.join()
        self._tasks.append(loop.create_task(self.liveness.heartbeats()))
        self._tasks.append(loop.create_task(self.liveness.sweeps()))
        log.info("node_joined", node_id=self.id)

    async def stop(self) -> None:
        """Stop the loops; mark this node dead now so another node finalizes what it held."""
        await cancel_and_wait([*self._tasks, *self.following.tasks()])
        self._tasks.clear()
        with contextlib.suppress(StoreError):
            await self.shared.store.retire_node(self.id)
        await self.following.close()

    async def follow(self, session: Session) -> None:
        """Subscribe to a session being loaded, then catch up with what its load missed."""
        await self.following.follow(session)

    def unfollow(self, session: Session) -> None:
        """Unsubscribe from a forgotten session (in the background)."""
        self.following.unfollow(session)

    # --- the hooks a session calls (relay.coordination.Coordinator) ---------------------

    @contextlib.asynccontextmanager
    async def guard(self, session: Session) -> AsyncIterator[None]:
        """Hold the session's mutex, caught up with the log (caller holds ``session.lock``)."""
        async with self.mutex.guard(session):
            yield

    def attaching(
        self, session: Session, role: str, participant_id: str | None, backlog_after: int | None
    ) -> contextlib.AbstractAsyncContextManager[ParticipantRead | None]:
        """Hold the mutex around an attach and apply the cross-node rules first."""
        return self.takeover.attaching(session, role, participant_id, backlog_after)

    async def detaching(self, session: Session, participant: Participant) -> bool:
        """Take the mutex; True when the participant's record is still ours to write."""
        record = (await self.mutex.enter(session, participant.id)).view.own
        return (
            record is not None
            and record.attached
            and record.node_id == self.id
            and record.generation == participant.generation
        )

    async def release(self, session: Session) -> None:
        """After a detach: let go of the mutex :meth:`detaching` took (this node's next
        attach or detach may take it over before the release lands)."""
        await self.mutex.release(session, hand_over=True)

    async def ready(
        self, session: Session, batch: Sequence[tuple[Participant, Frame | GenericFrame, bytes]]
    ) -> bool:
        """Refold a stale session before judging frames; refuse them while that fails."""
        if session.id not in self.following.stale:
            return True
        try:
            await self.following.sync(session)
            return True
        except StoreError:
            session.metrics.store_errors.inc()
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
        return session.id in self.following.stale

    async def before_delivery(self, session: Session, results: Sequence[AppendResult]) -> bool:
        """Another node appended between our head and our seqs: deliver those entries first."""
        return await self.following.before_delivery(session, results)

    async def attached_elsewhere(self, session: Session, participant_id: str) -> bool:
        """True when the store says the participant is attached on another node."""
        record = await self.shared.store.get_participant(session.id, participant_id)
        return record is not None and record.attached and record.node_id != self.id

    def store_failed(self, session: Session) -> None:
        """Keep the session (and its connections); refold it once the store answers."""
        self.following.store_failed(session)

    def ended_elsewhere(self, session: Session) -> None:
        """Another node deleted the session: accept nothing more, then close ours 1000."""
        self.following.ended_elsewhere(session)
