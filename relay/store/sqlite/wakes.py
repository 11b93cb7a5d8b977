"""The SQLite store's wakes (notes §17.5): the ``wakes`` table and the writer-thread jobs.

One row per revisit request, keyed by (session, wake id): the columns the queries select on
(state, due time, claim, workspace, revisit id) beside the whole record (msgpack). Every job
here runs on the one writer thread, so a claim and the change that names its token are
atomic without further locking.
"""

from __future__ import annotations

import sqlite3
from typing import Final

import msgspec

from ..base import WakeRecord, settled_wake

__all__ = [
    "WAKES_TABLE",
    "any_due",
    "cancel_wake",
    "claim_due_wakes",
    "drop_session_wakes",
    "get_wake",
    "list_wakes",
    "put_wake",
    "release_claims",
    "settle_wake",
    "wakes_seen",
]

WAKES_TABLE: Final = """
CREATE TABLE IF NOT EXISTS wakes (
    session_id TEXT NOT NULL,
    wake_id TEXT NOT NULL,
    revisit_id TEXT NOT NULL,
    workspace TEXT NOT NULL,
    state TEXT NOT NULL,
    due_ms INTEGER,
    claim TEXT,
    record BLOB NOT NULL,
    PRIMARY KEY (session_id, wake_id)
);
CREATE INDEX IF NOT EXISTS wakes_due ON wakes (due_ms) WHERE due_ms IS NOT NULL;
CREATE INDEX IF NOT EXISTS wakes_by_workspace ON wakes (workspace, session_id, wake_id);
"""

_encoder: Final = msgspec.msgpack.Encoder()
_decoder: Final = msgspec.msgpack.Decoder(WakeRecord)
_PUT: Final = (
    "INSERT OR REPLACE INTO wakes (session_id, wake_id, revisit_id, workspace, state, due_ms, "
    "claim, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_SELECT: Final = "SELECT record FROM wakes WHERE session_id = ? AND wake_id = ?"
_DELETE: Final = "DELETE FROM wakes WHERE session_id = ? AND wake_id = ?"


def _row(record: WakeRecord) -> tuple[object, ...]:
    return (
        record.session_id,
        record.wake_id,
        record.revisit_id,
        record.workspace,
        record.state,
        record.due_ms,
        record.claim,
        _encoder.encode(record),
    )


def _decode(data: bytes) -> WakeRecord:
    return _decoder.decode(data)


def put_wake(db: sqlite3.Connection, record: WakeRecord) -> None:
    """Store.put_wake: the new pending record, any other pending one of its revisit gone."""
    cancel_wake(db, record.session_id, record.revisit_id)
    db.execute(_PUT, _row(record))


def cancel_wake(db: sqlite3.Connection, session_id: str, revisit_id: str) -> None:
    """Store.cancel_wake."""
    db.execute(
        "DELETE FROM wakes WHERE session_id = ? AND revisit_id = ? AND state = 'pending'",
        (session_id, revisit_id),
    )


def get_wake(db: sqlite3.Connection, session_id: str, wake_id: str) -> WakeRecord | None:
    """Store.get_wake."""
    row = db.execute(_SELECT, (session_id, wake_id)).fetchone()
    return None if row is None else _decode(row[0])


def any_due(db: sqlite3.Connection, now_ms: int) -> bool:
    """Is any record due by ``now_ms``?"""
    row = db.execute(
        "SELECT 1 FROM wakes WHERE due_ms IS NOT NULL AND due_ms <= ? LIMIT 1", (now_ms,)
    ).fetchone()
    return row is not None


def claim_due_wakes(
    db: sqlite3.Connection, now_ms: int, lease_ms: int, limit: int, token: str
) -> list[WakeRecord]:
    """Store.claim_due_wakes (``token`` + the row's position: one claim token per record)."""
    rows = db.execute(
        "SELECT record FROM wakes WHERE due_ms IS NOT NULL AND due_ms <= ? ORDER BY due_ms LIMIT ?",
        (now_ms, limit),
    ).fetchall()
    claimed = []
    for i, (data,) in enumerate(rows):
        record = msgspec.structs.replace(
            _decode(data), claim=f"{token}.{i}", due_ms=now_ms + lease_ms
        )
        db.execute(_PUT, _row(record))
        claimed.append(record)
    return claimed


def settle_wake(db: sqlite3.Connection, record: WakeRecord, claim: str) -> bool:
    """Store.settle_wake."""
    stored = get_wake(db, record.session_id, record.wake_id)
    if stored is None or stored.claim != claim:
        return False
    new = settled_wake(stored, record)
    if new is None:
        db.execute(_DELETE, (record.session_id, record.wake_id))
    else:
        db.execute(_PUT, _row(new))
    return True


def wakes_seen(db: sqlite3.Connection, session_id: str) -> list[WakeRecord]:
    """Store.wakes_seen."""
    rows = db.execute(
        "SELECT record FROM wakes WHERE session_id = ? AND state = 'due' ORDER BY wake_id",
        (session_id,),
    ).fetchall()
    seen = [_decode(data) for (data,) in rows]
    for record in seen:
        if record.webhook == "pending":
            db.execute(_PUT, _row(msgspec.structs.replace(record, state="done")))
        else:
            db.execute(_DELETE, (session_id, record.wake_id))
    return seen


def list_wakes(
    db: sqlite3.Connection,
    workspace: str,
    due_only: bool,
    after: tuple[str, str] | None,
    limit: int,
) -> list[WakeRecord]:
    """Store.list_wakes."""
    states = "('due')" if due_only else "('pending', 'due')"
    low = after or ("", "")
    rows = db.execute(
        f"SELECT record FROM wakes WHERE workspace = ? AND state IN {states} "
        "AND (session_id, wake_id) > (?, ?) ORDER BY session_id, wake_id LIMIT ?",
        (workspace, low[0], low[1], limit),
    ).fetchall()
    return [_decode(data) for (data,) in rows]


def drop_session_wakes(db: sqlite3.Connection, session_id: str) -> None:
    """An ended or deleted session is never woken (notes §17.5)."""
    db.execute("DELETE FROM wakes WHERE session_id = ?", (session_id,))


def release_claims(db: sqlite3.Connection) -> None:
    """Store.release_wake_claims: every claim this file's previous owner held, due now."""
    rows = db.execute("SELECT record FROM wakes WHERE claim IS NOT NULL").fetchall()
    for (data,) in rows:
        db.execute(_PUT, _row(msgspec.structs.replace(_decode(data), claim=None, due_ms=0)))
