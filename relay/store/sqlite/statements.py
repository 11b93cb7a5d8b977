"""The SQL statements of the SQLite store's reads and writes (the tables are in schema.py)."""

from __future__ import annotations

from typing import Final

__all__ = [
    "ADD_TOMBSTONE",
    "ARCHIVE",
    "ARCHIVED_BEFORE",
    "CLEAR_DEADLINE",
    "COPY_PREFIX",
    "DELETE_DEADLINES",
    "DELETE_LOG",
    "DELETE_PARTICIPANTS",
    "DELETE_RECEIVED",
    "DELETE_SESSION",
    "DROP_TOMBSTONE",
    "DUE_DEADLINES",
    "GET_CREDENTIAL",
    "GET_PARTICIPANT",
    "GET_RECEIVED",
    "HAS_TOMBSTONE",
    "INSERT_ENTRY",
    "INSERT_SESSION",
    "LIST_HEADERS",
    "LIST_KEYS",
    "LIST_PARTICIPANTS",
    "PREFIX_BOUNDS",
    "PUT_CREDENTIAL",
    "PUT_PARTICIPANT",
    "PUT_RECEIVED",
    "READ_RANGE",
    "RECOVERY_CANDIDATES",
    "REMOVE_PARTICIPANT",
    "RENAME",
    "SELECT_HEADER",
    "SELECT_POSITION",
    "SEQ_OF_MESSAGE",
    "SET_DEADLINE",
    "TRIM_LOG",
    "UPDATE_AFTER_APPEND",
]

_HEADER_COLUMNS: Final = (
    "session_id, workspace, name, agent_id, created_at, epoch, format_version, "
    "parent_session_id, seed_length, revision, ended_at, ended_at_ms, reason, deleted_by, "
    "vault_ids"
)
INSERT_SESSION: Final = (
    f"INSERT OR IGNORE INTO sessions ({_HEADER_COLUMNS}, head, first_seq) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
SELECT_HEADER: Final = f"SELECT {_HEADER_COLUMNS} FROM sessions WHERE session_id = ?"
LIST_HEADERS: Final = (
    f"SELECT {_HEADER_COLUMNS} FROM sessions WHERE workspace = ? AND session_id > ? "
    "ORDER BY session_id LIMIT ?"
)
SELECT_POSITION: Final = "SELECT head, first_seq, format_version FROM sessions WHERE session_id = ?"
UPDATE_AFTER_APPEND: Final = (
    "UPDATE sessions SET head = ?, first_seq = ?, revision = revision + ?, "
    "open_turn = coalesce(?, open_turn) WHERE session_id = ?"
)
RENAME: Final = "UPDATE sessions SET name = ?, revision = revision + 1 WHERE session_id = ?"
ARCHIVE: Final = (
    "UPDATE sessions SET ended_at = ?, ended_at_ms = ?, reason = ?, deleted_by = ?, "
    "open_turn = 0, revision = revision + 1 WHERE session_id = ?"
)
ARCHIVED_BEFORE: Final = (
    "SELECT session_id FROM sessions WHERE ended_at_ms IS NOT NULL AND ended_at_ms < ? "
    "ORDER BY ended_at_ms LIMIT ?"
)
RECOVERY_CANDIDATES: Final = (
    "SELECT session_id FROM sessions WHERE open_turn = 1 AND ended_at IS NULL "
    "UNION SELECT session_id FROM participants WHERE attached = 1"
)
DELETE_SESSION: Final = "DELETE FROM sessions WHERE session_id = ?"
DELETE_LOG: Final = "DELETE FROM log WHERE session_id = ?"
DELETE_PARTICIPANTS: Final = "DELETE FROM participants WHERE session_id = ?"
DELETE_DEADLINES: Final = "DELETE FROM deadlines WHERE session_id = ?"
ADD_TOMBSTONE: Final = "INSERT OR IGNORE INTO tombstones (session_id) VALUES (?)"
DROP_TOMBSTONE: Final = "DELETE FROM tombstones WHERE session_id = ?"
HAS_TOMBSTONE: Final = "SELECT 1 FROM tombstones WHERE session_id = ?"
INSERT_ENTRY: Final = (
    "INSERT OR IGNORE INTO log (session_id, seq, type, time_ms, message_id, data, sender_id, "
    "sender_role, exclude, edges_only) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
SEQ_OF_MESSAGE: Final = "SELECT seq FROM log WHERE session_id = ? AND message_id = ?"
PUT_RECEIVED: Final = (
    "INSERT OR REPLACE INTO received (session_id, participant_id, message_id) VALUES (?, ?, ?)"
)
GET_RECEIVED: Final = "SELECT message_id FROM received WHERE session_id = ? AND participant_id = ?"
DELETE_RECEIVED: Final = "DELETE FROM received WHERE session_id = ?"
TRIM_LOG: Final = "DELETE FROM log WHERE session_id = ? AND seq < ?"
_ENTRY_COLUMNS: Final = "seq, message_id, type, data, sender_id, sender_role, exclude, edges_only"
READ_RANGE: Final = (
    f"SELECT {_ENTRY_COLUMNS} FROM log WHERE session_id = ? AND seq > ? AND seq < ? "
    "ORDER BY seq {order} LIMIT ?"
)
COPY_PREFIX: Final = (
    "INSERT INTO log (session_id, seq, type, time_ms, message_id, data, sender_id, sender_role, "
    "exclude, edges_only) SELECT ?, seq, type, time_ms, message_id, data, sender_id, "
    "sender_role, exclude, edges_only FROM log WHERE session_id = ? AND seq <= ?"
)
PREFIX_BOUNDS: Final = "SELECT min(seq), max(seq) FROM log WHERE session_id = ?"
PUT_PARTICIPANT: Final = (
    "INSERT OR REPLACE INTO participants (session_id, participant_id, attached, record) "
    "SELECT ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM sessions WHERE session_id = ?)"
)
GET_PARTICIPANT: Final = (
    "SELECT record FROM participants WHERE session_id = ? AND participant_id = ?"
)
LIST_PARTICIPANTS: Final = (
    "SELECT record FROM participants WHERE session_id = ? ORDER BY participant_id"
)
REMOVE_PARTICIPANT: Final = "DELETE FROM participants WHERE session_id = ? AND participant_id = ?"
SET_DEADLINE: Final = (
    "INSERT OR REPLACE INTO deadlines (session_id, participant_id, due_ms) VALUES (?, ?, ?)"
)
CLEAR_DEADLINE: Final = "DELETE FROM deadlines WHERE session_id = ? AND participant_id = ?"
DUE_DEADLINES: Final = (
    "SELECT session_id, participant_id, due_ms FROM deadlines WHERE due_ms <= ? "
    "ORDER BY due_ms LIMIT ?"
)
PUT_CREDENTIAL: Final = "INSERT OR REPLACE INTO credentials (digest, record) VALUES (?, ?)"
GET_CREDENTIAL: Final = "SELECT record FROM credentials WHERE digest = ?"
# The msgpack of ``"kind": "key"`` (a record's map entry): keys without decoding every token.
LIST_KEYS: Final = "SELECT record FROM credentials WHERE instr(record, X'a46b696e64a36b6579') > 0"
