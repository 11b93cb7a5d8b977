"""Plain-JSON frame building for the runner (rawp-notes §3 envelope, §4 catalog, RAWP §7).

The runner speaks RAWP as a third party would: envelopes are dicts, built here and sent as
UTF-8 JSON text. Nothing is imported from the relay, so a master is judged only by what it
puts on the wire.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, Final

__all__ = [
    "PRESENCE",
    "PROTOCOL_VERSION",
    "STATUS",
    "SUBPROTOCOL",
    "envelope",
    "is_master_ack",
    "is_synthetic",
    "new_id",
    "now_iso",
    "presence_change",
    "sender_role",
    "usage_payload",
]

PROTOCOL_VERSION: Final = "1.0.2"
SUBPROTOCOL: Final = "rawp.1"
PRESENCE: Final = "session.presence"
STATUS: Final = "session.status"
"""The master's status changes (notes §17.4): looked past like presence unless a case reads
them."""


def presence_change(frame: dict[str, Any], pid: str) -> dict[str, Any] | None:
    """The last change about ``pid`` in a ``session.presence`` frame, else None.

    A coalesced frame (docs/protocol.md §5 item 11) lists its changes in ``changes``; the
    one-change shape has them at the top level of the payload.
    """
    payload = frame.get("payload")
    if frame.get("type") != PRESENCE or not isinstance(payload, dict):
        return None
    changes = payload.get("changes")
    items = changes if isinstance(changes, list) and changes else [payload]
    found = None
    for item in items:
        if isinstance(item, dict) and item.get("participant_id") == pid:
            found = item
    return found


def new_id() -> str:
    """A fresh UUID v4 (message ids, turn ids, call ids)."""
    return str(uuid.uuid4())


def now_iso() -> str:
    """The current time as RFC 3339 UTC with milliseconds."""
    moment = dt.datetime.now(dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def envelope(session_id: str, type_: str, payload: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A complete envelope (notes §3) with a fresh message_id and the current time."""
    frame: dict[str, Any] = {
        "type": type_,
        "message_id": new_id(),
        "session_id": session_id,
        "timestamp": now_iso(),
        "payload": payload,
    }
    frame.update(extra)
    return frame


def usage_payload(turn_id: str | None = None) -> dict[str, Any]:
    """A valid §7.3.1 ``session.usage`` payload."""
    payload: dict[str, Any] = {
        "token_usage": {"input_tokens": 12, "output_tokens": 34},
        "cost_usage": {"limit": -1, "used": 0.02, "unit": "USD"},
        "message_usage": {"limit": 100, "used": 1, "unit": "COUNT"},
        "time_to_reset": "PT5H",
    }
    if turn_id is not None:
        payload["turn_id"] = turn_id
    return payload


def is_synthetic(frame: dict[str, Any]) -> bool:
    """True when the frame carries ``metadata.synthetic: true`` (§7.8.1)."""
    metadata = frame.get("metadata")
    return isinstance(metadata, dict) and metadata.get("synthetic") is True


def sender_role(frame: dict[str, Any]) -> str | None:
    """The ``sender.role`` the master stamped on a delivered frame (notes §3, §15.2)."""
    sender = frame.get("sender")
    if isinstance(sender, dict):
        role = sender.get("role")
        return role if isinstance(role, str) else None
    return None


ACK: Final = "connection.ack"


def is_master_ack(frame: dict[str, Any]) -> bool:
    """A ``connection.ack`` the master sent (notes §16.3: what it committed of the peer's).

    Participants send ``connection.ack`` too (what they received); the master never relays
    those, so a delivered ack is the master's unless its stamp names another role.
    """
    return frame.get("type") == ACK and sender_role(frame) in (None, "master")
