"""What every HTTP handler shares: the hub's application key and the request's principal.

A leaf of ``relay.http``: the route modules import it, and ``app`` imports the route modules,
so no module of the package imports ``app`` back.
"""

from __future__ import annotations

from aiohttp import web

from ..auth import Principal
from ..hub import Hub

__all__ = ["HUB", "authenticate"]

HUB: web.AppKey[Hub] = web.AppKey("hub", Hub)


async def authenticate(request: web.Request) -> Principal:
    """The principal of ``Authorization: Bearer <API key or session token>``."""
    header = request.headers.get("Authorization", "")
    scheme, _, secret = header.partition(" ")
    token = secret.strip() if scheme.lower() == "bearer" else None
    return await request.app[HUB].auth.authenticate(token)
