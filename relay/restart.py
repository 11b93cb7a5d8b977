"""Restart recovery of a store this process owns alone (notes §8, §16.2; seed 004).

When ``rawp serve`` starts on a database it owns (SQLite), the previous owner may have died
(``kill -9``, power loss) or shut down while clients were attached. Before it listens, for each
session the store names as a candidate (:meth:`~relay.store.base.Store.recovery_candidates`:
an *open turn* marker or participants recorded as attached, kept in the header and
participant tables, so no log is read for the others):

1. participants still recorded as attached are marked detached, their reattach-window
   deadlines armed and ``session.presence detached`` logged;
2. a log that ends inside a turn is finalized once (§7.8.2 "app restart"): the §7.8.1
   synthetic frames are appended, ``metadata.synthetic: true``. The client's
   ``welcome.received`` is recomputed from the log (the dead process kept it in memory).

Exactly once: the synthetic ``session.turn.end`` clears the marker, and a state that is
already final yields no frames. The client reattaching within the window with its
``session.history`` unfinalizes as after any disconnect (§7.8.3).

The same recovery runs whenever the sole owner loads a session (:func:`recover_loaded`): after
a store write failed, this process unloads the session and closes its connections 1013, and
the records they leave are recovered when it is loaded again (docs/protocol.md §12).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, Protocol

import structlog

from protocol.errors import StoreError, StoreUnavailableError
from protocol.finalize import finalize
from protocol.frames import PresenceChange

from .session import deadline_again, logged_roster, presence_change

if TYPE_CHECKING:
    from protocol.frames import Sender

    from .session import Decoded, Session
    from .store.base import Deadline, Store


class RecoveringHost(Protocol):
    """What restart recovery needs of its owner (the hub), so this module stays below it."""

    store: Store
    master_sender: Sender

    async def open(self, session_id: str) -> Session | None:
        """The session, folded from the store (and recovered: :func:`recover_loaded`), or
        None."""

    def deadline_for(self, session_id: str, participant_id: str) -> Deadline:
        """The reattach deadline of a participant detached now."""


__all__ = ["RecoveringHost", "recover_after_restart", "recover_loaded"]

log = structlog.get_logger("rawp.restart")

_CONCURRENCY: Final = 32


async def recover_after_restart(hub: RecoveringHost) -> int:
    """Load every candidate session, which recovers it (:func:`recover_loaded`); returns how
    many were loaded."""
    candidates = await hub.store.recovery_candidates()
    # Several at once: their writes share the store's group-committed transactions.
    slots = asyncio.Semaphore(_CONCURRENCY)

    async def recover(session_id: str) -> bool:
        async with slots:
            try:
                return await hub.open(session_id) is not None
            except StoreError:
                log.exception("restart_recovery_failed", session_id=session_id)
                return False

    loaded = sum(await asyncio.gather(*(recover(s) for s in candidates)))
    if candidates:
        log.info("restart_recovery", candidates=len(candidates), loaded=loaded)
    return loaded


async def recover_loaded(hub: RecoveringHost, session: Session, decoded: Sequence[Decoded]) -> bool:
    """Recover a session just loaded by the store's sole owner from its log, ``decoded``
    (:func:`~relay.session.decode_log`), or a fork just made; True if it was finalized.

    Nothing can be attached to a session this process has not loaded yet, so a record the
    store still marks as attached was left by a connection that is gone: this process's
    predecessor (a restart), or this process itself before a store write failed and the
    session was unloaded with its connections (docs/protocol.md §12). Each is marked detached
    and its deadline armed. Then the log's presence is brought to what the records say, in one
    coalesced ``session.presence``: ``detached`` for those, and for a participant the log
    still shows attached though its record says detached; ``expired`` for one the log shows
    with no record left (a presence the unloaded session had not logged yet). Every detached
    record's deadline is armed again, due when it first was. A log that ends inside a turn
    is finalized (§7.8.2). Loading again logs nothing more.
    """
    if session.terminated:
        return False
    store = hub.store
    session_id = session.id
    logged = logged_roster(decoded)
    async with session.lock:
        now_ms = int(time.time() * 1000)
        changes = []
        records = await store.list_participants(session_id)
        for record in records:
            if record.participant_id in session.participants:
                continue  # attached here now (a retried recovery): nothing to recover
            if not record.attached:
                # Its deadline again, due when it first was: the write that armed it may have
                # failed, or an expiry claimed it and lost its session to an unload.
                armed = hub.deadline_for(session_id, record.participant_id)
                await store.set_deadline(deadline_again(armed, record, now_ms))
                if (seen := logged.get(record.participant_id)) and seen.state == "attached":
                    changes.append(presence_change(record, "detached"))
                continue
            record.attached = False
            record.detached_at_ms = now_ms
            if record.role == "client":
                record.last_received_message_id = await store.last_received(
                    session_id, record.participant_id
                )
            await store.put_participant(session_id, record)
            await store.set_deadline(hub.deadline_for(session_id, record.participant_id))
            changes.append(presence_change(record, "detached"))
        kept = {record.participant_id for record in records}
        for participant_id, seen in logged.items():
            if participant_id not in kept:
                changes.append(
                    PresenceChange(participant_id=participant_id, role=seen.role, state="expired")
                )
        # one coalesced frame for all of them (docs/protocol.md §5 item 11)
        if not await session.log_presence(changes):
            raise StoreUnavailableError("recovery could not log the presence")
        synthetic = finalize(session.state, session_id=session_id, sender=hub.master_sender)
        if not synthetic:
            return False
        if not await session.append_master(synthetic):
            raise StoreUnavailableError("recovery could not log the finalization")
    log.info("session_finalized_on_load", session_id=session_id, frames=len(synthetic))
    return True
