"""What every API route does first: who is asking, which session, may they.

A session the credential may not see answers 404 exactly like a session that does not
exist, so a session token or another workspace's key learns nothing about it (notes §11).
"""

from __future__ import annotations

from typing import overload

from aiohttp import web

from protocol.errors import StoreError

from ..auth import Principal
from ..hub import Hub
from ..session import Session
from ..store.base import SessionHeader
from .app import HUB, authenticate
from .middleware import ApiError

__all__ = [
    "hub_of",
    "int_query",
    "loaded_session",
    "principal_of",
    "visible_header",
]


def hub_of(request: web.Request) -> Hub:
    """The hub of the master serving this request."""
    return request.app[HUB]


async def principal_of(request: web.Request) -> Principal:
    """The principal of the request's bearer credential (401 when missing or invalid)."""
    return await authenticate(request)


async def visible_header(request: web.Request, principal: Principal) -> SessionHeader:
    """The header of ``{session_id}`` when this principal may read it; else 404."""
    session_id = request.match_info["session_id"]
    try:
        header = await hub_of(request).store.get_session(session_id)
    except StoreError as exc:
        raise ApiError(503, str(exc), code="store_unavailable") from None
    if header is None or not principal.can_see(header):
        raise ApiError(404, f"no session {session_id}", code="not_found")
    return header


async def loaded_session(request: web.Request, header: SessionHeader) -> Session:
    """The session loaded on this node (404 when it was deleted meanwhile); an archived one
    is read-only (notes §16.1)."""
    session = await hub_of(request).open(header.session_id)
    if session is None or (session.terminated and not session.header.archived):
        raise ApiError(404, f"no session {header.session_id}", code="not_found")
    return session


@overload
def int_query(
    request: web.Request, name: str, default: int, *, minimum: int = 0, maximum: int | None = None
) -> int: ...


@overload
def int_query(
    request: web.Request,
    name: str,
    default: None,
    *,
    minimum: int = 0,
    maximum: int | None = None,
) -> int | None: ...


def int_query(
    request: web.Request,
    name: str,
    default: int | None,
    *,
    minimum: int = 0,
    maximum: int | None = None,
) -> int | None:
    """An integer query parameter in [minimum, maximum]; 400 ``invalid_query`` otherwise."""
    text = request.query.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise ApiError(400, f"{name} must be an integer, got {text!r}", code="invalid_query")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"[{minimum}, {maximum}]" if maximum is not None else f">= {minimum}"
        raise ApiError(400, f"{name} must be {bound}, got {value}", code="invalid_query")
    return value
