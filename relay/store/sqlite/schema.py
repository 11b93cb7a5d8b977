"""The SQLite store's layout: the tables (DDL), the format version and its upgrades.

``log`` holds one row per entry (session id, seq, type, time, message id, the stored bytes),
with a unique (session, message id) index for dedupe; ``sessions`` is the header beside the log
(format version, parent, seed length, created/ended, reason, revision, plus head/first seq and
an *open turn* marker so start-up finds the sessions to recover without reading any log);
participants, deadlines and credentials have tables of their own, so tokens, keys and reattach
windows survive a restart. ``received`` keeps, per session and sender, the message id
``welcome.received`` reports (written by each append, never trimmed), so a resumed attach reads
one row instead of scanning the log. A database of format 1 (before ``received``) is upgraded
in place when opened (:func:`upgrade_to_2`).
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Final

from .statements import PUT_RECEIVED
from .wakes import WAKES_TABLE

__all__ = [
    "APPLICATION_ID",
    "DB_FORMAT",
    "PROBE_WRITE",
    "RECEIVED_TABLE",
    "SCHEMA",
    "TABLES",
    "TABLES_V1",
    "add_vault_ids",
    "add_wakes",
    "create_schema",
    "upgrade_to_2",
]

APPLICATION_ID: Final = 0x52415750  # "RAWP" in the SQLite header's application_id field
DB_FORMAT: Final = 2
"""Version of the database layout (``PRAGMA user_version``); a larger one is refused."""
PROBE_WRITE: Final = f"PRAGMA user_version = {DB_FORMAT}"  # rewrites the header page

# Format 2: what welcome.received reports, per session and sender (format 1 had no table).
RECEIVED_TABLE: Final = """
CREATE TABLE IF NOT EXISTS received (
    session_id TEXT NOT NULL,
    participant_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    PRIMARY KEY (session_id, participant_id)
) WITHOUT ROWID;
"""
SCHEMA: Final = (
    """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    workspace TEXT NOT NULL,
    name TEXT NOT NULL,
    agent_id TEXT,
    created_at TEXT NOT NULL,
    epoch TEXT NOT NULL,
    format_version INTEGER NOT NULL,
    parent_session_id TEXT,
    seed_length INTEGER NOT NULL,
    revision INTEGER NOT NULL,
    ended_at TEXT,
    ended_at_ms INTEGER,
    reason TEXT,
    deleted_by TEXT,
    vault_ids TEXT,
    head INTEGER NOT NULL DEFAULT 0,
    first_seq INTEGER NOT NULL DEFAULT 1,
    open_turn INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS sessions_by_workspace ON sessions (workspace, session_id);
CREATE INDEX IF NOT EXISTS sessions_archived ON sessions (ended_at_ms)
    WHERE ended_at_ms IS NOT NULL;
CREATE INDEX IF NOT EXISTS sessions_open_turn ON sessions (open_turn) WHERE open_turn = 1;
CREATE TABLE IF NOT EXISTS log (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    time_ms INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    data BLOB NOT NULL,
    sender_id TEXT NOT NULL,
    sender_role TEXT NOT NULL,
    exclude TEXT,
    edges_only INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE UNIQUE INDEX IF NOT EXISTS log_message_id ON log (session_id, message_id);
CREATE TABLE IF NOT EXISTS tombstones (session_id TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS participants (
    session_id TEXT NOT NULL,
    participant_id TEXT NOT NULL,
    attached INTEGER NOT NULL,
    record BLOB NOT NULL,
    PRIMARY KEY (session_id, participant_id)
);
CREATE INDEX IF NOT EXISTS participants_attached ON participants (attached) WHERE attached = 1;
CREATE TABLE IF NOT EXISTS deadlines (
    session_id TEXT NOT NULL,
    participant_id TEXT NOT NULL,
    due_ms INTEGER NOT NULL,
    PRIMARY KEY (session_id, participant_id)
);
CREATE INDEX IF NOT EXISTS deadlines_due ON deadlines (due_ms);
CREATE TABLE IF NOT EXISTS credentials (digest TEXT PRIMARY KEY, record BLOB NOT NULL);
"""
    + RECEIVED_TABLE
    + WAKES_TABLE
)
TABLES_V1: Final = frozenset(
    {"sessions", "log", "tombstones", "participants", "deadlines", "credentials"}
)
TABLES: Final = TABLES_V1 | {"received"}


def create_schema(db: sqlite3.Connection) -> None:
    """Make a new, empty database a RAWP one of the current format, in one transaction."""
    db.executescript(
        f"BEGIN; {SCHEMA} PRAGMA application_id = {APPLICATION_ID}; "
        f"PRAGMA user_version = {DB_FORMAT}; COMMIT;"
    )


def upgrade_to_2(db: sqlite3.Connection) -> None:
    """Format 1 → 2 in one transaction: the ``received`` table, filled from the log by the
    rule :meth:`Store.last_received` states (the last frame of the sender's, or the last
    frame inside its last history that kept any)."""
    from protocol import codec  # only here: the store reads no frame on its hot paths
    from protocol.errors import ProtocolError
    from protocol.frames import History

    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute(RECEIVED_TABLE)
        received: dict[tuple[str, str], str] = {}
        rows = db.execute(
            "SELECT session_id, sender_id, type, message_id, data FROM log "
            "WHERE sender_role != 'master' ORDER BY session_id, seq"
        )
        for session_id, sender_id, kind, message_id, data in rows:
            got: str | None = message_id
            if kind == "session.history":
                got = None
                with contextlib.suppress(ProtocolError):
                    frame = codec.decode(bytes(data))
                    if isinstance(frame, History) and frame.payload.frames:
                        got = codec.decode(bytes(frame.payload.frames[-1])).message_id
            if got is not None:
                received[session_id, sender_id] = got
        db.executemany(PUT_RECEIVED, [(s, p, m) for (s, p), m in received.items()])
        db.execute(f"PRAGMA user_version = {DB_FORMAT}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def add_vault_ids(db: sqlite3.Connection) -> None:
    """The ``sessions.vault_ids`` column (JSON list), added to a file that lacks it.

    An added nullable column is no new format: earlier builds read the file as before (they
    leave the column NULL in what they write), so the file's format number stays.
    """
    columns = {row[1] for row in db.execute("PRAGMA table_info(sessions)")}
    if "vault_ids" not in columns:
        db.execute("ALTER TABLE sessions ADD COLUMN vault_ids TEXT")


def add_wakes(db: sqlite3.Connection) -> None:
    """The ``wakes`` table (notes §17.5), added to a file that lacks it. A new table is no new
    format: an earlier build never reads it (it just wakes nobody)."""
    db.executescript(WAKES_TABLE)
