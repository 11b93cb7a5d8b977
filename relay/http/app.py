"""The aiohttp application on ``--http-port`` (notes §10)."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from protocol import acts, names
from protocol.errors import NotAllowed, StoreUnavailableError
from protocol.version import VERSION

from ..hub import Hub, SessionAttached
from .context import HUB, SESSION_PATH, authenticate
from .fencing import fenced_write
from .hardening import hide_server_version
from .problems import problem, problem_middleware
from .routes import add_routes

# HUB and authenticate live in .context; named here too for the callers that import them from app.
__all__ = ["HUB", "authenticate", "create_app"]


async def healthz(request: web.Request) -> web.Response:
    """Liveness: the process answers, and says which build it is."""
    return web.json_response({"status": "ok", "version": VERSION})


async def readyz(request: web.Request) -> web.Response:
    """Readiness: the store answers."""
    hub = request.app[HUB]
    try:
        ok = await hub.store.ping()
    except StoreUnavailableError:
        ok = False
    if not ok or hub.shutting_down:
        # the store's reason (a full disk, a damaged file) when it has one; else no answer
        reason = None if ok else hub.store.unready_reason()
        detail = reason or ("the master is shutting down" if ok else "the store is not reachable")
        return problem(503, detail, code="store_unavailable")
    return web.json_response({"status": "ready", "store": hub.store.name})


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text exposition."""
    body = generate_latest(request.app[HUB].metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def delete_session(request: web.Request) -> web.Response:
    """``DELETE /v1/session/{id}`` (RAWP §5.2; notes §9).

    ``?if_idle=true`` answers 409 while anyone is attached. An unknown session answers 404,
    or 200 with ``?if_absent=ok`` (for idempotent clean-up scripts).
    """
    hub = request.app[HUB]
    principal = await authenticate(request)
    session_id = request.match_info["session_id"]
    if not names.is_session_id(session_id):
        return problem(400, names.not_a_session_id(session_id), code="invalid_session_id")
    header = await hub.store.get_session(session_id)
    if header is None or not principal.can_see(header):
        if request.query.get("if_absent") == "ok":
            return web.json_response({"session_id": session_id, "deleted": False})
        return problem(404, f"no session {session_id}", code="not_found")
    try:
        acts.require("request_deletion", "edge", principal)  # the act table (§16.6)
    except NotAllowed as exc:
        return problem(403, exc.message, code="not_allowed")
    try:
        # [trust] refused on a node declared dead (or that may be) since the request arrived
        async with fenced_write(hub.cluster, session_id):
            # ``if_idle`` is checked under the session lock, with the delete (seed 001).
            deleted = await hub.delete(
                session_id,
                reason="master_request",
                deleted_by="master",
                if_idle=request.query.get("if_idle") == "true",
            )
    except SessionAttached:
        return problem(409, "the session has attached participants", code="attached")
    if not deleted and request.query.get("if_absent") != "ok":
        return problem(404, f"no session {session_id}", code="not_found")
    return web.json_response({"session_id": session_id, "deleted": deleted})


def create_app(hub: Hub, *, ws_url: Callable[[], str] | None = None) -> web.Application:
    """The HTTP application of one master (``ws_url``: where the dashboard's socket goes)."""
    app = web.Application(middlewares=[problem_middleware])
    app.on_response_prepare.append(hide_server_version)
    app[HUB] = hub
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_delete(f"/v1/session/{SESSION_PATH}", delete_session)
    app.router.add_delete(f"/v1/sessions/{SESSION_PATH}", delete_session)
    # --- [http-api] sessions, events, SSE, tokens, export, dashboard (relay/http/routes.py)
    add_routes(app, ws_url=ws_url)
    # --- [http-api] end
    return app
