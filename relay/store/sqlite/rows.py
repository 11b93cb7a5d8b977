"""The SQLite store's rows and Python values, both ways: headers, entries, records."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from ..base import Credential, Deadline, LogEntry, ParticipantRecord, SessionHeader

__all__ = [
    "deadline_row",
    "decode_credential",
    "decode_participant",
    "encode_record",
    "entry_of",
    "header_of",
    "header_row",
    "participant_row",
]

_encoder: Final = msgspec.msgpack.Encoder()
_participant_decoder: Final = msgspec.msgpack.Decoder(ParticipantRecord)
_credential_decoder: Final = msgspec.msgpack.Decoder(Credential)


def header_row(h: SessionHeader, *, head: int, first_seq: int) -> tuple[Any, ...]:
    """``INSERT_SESSION``'s parameters: the header's columns, then the log's head and first seq."""
    return (
        h.session_id, h.workspace, h.name, h.agent_id, h.created_at, h.epoch,
        h.format_version, h.parent_session_id, h.seed_length, h.revision,
        h.ended_at, h.ended_at_ms, h.reason, h.deleted_by,
        json.dumps(h.vault_ids) if h.vault_ids else None, head, first_seq,
    )  # fmt: skip


def header_of(row: Sequence[Any]) -> SessionHeader:
    """A ``sessions`` row (``SELECT_HEADER``'s columns) as a header."""
    return SessionHeader(
        session_id=row[0],
        workspace=row[1],
        name=row[2],
        agent_id=row[3],
        created_at=row[4],
        epoch=row[5],
        format_version=row[6],
        parent_session_id=row[7],
        seed_length=row[8],
        revision=row[9],
        ended_at=row[10],
        ended_at_ms=row[11],
        reason=row[12],
        deleted_by=row[13],
        vault_ids=json.loads(row[14]) if row[14] else [],
    )


def entry_of(row: Sequence[Any]) -> LogEntry:
    """A ``log`` row (``READ_RANGE``'s columns) as an entry."""
    return LogEntry(
        seq=row[0],
        message_id=row[1],
        type=row[2],
        data=bytes(row[3]),
        sender_id=row[4],
        sender_role=row[5],
        exclude=row[6],
        edges_only=bool(row[7]),
    )


def encode_record(record: ParticipantRecord | Credential) -> bytes:
    """The ``record`` column of a participant or a credential (msgpack)."""
    return _encoder.encode(record)


def participant_row(session_id: str, record: ParticipantRecord) -> tuple[Any, ...]:
    """The arguments of ``PUT_PARTICIPANT`` for ``record`` (the session id twice: the row's,
    and the one that must exist)."""
    packed = encode_record(record)
    return (session_id, record.participant_id, int(record.attached), packed, session_id)


def deadline_row(deadline: Deadline) -> tuple[str, str, int]:
    """The arguments of ``SET_DEADLINE`` for ``deadline``."""
    return (deadline.session_id, deadline.participant_id, deadline.due_ms)


def decode_participant(data: bytes) -> ParticipantRecord:
    """A ``participants.record`` column as the record."""
    return _participant_decoder.decode(data)


def decode_credential(data: bytes) -> Credential:
    """A ``credentials.record`` column as the credential."""
    return _credential_decoder.decode(data)
