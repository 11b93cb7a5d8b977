"""How a store failure reaches the participant whose frame it refused (notes §12).

The session worker must outlive every store failure: a frame the store did not make durable
is answered with a non-fatal ``session.error`` naming the frame, never with a crash. Which
code the sender gets depends on why the store refused:

* :class:`~protocol.errors.StoreUnavailableError` (Redis down, failing over, read-only) and
  any other :class:`~protocol.errors.StoreError`: ``store_unavailable`` — retry later.
* :class:`~protocol.errors.FormatVersionError`: ``version_unsupported`` — the session was
  written by a newer build; retrying here will not help (seed 004: "upgrade", not "corrupt").
* :class:`~protocol.errors.SessionMissing` (the store has no such session: deleted
  meanwhile, e.g. by another node): ``not_allowed`` — the session's ``session.deleted`` is on
  its way to the participant.
"""

from __future__ import annotations

from protocol.errors import (
    FormatVersionError,
    NotAllowed,
    ProtocolError,
    SessionMissing,
    StoreUnavailable,
    VersionUnsupported,
)

__all__ = ["refusal"]


def refusal(exc: BaseException, message_id: str) -> ProtocolError:
    """The ``session.error`` for a frame the store refused with ``exc``."""
    if isinstance(exc, SessionMissing):
        return NotAllowed(f"frame {message_id} was not stored: the session no longer exists")
    if isinstance(exc, FormatVersionError):
        return VersionUnsupported(f"frame {message_id} was not stored: {exc}")
    return StoreUnavailable(f"frame {message_id} was not stored: {exc}")
