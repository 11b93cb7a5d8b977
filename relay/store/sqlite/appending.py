"""An append to the SQLite store's log, as the writer thread applies it (seqs, dedupe, trim)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import Final

from protocol.errors import SessionMissing

from ..base import FORMAT_VERSION, AppendResult, NewEntry, newer_format, received_of
from .statements import (
    INSERT_ENTRY,
    PUT_RECEIVED,
    SELECT_POSITION,
    SEQ_OF_MESSAGE,
    TRIM_LOG,
    UPDATE_AFTER_APPEND,
)

__all__ = ["append_entries"]

# Frame types that move the open-turn marker; a history may reopen a turn (unfinalization),
# so it sets the marker too: recovery folds the state and finds out (a marker, not a verdict).
_OPENS_TURN: Final = frozenset({"session.turn.start", "session.history"})
_CLOSES_TURN: Final = frozenset({"session.turn.end"})


def append_entries(
    db: sqlite3.Connection,
    session_id: str,
    entries: Sequence[NewEntry],
    retention: int | None,
) -> list[AppendResult]:
    """On the writer thread, inside the batch's transaction: seqs, dedupe, rows, trim."""
    position = db.execute(SELECT_POSITION, (session_id,)).fetchone()
    if position is None:
        raise SessionMissing(session_id)
    head, first, version = int(position[0]), int(position[1]), int(position[2])
    if version > FORMAT_VERSION:
        raise newer_format(session_id, version)
    now_ms = int(time.time() * 1000)
    results: list[AppendResult] = []
    received: dict[str, str] = {}  # sender id → what welcome.received reports, once logged
    added = 0
    open_turn: int | None = None
    for e in entries:
        seq = head + 1
        row = (
            session_id, seq, e.type, now_ms, e.message_id, b"%s%d%s" % (e.head, seq, e.tail),
            e.sender_id, e.sender_role, e.exclude, int(e.edges_only),
        )  # fmt: skip
        if db.execute(INSERT_ENTRY, row).rowcount == 0:  # the (session, message id) index
            dup = db.execute(SEQ_OF_MESSAGE, (session_id, e.message_id)).fetchone()
            results.append(AppendResult(seq=int(dup[0]), duplicate=True))
            continue
        head = seq
        added += 1
        results.append(AppendResult(seq=seq))
        got = received_of(e)
        if got is not None:
            received[e.sender_id] = got
        if e.type in _OPENS_TURN:
            open_turn = 1
        elif e.type in _CLOSES_TURN:
            open_turn = 0
    if retention is not None and head - first + 1 > retention:
        first = head - retention + 1
        db.execute(TRIM_LOG, (session_id, first))
    db.execute(UPDATE_AFTER_APPEND, (head, first, added, open_turn, session_id))
    if received:
        db.executemany(PUT_RECEIVED, [(session_id, p, m) for p, m in received.items()])
    return results
