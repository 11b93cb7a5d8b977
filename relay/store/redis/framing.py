"""msgpack framing of the redis store: what the scripts are sent and what Redis hands back.

The append script assembles each stored entry (LogEntry's msgpack array) from pieces packed
here, so Lua never decodes a client's bytes: :func:`pack_batch` is the one place that knows
that layout on this side, scripts/append.lua on the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from ..base import (
    Credential,
    LogEntry,
    NewEntry,
    ParticipantRecord,
    SessionHeader,
    newer_format,
)

__all__ = [
    "LAYOUT_VERSION",
    "AttachView",
    "array_header",
    "credential_dec",
    "encode",
    "entry_dec",
    "foreign_header",
    "header_args",
    "header_from",
    "member_dec",
    "pack_batch",
    "pairs",
    "participant_dec",
    "published_dec",
    "received_id",
    "stamped",
    "str_header",
    "text",
]

# scripts/append.lua assembles LogEntry's array by position: fail at import, not at read, if
# it changes.
if LogEntry.__struct_fields__ != (
    "seq",
    "message_id",
    "type",
    "data",
    "sender_id",
    "sender_role",
    "exclude",
    "edges_only",
) or NewEntry.__struct_fields__[:2] != ("message_id", "type"):
    raise ImportError("relay.store.redis: LogEntry layout changed; update scripts/append.lua")

LAYOUT_VERSION: Final = 2
"""The newest session layout (``v`` in the header hash, keys.py) this build reads and writes:
1 is the base format; 2 adds the attached index. A session of a newer layout is refused
"upgrade" like a newer format."""

_enc = msgspec.msgpack.Encoder()
encode: Final = _enc.encode
entry_dec: Final = msgspec.msgpack.Decoder(LogEntry)
published_dec: Final = msgspec.msgpack.Decoder(tuple[str, list[LogEntry]])
header_dec: Final = msgspec.msgpack.Decoder(SessionHeader)
participant_dec: Final = msgspec.msgpack.Decoder(ParticipantRecord)
credential_dec: Final = msgspec.msgpack.Decoder(Credential)
member_dec: Final = msgspec.msgpack.Decoder(tuple[str, str])

_SMALL_STR_HEADERS: Final = tuple(
    bytes((0xA0 | n,)) if n < 32 else bytes((0xD9, n)) for n in range(256)
)


def str_header(n: int) -> bytes:
    """msgpack str header for ``n`` bytes: the append script's cmsgpack decodes str, never bin."""
    if n < 256:
        return _SMALL_STR_HEADERS[n]
    return b"\xda" + n.to_bytes(2, "big") if n < 65536 else b"\xdb" + n.to_bytes(4, "big")


def array_header(n: int) -> bytes:
    """msgpack array header for ``n`` items."""
    if n < 16:
        return bytes((0x90 | n,))
    return b"\xdc" + n.to_bytes(2, "big") if n < 65536 else b"\xdd" + n.to_bytes(4, "big")


def received_id(entry: NewEntry) -> str:
    """What ``welcome.received`` reports for the entry's sender once it is logged."""
    return entry.message_id if entry.received_id is None else entry.received_id


def pack_batch(entries: Sequence[NewEntry]) -> bytes:
    """The append script's ARGV[7]: one msgpack array of seven pre-packed strings per entry
    (see the header of scripts/append.lua)."""
    pack = _enc.encode
    parts = [array_header(len(entries))]
    add = parts.extend
    for e in entries:
        mid = e.message_id.encode()
        pre = pack((e.message_id, e.type))[1:]  # [1:]: drop the fixarray header
        post = pack((e.sender_id, e.sender_role, e.exclude, e.edges_only))[1:]
        sender = e.sender_id.encode()
        got = b"" if e.sender_role == "master" else received_id(e).encode()
        add((b"\x97", str_header(len(mid)), mid, str_header(len(pre)), pre))
        add((str_header(len(e.head)), e.head, str_header(len(e.tail)), e.tail))
        add((str_header(len(post)), post, str_header(len(sender)), sender))
        add((str_header(len(got)), got))
    return b"".join(parts)


def text(value: bytes | str) -> str:
    """A reply's bytes as str."""
    return value.decode() if isinstance(value, bytes) else value


def pairs(flat: list[bytes]) -> dict[bytes, bytes]:
    """A flat HGETALL-style reply as a mapping."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


@dataclass(frozen=True, slots=True)
class AttachView:
    """What an attach must know of the rest of its session (``RedisStore.attach_view``)."""

    nodes: dict[str, int]
    """node id -> how many records say they are attached there"""
    own: ParticipantRecord | None
    """the attaching participant's record, if it has one"""
    clients: list[ParticipantRecord]
    """every client-role record"""
    received: str | None = None
    """the id of the attaching participant's last frame the log holds (``welcome.received``)"""
    complete: bool = False
    """``own`` and ``received`` were both read (a layout-2 session): the attach need not
    read them again"""

    @classmethod
    def of(cls, records: Sequence[ParticipantRecord], participant_id: str) -> AttachView:
        """The view of a session from all its records (a layout-1 session keeps no index)."""
        nodes: dict[str, int] = {}
        own = None
        for r in records:
            if r.attached:
                nodes[r.node_id] = nodes.get(r.node_id, 0) + 1
            if r.participant_id == participant_id:
                own = r
        return cls(nodes, own, [r for r in records if r.role == "client"])

    @classmethod
    def decoded(cls, reply: list[Any], participant_id: str) -> AttachView:
        """The view as scripts/attach_view.lua returns it (by the session's layout)."""
        layout = int(reply[0])
        if layout < 2:  # no session (0), or one that keeps no index (1): from every record
            records = reply[1] if layout == 1 else []
            return cls.of([participant_dec.decode(r) for r in records], participant_id)
        _layout, nodes, own, clients, received = reply
        return cls(
            {text(n): int(c) for n, c in pairs(nodes).items()},
            None if own is None else participant_dec.decode(own),
            [participant_dec.decode(r) for r in clients],
            None if received is None else text(received),
            complete=bool(participant_id),
        )


def stamped(header: SessionHeader) -> SessionHeader:
    """The header as a new session of this build is written: at least :data:`LAYOUT_VERSION`
    (a newer format stays as it is, to be refused when read)."""
    if header.format_version >= LAYOUT_VERSION:
        return header
    return msgspec.structs.replace(header, format_version=LAYOUT_VERSION)


def header_args(header: SessionHeader) -> list[bytes | str | int]:
    """The header's fields as the create and fork scripts take them."""
    return [
        encode(header),
        header.workspace,
        header.name,
        header.format_version,
        header.revision,
    ]


def header_from(session_id: str, fields: dict[bytes, bytes]) -> SessionHeader:
    """The session's header from its hash (FormatVersionError when a newer build wrote it)."""
    version = int(fields[b"v"])
    if version > LAYOUT_VERSION:
        raise newer_format(session_id, version, LAYOUT_VERSION)
    header = header_dec.decode(fields[b"meta"])
    header.name = fields[b"name"].decode()
    header.revision = int(fields[b"rev"])
    header.format_version = version
    return header


def foreign_header(session_id: str, workspace: str, fields: dict[bytes, bytes]) -> SessionHeader:
    """A newer build's header, reduced to what every version stores beside ``meta``."""
    return SessionHeader(
        session_id=session_id,
        workspace=workspace,
        name=fields.get(b"name", b"").decode(),
        created_at="",
        epoch="",
        format_version=int(fields[b"v"]),
        revision=int(fields.get(b"rev", b"0")),
    )
