"""What every API route does first: who is asking, which session, may they.

A session the credential may not see answers 404 exactly like a session that does not
exist, so a session token or another workspace's key learns nothing about it (notes §11).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Final, overload

from aiohttp import web

from protocol import acts, names
from protocol.errors import NotAllowed, StoreError

from ..auth import Principal
from ..hub import Hub
from ..session import Session
from ..store.base import SessionHeader
from .context import HUB, authenticate
from .middleware import ApiError, store_unavailable

__all__ = [
    "MAX_QUERY_INT",
    "hub_of",
    "int_query",
    "loaded_session",
    "path_session_id",
    "principal_of",
    "require_act",
    "visible_header",
    "writable_session",
]

_ENDING_GRACE_S: Final = 5.0

MAX_QUERY_INT: Final = 2**63 - 1
"""The largest integer a query parameter may hold: a seq is a signed 64-bit integer in every
store (SQLite's INTEGER; Redis stream ids), so anything larger never reaches one."""
# ASCII digits with an optional sign, nothing else: int() would also take "１" (a full-width
# digit), "1_000" and surrounding spaces, which no client of this API means as a number.
_INT_TEXT: Final = re.compile(r"[+-]?[0-9]{1,40}")


def hub_of(request: web.Request) -> Hub:
    """The hub of the master serving this request."""
    return request.app[HUB]


async def principal_of(request: web.Request) -> Principal:
    """The principal of the request's bearer credential (401 when missing or invalid)."""
    return await authenticate(request)


async def visible_header(request: web.Request, principal: Principal) -> SessionHeader:
    """The header of ``{session_id}`` when this principal may read it; else 404."""
    session_id = path_session_id(request)
    try:
        header = await hub_of(request).store.get_session(session_id)
    except StoreError as exc:
        raise store_unavailable(exc) from None
    if header is None or not principal.can_see(header):
        raise ApiError(404, f"no session {session_id}", code="not_found")
    return header


def path_session_id(request: web.Request) -> str:
    """The ``{session_id}`` of the path; 400 ``invalid_session_id`` unless it is one (§16.7)."""
    session_id = request.match_info["session_id"]
    if not names.is_session_id(session_id):
        raise ApiError(400, names.not_a_session_id(session_id), code="invalid_session_id")
    return session_id


def require_act(principal: Principal, act: acts.Act) -> None:
    """403 ``not_allowed`` unless the act table lets this credential do ``act`` (§16.6).

    An HTTP caller acts as an edge would (notes §10), so its cells are the edge's.
    """
    try:
        acts.require(act, "edge", principal)
    except NotAllowed as exc:
        raise ApiError(403, exc.message, code="not_allowed") from None


async def loaded_session(request: web.Request, header: SessionHeader) -> Session:
    """The session loaded on this node (404 when it was deleted meanwhile); an archived one
    is read-only (notes §16.1).

    A session that is ending right now (its ``session.deleted`` logged, its participants
    being closed, its header not yet archived) is waited for: a request then sees it
    archived, or gone when it was deleted — never "gone" for a moment and archived after.
    """
    hub = hub_of(request)
    session = await hub.open(header.session_id)
    if session is not None and session.terminated and not session.header.archived:
        with contextlib.suppress(TimeoutError):
            # The ending closes its participants within the shutdown timeout; an ending that
            # never finishes (a store outage) must not hold the request for ever.
            async with asyncio.timeout(hub.settings.shutdown_timeout_s + _ENDING_GRACE_S):
                await session.ended.wait()
        session = await hub.open(header.session_id)
    if session is None or (session.terminated and not session.header.archived):
        raise ApiError(404, f"no session {header.session_id}", code="not_found")
    return session


async def writable_session(request: web.Request, header: SessionHeader) -> Session:
    """:func:`loaded_session` for a write: an archived session answers 409 ``archived``
    (notes §16.1: every HTTP write to it is refused alike)."""
    session = await loaded_session(request, header)
    if session.header.archived or session.terminated:
        raise ApiError(409, f"session {session.id} has ended: it is read-only", code="archived")
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
    """An integer query parameter in [minimum, maximum]; 400 ``invalid_query`` otherwise.

    Without ``maximum`` the bound is :data:`MAX_QUERY_INT`: a paging parameter too large for
    a store is the client's mistake (400), never a store error (500/503)."""
    text = request.query.get(name)
    if text is None or text == "":
        return default
    if not _INT_TEXT.fullmatch(text):
        shown = names.one_line(text[:40])
        raise ApiError(400, f"{name} must be an integer, got {shown!r}", code="invalid_query")
    value = int(text)
    top = MAX_QUERY_INT if maximum is None else maximum
    if value < minimum or value > top:
        bound = f"[{minimum}, {maximum}]" if maximum is not None else f"[{minimum}, 2^63 - 1]"
        shown = str(value) if len(text) <= 24 else text[:24] + "…"
        raise ApiError(400, f"{name} must be {bound}, got {shown}", code="invalid_query")
    return value
