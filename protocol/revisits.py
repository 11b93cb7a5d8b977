"""Wake and revisit rules that need no I/O (notes §17.5): the time window a revisit's ``at``
must fall in, and the message id of the wake a request leads to.

The state machine (:mod:`protocol.state`) keeps the pending revisits; the master, which has
the clock, checks ``at`` with :func:`check_at` before it logs a request, and names each wake
with :func:`wake_message_id`, so two claims of the same wake log it once (the log dedupes by
message id).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
from typing import Final

from .errors import InvalidRevisit
from .frames import Frame, GenericFrame, RevisitRequest

__all__ = [
    "MAX_AHEAD",
    "MAX_PAST",
    "check_request",
    "wake_message_id",
]

MAX_PAST: Final = _dt.timedelta(seconds=60)
"""How far in the past ``at`` may be (clock skew): such a revisit is due at once."""
MAX_AHEAD: Final = _dt.timedelta(days=366)
"""How far ahead ``at`` may be."""
_ID_MAX: Final = 256


def check_request(frame: Frame | GenericFrame, now: _dt.datetime) -> None:
    """Raise :class:`InvalidRevisit` when ``frame`` is a revisit request whose ``at`` lies
    more than :data:`MAX_PAST` before ``now`` or more than :data:`MAX_AHEAD` after it."""
    if not isinstance(frame, RevisitRequest):
        return
    at = frame.payload.at
    if at < now - MAX_PAST:
        raise InvalidRevisit(
            f"revisit {frame.payload.revisit_id!r}: at {at.isoformat()} is more than 60 s in "
            "the past"
        )
    if at > now + MAX_AHEAD:
        raise InvalidRevisit(
            f"revisit {frame.payload.revisit_id!r}: at {at.isoformat()} is more than 366 days ahead"
        )


def wake_message_id(revisit_id: str, request_id: str) -> str:
    """The ``message_id`` of the wake the request ``request_id`` leads to:
    ``wake:<revisit_id>:<16 hex>``, or ``wake:<32 hex>`` when that would pass 256 characters
    (the hex: SHA-256 of both ids)."""
    digest = hashlib.sha256(f"{revisit_id}\n{request_id}".encode()).hexdigest()
    readable = f"wake:{revisit_id}:{digest[:16]}"
    return readable if len(readable) <= _ID_MAX else f"wake:{digest[:32]}"
