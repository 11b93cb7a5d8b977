"""One client per session across nodes, and takeover of a connection held by another node.

A client hello while the session's client is attached on another live node is refused 4409;
a takeover (same participant id) publishes a fence on the session's channel, and the old
node closes that connection 4409 and accepts nothing more from it before it answers. A
record left attached on a dead node that no sweep has reached yet is recovered first.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Final

from protocol.errors import ClientAttached, CloseCode, StoreError, StoreUnavailableError

from ..coordination import LogPage, ParticipantRead
from ..recovery import recover_locked
from ..session import BACKLOG_FIRST_READ, Session
from ..store.base import LogEntry, ParticipantRecord
from .following import Following
from .mutex import SessionMutex
from .shared import FENCE, FENCED, NodeShared, control

if TYPE_CHECKING:
    from ..store.redis import AttachView, Published

__all__ = ["Takeover"]

_FENCE_WAIT_S: Final = 2.0  # how long a takeover waits for the old node's answer
_FENCE_DRAIN_S: Final = 1.0  # how long a fenced node lets an in-flight batch land
_SUPERSEDED: Final = CloseCode.SUPERSEDED
_LEASE_WAIT_BEATS: Final = 5  # heartbeats an attach waits for this node's new lease


class Takeover:
    """The cross-node rules of an attach, and fencing a connection on another node."""

    def __init__(self, shared: NodeShared, following: Following, mutex: SessionMutex) -> None:
        self.shared = shared
        self.following = following
        self.mutex = mutex
        self._fence_waits: dict[tuple[str, str], asyncio.Future[None]] = {}

    @contextlib.asynccontextmanager
    async def attaching(
        self, session: Session, role: str, participant_id: str | None, backlog_after: int | None
    ) -> AsyncIterator[ParticipantRead | None]:
        """Hold the mutex around an attach and apply the cross-node rules first; yields the
        participant's record, last received id and first backlog page (after
        ``backlog_after``) as the mutex read them, when nothing the rules did can have
        changed them (None: the attach reads them itself)."""
        await self._lease_renewed()
        # (read only for a participant id: without one there is no ``known`` to carry it)
        page = None
        if backlog_after is not None and participant_id:
            page = (backlog_after, BACKLOG_FIRST_READ)
        # Held before the record says "attached here" (told to the store again on every
        # attach, with the mutex's round trip): if we die, the sweep finds the session.
        async with self.mutex.guard(
            session, participant_id or "", hold_again=True, page=page, hand_over=True
        ) as entered:
            view = entered.view
            known = None
            if not session.terminated:
                remote = await self._admit(session, role, participant_id, view)
                if not remote and participant_id and view.complete:
                    backlog = None
                    if page is not None and entered.page is not None:
                        backlog = LogPage(page[0], page[1], entered.page)
                    known = ParticipantRead(view.own, view.received, backlog)
            yield known

    async def _lease_renewed(self) -> None:
        """Wait (bounded) while a session has fenced our lease and the next heartbeat has not
        brought the new one: an attach now would record the fenced epoch, and the sweep of
        that lease would finalize a connection that is alive."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _LEASE_WAIT_BEATS * self.shared.heartbeat_s
        while self.shared.rejoin and loop.time() < deadline:
            await asyncio.sleep(self.shared.heartbeat_s / _LEASE_WAIT_BEATS)

    async def _admit(
        self, session: Session, role: str, participant_id: str | None, view: AttachView
    ) -> bool:
        """Refuse a second client, fence our own connection on another node, recover what a
        dead node left attached; ``view``: the participants as the mutex found them. True
        when another node holds records of the session (what was read may have changed)."""
        shared = self.shared
        store = shared.store
        if shared.rejoin:  # still (or again) without a lease of our own: see _lease_renewed
            raise StoreUnavailableError("this node is taking a new lease; attach again")
        # The view holds only what the rules need (the nodes with attached records, this
        # participant's own record, the client records): not every record, so a storm of N
        # viewers of one session costs N small reads, not N².
        remote = [node for node in view.nodes if node != shared.id]
        if not remote:
            return False
        ages = await store.node_ages()
        dead = {node for node in remote if not shared.alive(ages, node)}
        for node in sorted(dead):
            # Its node died and no sweep reached this session yet: fence it here, catch up
            # with what it logged before the fence, and recover the session now (once).
            epoch = await store.node_epoch(node)
            await store.fence_node(session.id, node, epoch)
            await self.following.sync(session)
            await recover_locked(session, node, shared.metrics.recovered, fenced_epoch=epoch)
        if dead:
            view = await store.attach_view(session.id, participant_id or "")
            self.mutex.refresh_client(session, view.clients)

        def elsewhere(record: ParticipantRecord) -> bool:
            """Attached on another node that is alive (the dead were recovered above)."""
            return record.attached and record.node_id != shared.id and record.node_id not in dead

        if role == "client" and any(
            elsewhere(r) and r.participant_id != participant_id for r in view.clients
        ):
            raise ClientAttached("another client is attached to this session")
        own = view.own
        if own is not None and own.role == role and elsewhere(own):
            await self._fence(session, own)  # a takeover of a connection on another node
        return True

    async def _fence(self, session: Session, record: ParticipantRecord) -> None:
        """Have the node holding ``record``'s connection close it 4409 and wait (bounded)."""
        key = (session.id, record.participant_id)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._fence_waits[key] = waiter
        try:
            fence = control(
                FENCE,
                record.participant_id,
                to=record.node_id,
                data=str(record.generation).encode(),
            )
            await self.shared.store.publish(session.id, [fence])
            self.shared.metrics.takeovers.inc()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter, _FENCE_WAIT_S)
        finally:
            self._fence_waits.pop(key, None)

    def on_control(self, published: Published, entry: LogEntry) -> None:
        """A control entry published on a session's channel (a fence, or its answer)."""
        if entry.exclude != self.shared.id:
            return  # for another node
        if entry.type == FENCE:
            self.shared.host.spawn(self._fenced(published.session_id, published.node_id, entry))
        elif entry.type == FENCED:
            waiter = self._fence_waits.get((published.session_id, entry.message_id))
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    async def _fenced(self, session_id: str, requester: str, entry: LogEntry) -> None:
        """Another node took over one of our connections: close it, accept nothing more."""
        host = self.shared.host
        session = host.sessions.get(session_id)
        participant = session.participants.get(entry.message_id) if session else None
        generation = int(entry.data or b"0")
        if session is not None and participant is not None and participant.generation <= generation:
            session.drop(participant)  # from now on nothing it sent is accepted
            # Let a batch of its frames already being appended land first, so the new
            # connection's frames come after it in the log.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_FENCE_DRAIN_S), session.lock:
                    pass
            host.spawn(participant.sink.close(_SUPERSEDED, "superseded by a newer connection"))
        answer = control(FENCED, entry.message_id, to=requester)
        with contextlib.suppress(StoreError):
            await self.shared.store.publish(session_id, [answer])
