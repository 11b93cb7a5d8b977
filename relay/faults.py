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

What a caller reads of a store failure (a ``session.error`` message, an HTTP problem's
``detail``) is :func:`shown`: its kind, never the store's own text, which names hosts, ports,
file paths or the store's replies (``redis unreachable: Error 111 connecting to
10.0.0.5:6379``). The full text goes to the master's log, where the failure is handled
(:func:`reported` under an HTTP request, ``SessionCore.count_store_error`` for refused
frames).
"""

from __future__ import annotations

import structlog

from protocol.errors import (
    FormatVersionError,
    NotAllowed,
    ProtocolError,
    SessionMissing,
    StoreUnavailable,
    StoreUnavailableError,
    VersionUnsupported,
)

__all__ = ["refusal", "reported", "shown"]

log = structlog.get_logger("rawp.store")


def shown(exc: BaseException) -> str:
    """What a caller may read of the store failure ``exc``.

    Our own texts pass (a newer format's, a missing session's: they name the session and
    versions only); a backend's become their kind.
    """
    if isinstance(exc, FormatVersionError | SessionMissing):
        return str(exc)
    if isinstance(exc, StoreUnavailableError):
        return "the store is unavailable"
    return "the store refused the operation"


def reported(exc: BaseException) -> str:
    """:func:`shown`, once the store's own text is logged (``store_failed``): for a failure
    answered to an HTTP request."""
    log.warning("store_failed", error=str(exc), kind=type(exc).__name__)
    return shown(exc)


def refusal(exc: BaseException, message_id: str) -> ProtocolError:
    """The ``session.error`` for a frame the store refused with ``exc``."""
    if isinstance(exc, SessionMissing):
        return NotAllowed(f"frame {message_id} was not stored: the session no longer exists")
    if isinstance(exc, FormatVersionError):
        return VersionUnsupported(f"frame {message_id} was not stored: {shown(exc)}")
    return StoreUnavailable(f"frame {message_id} was not stored: {shown(exc)}")
