"""Ended is not erased (notes §16.1): archive or purge an ended session, purge old archives.

A session ended by reattach-window expiry (``timeout``) or a fatal error (``error``) is
*archived*: its header records ``ended_at``, ``reason`` and ``deleted_by``, its participants
and deadlines go, and its log stays readable (get, events, SSE replay, export, fork) until the
archive retention passes; attaching closes 4410. An explicit deletion (``master_request``,
``user_request``) purges at once, as does ``DELETE`` on an archived session.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Final, Protocol

import structlog

from protocol import codec
from protocol.errors import ProtocolError, StoreError
from protocol.frames import Deleted

from .config import Settings
from .store.base import LogEntry, SessionHeader, Store

__all__ = [
    "ARCHIVING_REASONS",
    "ArchiveKeeper",
    "end_session_in_store",
    "finish_ending",
    "purge_archives",
]

log = structlog.get_logger("rawp.archive")

ARCHIVING_REASONS: Final = frozenset({"timeout", "error"})
"""Endings that archive the session instead of purging it (notes §16.1)."""

_PURGE_PAGE: Final = 100


async def end_session_in_store(store: Store, session_id: str, reason: str, deleted_by: str) -> None:
    """Archive (expiry, fatal error) or purge (a deletion) an ended session (notes §16.1)."""
    if reason in ARCHIVING_REASONS:
        await store.archive_session(
            session_id,
            ended_at=codec.format_time(codec.now()),
            ended_at_ms=int(time.time() * 1000),
            reason=reason,
            deleted_by=deleted_by,
        )
    else:
        await store.delete_session(session_id)


async def finish_ending(
    store: Store, header: SessionHeader, entries: list[LogEntry]
) -> SessionHeader | None:
    """Finish an ending whose store change was lost (an outage after its ``session.deleted``
    was logged): the reason is read back from that frame. The archived header, or None when
    the ending was a deletion (purged now)."""
    reason, deleted_by = "master_request", "master"
    for entry in reversed(entries):
        if entry.type == "session.deleted" and entry.sender_role == "master":
            with contextlib.suppress(ProtocolError):
                frame = codec.decode(entry.data)
                if isinstance(frame, Deleted):
                    reason, deleted_by = frame.payload.reason, frame.payload.deleted_by
            break
    await end_session_in_store(store, header.session_id, reason, deleted_by)
    return await store.get_session(header.session_id) if reason in ARCHIVING_REASONS else None


class ArchiveKeeper(Protocol):
    """What the purge loop needs of its owner (the hub), so this module stays below it."""

    settings: Settings
    store: Store

    def forget_archived(self, session_id: str) -> None:
        """Drop a purged archive from the owner's cache."""


async def purge_archives(hub: ArchiveKeeper, interval_s: float) -> None:
    """Forever: purge archived sessions older than ``--archive-retention`` (notes §16.1)."""
    retention_ms = int(hub.settings.archive_retention_s * 1000)
    while True:
        with contextlib.suppress(StoreError):
            cutoff = int(time.time() * 1000) - retention_ms
            while True:
                due = await hub.store.archived_before(cutoff, _PURGE_PAGE)
                for session_id in due:
                    hub.forget_archived(session_id)
                    if await hub.store.delete_session(session_id):
                        log.info("archive_purged", session_id=session_id)
                if len(due) < _PURGE_PAGE:
                    break
        await asyncio.sleep(interval_s)
