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
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Final

import structlog

from protocol.errors import StoreError, StoreUnavailableError
from protocol.finalize import finalize

if TYPE_CHECKING:
    from .hub import Hub

__all__ = ["recover_after_restart"]

log = structlog.get_logger("rawp.restart")

_CONCURRENCY: Final = 32


async def recover_after_restart(hub: Hub) -> int:
    """Recover every candidate session; returns how many were finalized."""
    candidates = await hub.store.recovery_candidates()
    # Several at once: their writes share the store's group-committed transactions.
    slots = asyncio.Semaphore(_CONCURRENCY)

    async def recover(session_id: str) -> bool:
        async with slots:
            try:
                return await _recover(hub, session_id)
            except StoreError:
                log.exception("restart_recovery_failed", session_id=session_id)
                return False

    finalized = sum(await asyncio.gather(*(recover(s) for s in candidates)))
    if candidates:
        log.info("restart_recovery", candidates=len(candidates), finalized=finalized)
    return finalized


async def _recover(hub: Hub, session_id: str) -> bool:
    session = await hub.open(session_id)
    if session is None or session.terminated:
        return False
    store = hub.store
    async with session.lock:
        now_ms = int(time.time() * 1000)
        for record in await store.list_participants(session_id):
            if not record.attached:
                continue  # nobody is attached before this process listens
            record.attached = False
            record.detached_at_ms = now_ms
            if record.role == "client":
                record.last_received_message_id = await store.last_received(
                    session_id, record.participant_id
                )
            await store.put_participant(session_id, record)
            await store.set_deadline(hub.deadline_for(session_id, record.participant_id))
            presence = session._presence(record, "detached")
            if not await session.append_master([presence], exclude=record.participant_id):
                raise StoreUnavailableError("restart recovery could not log the presence")
        synthetic = finalize(session.state, session_id=session_id, sender=hub.master_sender)
        if not synthetic:
            return False
        if not await session.append_master(synthetic):
            raise StoreUnavailableError("restart recovery could not log the finalization")
    log.info("session_finalized_at_start", session_id=session_id, frames=len(synthetic))
    return True
