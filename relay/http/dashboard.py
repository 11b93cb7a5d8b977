"""The dashboard: ``GET /`` (static HTML + JavaScript modules, no build step) and its config.

The page is itself an edge: it reads sessions over this HTTP API and attaches to one over
the WebSocket, whose URL it takes from ``GET /config.json`` (the WebSocket listens on
another port). Files are served from ``relay/http/static/``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Final

from aiohttp import web
from yarl import URL

from protocol.frames import PROTOCOL_VERSION, SUBPROTOCOL

from .middleware import ApiError
from .models import json_response

__all__ = ["STATIC_DIR", "WS_URL", "add_dashboard_routes", "config", "index", "static"]

STATIC_DIR: Final = Path(__file__).parent / "static"
WS_URL: web.AppKey[Callable[[], str]] = web.AppKey("ws_url", Callable[[], str])  # type: ignore[arg-type]
_STATIC_NAME: Final = re.compile(r"[a-z0-9][a-z0-9_-]*\.(?:js|css|svg|png|ico)")
_WILDCARDS: Final = frozenset({"0.0.0.0", "::", "[::]", ""})
_HEADERS: Final = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": (
        "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; "
        "style-src 'self'; script-src 'self'; frame-ancestors 'none'"
    ),
}


async def index(request: web.Request) -> web.FileResponse:
    """``GET /``: the dashboard page."""
    return web.FileResponse(STATIC_DIR / "index.html", headers=_HEADERS)


async def config(request: web.Request) -> web.Response:
    """``GET /config.json``: where the page's WebSocket connects."""
    provider = request.app.get(WS_URL)
    ws_url = URL(provider()) if provider is not None else None
    if ws_url is not None and ws_url.host in _WILDCARDS:
        # Bound to every interface: the browser reaches it by the name it used for us.
        ws_url = ws_url.with_host(request.url.host or "127.0.0.1")
    return json_response(
        {
            "ws_url": str(ws_url) if ws_url is not None else None,
            "protocol_version": PROTOCOL_VERSION,
            "subprotocol": SUBPROTOCOL,
        },
        headers={"Cache-Control": "no-cache"},
    )


def add_dashboard_routes(app: web.Application, ws_url: Callable[[], str] | None) -> None:
    """Register ``/``, ``/config.json`` and ``/static/``."""
    if ws_url is not None:
        app[WS_URL] = ws_url
    app.router.add_get("/", index)
    app.router.add_get("/config.json", config)
    app.router.add_get("/static/{name}", static)


async def static(request: web.Request) -> web.FileResponse:
    """``GET /static/{name}``: one file of the dashboard (flat directory, no traversal)."""
    name = request.match_info["name"]
    path = STATIC_DIR / name
    if not _STATIC_NAME.fullmatch(name) or not path.is_file():
        raise ApiError(404, f"no static file {name}", code="not_found")
    return web.FileResponse(path, headers=_HEADERS)
