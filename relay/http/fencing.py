"""REST writes are fenced like a node's connections (docs/operations.md "Fencing").

:func:`lease_middleware` notes, when a request arrives, the lease this node serves it under;
:func:`fenced_write` wraps a route's write to a session (an appended frame, a rename, a
delete): with several nodes it is refused ``503 store_unavailable`` when this node was
declared dead since the request arrived, or may have been (relay/lease.py), and a sweep that
declares the node dead while the write is in progress fences the session, so an append or a
rename cannot land after it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from aiohttp import web

from protocol.errors import StoreError

from .context import HUB
from .middleware import store_unavailable

if TYPE_CHECKING:
    from ..coordination import Coordinator

__all__ = ["fenced_write", "lease_middleware"]


@web.middleware
async def lease_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """Serve the request under the lease this node holds as it arrives."""
    request.app[HUB].cluster.arrived()
    response: web.StreamResponse = await handler(request)
    return response


@contextlib.asynccontextmanager
async def fenced_write(coordinator: Coordinator[Any, Any], session_id: str) -> AsyncIterator[None]:
    """Around a REST write to the session (``coordinator``: the hub's node, which every
    session is handed too); a fenced or unconfirmed lease (or any store failure) answers 503
    ``store_unavailable``."""
    try:
        async with coordinator.writing(session_id):
            yield
    except StoreError as exc:
        raise store_unavailable(exc) from None
