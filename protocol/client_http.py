"""The client library's few HTTP calls: carrying an ended session on (notes §17.2).

Every other part of the client speaks RAWP over its WebSocket; ``continue`` makes a new
session, which only the HTTP API can do. Its answer is what an agent needs to attach to the
new session: its id, and the session token issued for it.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

import aiohttp
from yarl import URL

from . import names
from .client_errors import ClientError

__all__ = ["ContinuedSession", "continue_session"]


@dataclass(frozen=True)
class ContinuedSession:
    """The session that carries an ended one on: the agent attaches to ``session_id`` as its
    client with its API key (``from_start=True`` to read the history); ``token`` is the new
    session's first session token (default grants: a UI's), issued on creation only."""

    session_id: str
    parent_session_id: str
    seed_length: int
    created: bool
    token: str | None
    session: dict[str, Any]


async def continue_session(
    http_url: str,
    session_id: str,
    *,
    api_key: str,
    new_session_id: str | None = None,
    name: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
    timeout: float = 30.0,
) -> ContinuedSession:
    """``POST /v1/sessions/{session_id}/continue``: a new live session whose parent is the
    ended ``session_id``, holding its whole log. Naming ``new_session_id`` makes a retry
    return the same session (``created`` False, no token). Raises :class:`ClientError` with
    the master's problem (``not_ended`` for a live session, ``not_found``, ...)."""
    body: dict[str, Any] = {}
    if new_session_id is not None:
        body["session_id"] = new_session_id
    if name is not None:
        body["name"] = name
    # The id is one path segment whatever it holds: percent-encoded whole (the master's
    # router decodes it back) and sent as it is: aiohttp's requoting would decode it again
    # and resolve an id of dots ("..") away as a dot segment.
    base = URL(http_url.rstrip("/"))
    path = f"{base.raw_path.rstrip('/')}/v1/sessions/{names.path_segment(session_id)}/continue"
    url = base.with_path(path, encoded=True)
    headers = {"Authorization": f"Bearer {api_key}"}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as http,
        http.post(url, json=body, headers=headers, ssl=ssl_context or True) as answer,
    ):
        data: Any = await answer.json(content_type=None)
        if answer.status not in (200, 201) or not isinstance(data, dict):
            code = data.get("code") if isinstance(data, dict) else None
            detail = data.get("detail") if isinstance(data, dict) else None
            raise ClientError(
                f"continue {session_id} refused ({answer.status} {code}): {detail or data!r}"
            )
    session = data["session"]
    token = data.get("token")
    return ContinuedSession(
        session_id=session["session_id"],
        parent_session_id=session["parent_session_id"],
        seed_length=session["seed_length"],
        created=bool(data.get("created")),
        token=token.get("token") if isinstance(token, dict) else None,
        session=session,
    )
