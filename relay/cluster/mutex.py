"""The session mutex: one node at a time changes who a session's client is.

Everything that changes who a session's client is, and the finalization that follows from
it, runs under the session's cross-node mutex (a token key in Redis with a TTL): attach,
detach, expiry, delete and crash recovery. Each holder first catches up with the log, so
§7.8.1 finalization is computed on the current state and an already finalized state yields
no frames: finalization happens exactly once however many nodes notice the loss.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable
from typing import TYPE_CHECKING, Final

from protocol.errors import StoreError, StoreUnavailableError

from ..session import Session
from ..store.base import ParticipantRecord
from .following import Following
from .shared import NodeShared, check_cancelled

if TYPE_CHECKING:
    from ..store.redis import Entered

__all__ = ["MUTEX_TTL_MS", "SessionMutex"]

MUTEX_TTL_MS: Final = 3000  # a crashed holder blocks its session at most this long
_MUTEX_WAIT_S: Final = 4.0  # > the TTL: a waiter always outlasts a dead holder
# How many holders in a row of this node may take a session's mutex over from the one before
# while its release is on its way: then the release is waited for, so another node waiting
# for the mutex gets its turn within a few of our holds (a reconnect storm on one node holds
# it hundreds of times in a row).
_TAKEOVERS_IN_A_ROW: Final = 16


class SessionMutex:
    """This node's holds on sessions' cross-node mutexes."""

    def __init__(self, shared: NodeShared, following: Following) -> None:
        self.shared = shared
        self.following = following
        # session id -> (our token, how many holders before it took the mutex over in a row):
        # one holder per session; in _released, the last one whose release is on its way
        # (the next holder here takes the mutex over from it instead of waiting)
        self._tokens: dict[str, tuple[str, int]] = {}
        self._released: dict[str, tuple[str, int]] = {}

    def holds(self, session_id: str) -> bool:
        """Does this node hold the session's mutex now?"""
        return session_id in self._tokens

    @contextlib.asynccontextmanager
    async def guard(
        self,
        session: Session,
        participant_id: str = "",
        *,
        hold_again: bool = False,
        page: tuple[int, int] | None = None,
        hand_over: bool = False,
    ) -> AsyncIterator[Entered]:
        """Hold the session's mutex, caught up with the log (caller holds ``session.lock``);
        yields what :meth:`enter` read. ``hand_over``: see :meth:`release`."""
        entered = await self.enter(session, participant_id, hold_again=hold_again, page=page)
        try:
            yield entered
        finally:
            await self.release(session, hand_over=hand_over)

    async def enter(
        self,
        session: Session,
        participant_id: str = "",
        *,
        hold_again: bool = False,
        page: tuple[int, int] | None = None,
    ) -> Entered:
        """Take the mutex (waiting out a dead holder's TTL), hold the session, catch up.

        Returns the session's participants as the store has them now (``participant_id``'s
        own record among them): under the mutex only a node's death changes them; and with
        ``page`` (after seq, limit) that read of the log, made in the same round trip.
        ``hold_again``: tell the store we hold the session even when we believe it knows
        (an attach: a sweep or a release in flight may have taken it out)."""
        shared = self.shared
        store = shared.store
        token = secrets.token_hex(8)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _MUTEX_WAIT_S
        delay = 0.002
        before, in_a_row = self._released.get(session.id, ("", 0))
        if in_a_row >= _TAKEOVERS_IN_A_ROW:
            before, in_a_row = "", 0  # wait for that release: another node's turn first
        # Held before anything is written under the mutex (an expiry, a detach, a recovery,
        # an attach's record): if we are declared dead meanwhile, the sweep fences this
        # session too, so a paused node's late write cannot land after it. Sent beside the
        # mutex's round trip, not after it.
        holding = asyncio.ensure_future(shared.hold(session.id, again=hold_again))
        try:
            while True:
                # The mutex, the log after what we hold and the participants: one round trip
                # (a session to refold from scratch reads its log after).
                stale = session.id in self.following.stale
                entered = await store.enter_session(
                    session.id,
                    token,
                    MUTEX_TTL_MS,
                    participant_id=participant_id,
                    after_seq=None if stale else session.head,
                    page_after=None if page is None else page[0],
                    page_limit=0 if page is None else page[1],
                    released=before,
                )
                if entered is not None:
                    break
                check_cancelled()
                if loop.time() > deadline:
                    raise StoreUnavailableError(f"session {session.id}'s mutex stays taken")
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.05)
            self._tokens[session.id] = (token, in_a_row + 1 if before else 0)
            await holding
            await self.following.sync(session, read=entered.entries)
            self.refresh_client(session, entered.view.clients)
        except StoreError as exc:
            await self.release(session)
            self.following.store_failed(session)
            if isinstance(exc, StoreUnavailableError):
                raise
            raise StoreUnavailableError(str(exc)) from exc
        finally:
            if not holding.done():
                holding.cancel()
            elif not holding.cancelled():
                holding.exception()  # retrieved: a failure is the enter's, raised above
        return entered

    async def release(self, session: Session, *, hand_over: bool = False) -> None:
        """Let go of the mutex; forget our hold on a session we no longer serve.

        ``hand_over`` (an attach, a detach: what a reconnect storm does hundreds of times in
        a row): the release is sent, not waited for, and this node's next holder may take the
        mutex over meanwhile — one round trip less under the session's lock; another node
        waits for it to land. Otherwise the mutex is free when this returns."""
        shared = self.shared
        held = self._tokens.pop(session.id, None)
        if held is not None:
            token = held[0]
            release = shared.store.unlock_soon(session.id, token)
            if hand_over and not shared.host.shutting_down:
                self._released[session.id] = held
                shared.host.spawn(self._release(session.id, token, release))
            else:
                with contextlib.suppress(StoreError):
                    await release
        if (
            session.id in shared.holding
            and not session.participants
            and session.id not in self.following.stale
            # shutting down, clients are detached without finalization: the sweep of this
            # node, once retired, must still find the session (§7.8.2)
            and not shared.host.shutting_down
        ):
            await shared.release_held(session.id)

    async def _release(self, session_id: str, token: str, release: Awaitable[None]) -> None:
        """Release ``token``'s mutex; then our next holder has nothing to take over."""
        try:
            with contextlib.suppress(StoreError):
                await release
        finally:
            if self._released.get(session_id, ("",))[0] == token:
                del self._released[session_id]

    def refresh_client(self, session: Session, clients: list[ParticipantRecord]) -> None:
        """``session.client_id`` as the store has it (another node may have changed it):
        ``clients``, the session's client records, just read under the mutex."""
        ranked = sorted(clients, key=lambda r: not r.attached)
        session.client_id = ranked[0].participant_id if ranked else None
