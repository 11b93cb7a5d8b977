"""What every HTTP handler shares: the hub's application key and the request's principal.

A leaf of ``relay.http``: the route modules import it, and ``app`` imports the route modules,
so no module of the package imports ``app`` back.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

from ..auth import Principal
from ..hub import Hub

__all__ = ["HUB", "SESSION_PATH", "authenticate"]

HUB: web.AppKey[Hub] = web.AppKey("hub", Hub)

SESSION_PATH: Final = "{session_id:[^/]+}"
"""The session id segment of a route: any characters but ``/``, so an id outside the grammar
(``{``, ``}`` included, which aiohttp's default pattern would not match) reaches the handler
and is refused there ``400 invalid_session_id`` (notes §16.7), not answered by the router."""


async def authenticate(request: web.Request) -> Principal:
    """The principal of ``Authorization: Bearer <API key or session token>``."""
    header = request.headers.get("Authorization", "")
    scheme, _, secret = header.partition(" ")
    token = secret.strip() if scheme.lower() == "bearer" else None
    return await request.app[HUB].auth.authenticate(token)
