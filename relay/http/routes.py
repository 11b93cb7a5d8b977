"""Every route of the HTTP API beyond health, metrics and DELETE (notes §10), in one place.

``create_app`` calls :func:`add_routes`; the table below is the API's index.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from aiohttp import web

from ..revocation import CredentialWatch
from .agui import add_agui_routes
from .auth_routes import create_token, revoke_token, whoami
from .context import HUB, SESSION_PATH
from .dashboard import add_dashboard_routes
from .events import append_event, cancel_turn, list_events
from .export import export_session
from .fencing import lease_middleware
from .keys import add_key_routes
from .middleware import HTTP_METRICS, HttpMetrics, api_middleware
from .openapi import add_openapi_route
from .sessions import (
    continue_session,
    create_session,
    fork_session,
    get_session,
    list_sessions,
    rename_session,
)
from .sse import STREAMS, EventStream, end_streams, stream_events
from .wakes import list_wakes

__all__ = ["add_routes"]


async def _watch_credentials(app: web.Application) -> AsyncIterator[None]:
    """End this node's WebSockets and SSE streams whose credential stopped being valid."""
    streams: set[EventStream] = app[STREAMS]
    watch = CredentialWatch(app[HUB], lambda: list(streams))
    watch.start()
    yield
    await watch.stop()


def add_routes(app: web.Application, *, ws_url: Callable[[], str] | None = None) -> None:
    """Register the session API, SSE, tokens and the dashboard on ``app``."""
    app[HTTP_METRICS] = HttpMetrics(app[HUB])
    app[STREAMS] = set()
    app.middlewares.insert(0, api_middleware)
    app.middlewares.insert(1, lease_middleware)  # [trust] REST writes are fenced too
    app.on_shutdown.append(end_streams)
    app.cleanup_ctx.append(_watch_credentials)  # [trust] §16.9 on every node
    r = app.router
    r.add_post("/v1/sessions", create_session)
    r.add_get("/v1/sessions", list_sessions)
    r.add_get(f"/v1/sessions/{SESSION_PATH}", get_session)
    r.add_patch(f"/v1/sessions/{SESSION_PATH}", rename_session)
    r.add_get(f"/v1/sessions/{SESSION_PATH}/events", list_events)
    r.add_post(f"/v1/sessions/{SESSION_PATH}/events", append_event)
    r.add_get(f"/v1/sessions/{SESSION_PATH}/events/stream", stream_events)
    r.add_post(f"/v1/sessions/{SESSION_PATH}/cancel", cancel_turn)
    r.add_post(f"/v1/sessions/{SESSION_PATH}/tokens", create_token)
    r.add_post(f"/v1/sessions/{SESSION_PATH}/fork", fork_session)
    r.add_post(f"/v1/sessions/{SESSION_PATH}/continue", continue_session)
    r.add_get(f"/v1/sessions/{SESSION_PATH}/export", export_session)
    add_agui_routes(app)
    r.add_get("/v1/wakes", list_wakes)  # notes §17.5
    r.add_delete("/v1/tokens/{token_id}", revoke_token)
    r.add_get("/v1/whoami", whoami)
    add_key_routes(app)
    add_dashboard_routes(app, ws_url)
    add_openapi_route(app)  # last: it describes every route above (issue 15)
