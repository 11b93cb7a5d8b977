"""Following sessions: every node that has a session loaded hears its committed batches.

Every append batch is published on the session's channel by the Lua script that commits it,
so a frame accepted on node A reaches edges on node B. The follower applies foreign entries
in seq order under the session lock (:meth:`relay.session.Session.receive`: folded,
delivered to this node's participants, and its effects applied as a node that does not own
it: the header's name, the attached client, the end of the session). A seq gap (a lost
message, or a resubscription after an outage) is filled from the log. Batches this node
published itself are ignored: they were delivered when they were committed. A session whose
store write failed is *stale*: it is refolded from the log before anything is judged against
it again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from protocol.errors import StoreError, StoreUnavailableError

from ..recovery import repair_presence
from ..session import Decoded, Session
from ..store.base import AppendResult, LogEntry
from .shared import NodeShared, check_cancelled

if TYPE_CHECKING:
    from ..store.redis import Published, Subscription

__all__ = ["Follow", "Following"]

log = structlog.get_logger("rawp.cluster")


@dataclass(eq=False)
class Follow:
    """One loaded session's subscription state on this node."""

    session: Session
    batches: list[Published] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    idle_since: float | None = None


class Following:
    """This node's subscription, the sessions it follows, and the stale ones."""

    def __init__(self, shared: NodeShared) -> None:
        self.shared = shared
        self.follows: dict[str, Follow] = {}
        self.stale: set[str] = set()
        # Control entries (seq 0) go here: set by the node to its takeover part.
        self.on_control: Callable[[Published, LogEntry], None] = lambda published, entry: None
        self._sub: Subscription | None = None
        self._sub_lock = asyncio.Lock()

    async def subscribe(self) -> asyncio.Task[None]:
        """Subscribe to every channel this node will follow; the dispatch task."""
        self._sub = await self.shared.store.subscribe(own=False)
        return asyncio.get_running_loop().create_task(self._dispatch())

    async def close(self) -> None:
        """Close the subscription (the follow tasks were cancelled)."""
        if self._sub is not None:
            await self._sub.aclose()

    def tasks(self) -> list[asyncio.Task[None]]:
        """The follow tasks, one per followed session."""
        return [f.task for f in self.follows.values() if f.task is not None]

    # --- loading and forgetting -------------------------------------------------------------

    async def follow(self, session: Session) -> None:
        """Subscribe to a session being loaded, then catch up with what its load missed."""
        if self._sub is None:
            return
        follow = Follow(session)
        self.follows[session.id] = follow
        follow.task = asyncio.get_running_loop().create_task(self._follow(follow))
        try:
            async with self._sub_lock:
                await self._sub.add(session.id)
            # appended between the load's read and the subscription: not published to us
            async with session.lock:
                await self.sync(session)
        except BaseException:
            self._drop(session)
            raise

    def unfollow(self, session: Session) -> None:
        """Unsubscribe from a forgotten session (in the background)."""
        shared = self.shared
        if self._drop(session):
            shared.host.spawn(self._unsubscribe(session.id))
            if session.id in shared.holding:
                shared.holding.discard(session.id)
                shared.host.spawn(shared.release_held(session.id))

    def _drop(self, session: Session) -> bool:
        follow = self.follows.get(session.id)
        if follow is None or follow.session is not session:
            return False
        del self.follows[session.id]
        self.stale.discard(session.id)
        self.shared.metrics.stale.set(len(self.stale))
        if follow.task is not None:
            follow.task.cancel()
        return True

    async def _unsubscribe(self, session_id: str) -> None:
        async with self._sub_lock:
            if session_id in self.follows or self._sub is None:
                return  # loaded again meanwhile: keep the channel
            with contextlib.suppress(StoreError):
                await self._sub.remove(session_id)

    # --- hearing batches --------------------------------------------------------------------

    async def _dispatch(self) -> None:
        """Route every published batch to its session's follower (or control handler)."""
        assert self._sub is not None
        while True:
            check_cancelled()
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
                self.on_control(published, entry)
            return
        follow = self.follows.get(published.session_id)
        if follow is None:
            return
        if published.entries and published.node_id == self.shared.store.node_id:
            return  # our own appends were delivered here when they were committed
        follow.batches.append(published)
        follow.wake.set()

    async def _follow(self, follow: Follow) -> None:
        session = follow.session
        while True:
            check_cancelled()
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
            await self.sync(session)
            return
        for entry in entries:
            if entry.seq <= session.head:
                continue
            if entry.seq > session.head + 1:
                self.shared.metrics.gap_fills.inc()
                await self.sync(session, before=entry.seq)
            await self._apply(session, entry)

    async def sync(
        self,
        session: Session,
        before: int | None = None,
        *,
        read: Sequence[LogEntry] | None = None,
    ) -> None:
        """Catch up with the log (caller holds the lock): fold and deliver what we lack.

        ``read``: the log after ``session.head``, already read by the caller (the mutex's
        entry); a stale session refolds from the store all the same."""
        metrics = self.shared.metrics
        if session.id in self.stale:
            # The state may hold frames that were never logged: refold it from scratch.
            self.stale.discard(session.id)
            decoded = await session.rebuild()  # delivers what we lack, stale again on failure
            if decoded is not None and session.id not in self.stale:
                # what the store refused of our presence (nobody sends it again)
                await self._repair_presence(session, decoded)
            metrics.stale.set(len(self.stale))
            if session.id in self.stale:
                raise StoreUnavailableError("the store is unavailable")
            return
        if read is None:
            store = self.shared.store
            read = await store.read(session.id, after_seq=session.head, before_seq=before)
        for entry in read:
            await self._apply(session, entry)

    async def _repair_presence(self, session: Session, decoded: Sequence[Decoded]) -> None:
        try:
            await repair_presence(session, decoded)
        except StoreError:
            self.stale.add(session.id)  # refolded and repaired again at the next sync

    async def _apply(self, session: Session, entry: LogEntry) -> None:
        if entry.seq <= session.head:
            return
        await session.receive(entry)
        self.shared.metrics.foreign.inc()

    async def before_delivery(self, session: Session, results: Sequence[AppendResult]) -> bool:
        """Another node appended between our head and our seqs: deliver those entries first."""
        seqs = [r.seq for r in results if not r.duplicate]
        if not seqs or min(seqs) <= session.head + 1:
            return False
        metrics = self.shared.metrics
        metrics.gap_fills.inc()
        try:
            entries = await self.shared.store.read(
                session.id, after_seq=session.head, before_seq=min(seqs)
            )
        except StoreError:
            self.store_failed(session)
            return True
        for entry in entries:
            await session.receive(entry, fold=False)  # the caller refolds from the log
            metrics.foreign.inc()
        return True

    def store_failed(self, session: Session) -> None:
        """Keep the session (and its connections); refold it once the store answers."""
        shared = self.shared
        if session.id not in self.follows:
            shared.host.forget(session)
            return
        self.stale.add(session.id)
        shared.reconcile = True
        shared.metrics.stale.set(len(self.stale))

    # --- the end of a session on another node --------------------------------------------

    def ended_elsewhere(self, session: Session) -> None:
        """Another node terminated the session: accept nothing more, then close ours 1000."""
        if session.terminated:
            return
        session.end_here()  # a submitter waiting for inbox space returns, the worker ends
        self.shared.host.spawn(self._close_deleted(session))

    async def _close_deleted(self, session: Session) -> None:
        try:
            async with session.lock:  # after whatever holds it now (e.g. an attach) is done
                await session.close_participants("session deleted")
                self.shared.host.forget(session)
        finally:
            session.ended.set()  # a hello that waited for the deletion resolves the id again
