"""Ending what a revoked credential holds on this node, at once (other nodes: the watch)."""

from __future__ import annotations

from typing import Final

from aiohttp import web

from protocol.errors import CloseCode

from .context import HUB
from .sse import end_streams_of

__all__ = ["end_connections_of"]

_REVOKED: Final = CloseCode.BAD_CREDENTIAL


def end_connections_of(app: web.Application, credential_id: str) -> None:
    """Close this node's WebSockets (4401) and end its SSE streams opened with the
    credential (or, for a key, with a token it issued: those end with their key)."""
    hub = app[HUB]
    for session in list(hub.sessions.values()):
        for participant in list(session.participants.values()):
            principal = participant.principal
            if credential_id in (principal.credential_id, principal.issued_by):
                hub.spawn(participant.sink.close(_REVOKED, "credential revoked"))
    end_streams_of(app, credential_id)
