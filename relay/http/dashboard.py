"""The dashboard: ``GET /`` (static HTML + one bundled script and stylesheet) and its config.

The page is itself an edge (``@rawp/client``): it reads sessions over this HTTP API and
attaches to one over the WebSocket, whose URL it takes from ``GET /config.json`` (the
WebSocket listens on another port). Files are served from ``relay/http/static/``; the bundle
there is built from ``sdk/dashboard/`` (``make dashboard``) and checked in, so serving it
needs no Node. The Content-Security-Policy allows scripts from this origin only (no inline
script, no eval) and connections to this origin and the master's WebSocket address only.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Final

from aiohttp import web
from yarl import URL

from protocol import names
from protocol.frames import PROTOCOL_VERSION, SUBPROTOCOL

from .middleware import ApiError
from .models import json_response

__all__ = ["STATIC_DIR", "WS_URL", "add_dashboard_routes", "config", "index", "static"]

STATIC_DIR: Final = Path(__file__).parent / "static"
WS_URL: web.AppKey[Callable[[], str]] = web.AppKey("ws_url", Callable[[], str])  # type: ignore[arg-type]
_STATIC_NAME: Final = re.compile(r"[a-z0-9][a-z0-9_-]*\.(?:js|css|svg|png|ico)")
_STATIC_FILES: Final = frozenset(
    p.name for p in STATIC_DIR.iterdir() if p.is_file() and _STATIC_NAME.fullmatch(p.name)
)
_HOST: Final = re.compile(r"[A-Za-z0-9.-]{1,253}|[0-9A-Fa-f:.]{2,45}")
_WILDCARDS: Final = frozenset({"0.0.0.0", "::", "[::]", ""})
_CSP: Final = (
    "default-src 'self'; connect-src 'self'{ws}; img-src 'self' data:; style-src 'self'; "
    "script-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)


def _page_ws_url(request: web.Request) -> URL | None:
    """The WebSocket URL this page connects to (the master's own listener)."""
    provider = request.app.get(WS_URL)
    ws_url = URL(provider()) if provider is not None else None
    if ws_url is not None and ws_url.host in _WILDCARDS:
        # Bound to every interface: the browser reaches it by the name it used for us.
        ws_url = ws_url.with_host(_browser_host(request))
    return ws_url


def _browser_host(request: web.Request) -> str:
    """The host name the browser used for us (``Host``), when it is a plain host name."""
    try:
        host = request.url.host or ""
    except ValueError:  # a Host header yarl cannot parse
        host = ""
    # The name goes into a header (CSP) and a URL: nothing but host-name characters.
    return host if _HOST.fullmatch(host) else "127.0.0.1"


def _headers(request: web.Request) -> dict[str, str]:
    """The page's headers. CSP ``connect-src``: the page's own origin and this master's own
    WebSocket listener (another port of the same host), nothing else (issue 12)."""
    ws_url = _page_ws_url(request)
    ws = f" {ws_url.origin()}" if ws_url is not None and ws_url.host else ""
    return {
        "Cache-Control": "no-cache",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Content-Security-Policy": _CSP.format(ws=ws),
    }


async def index(request: web.Request) -> web.FileResponse:
    """``GET /``: the dashboard page."""
    return web.FileResponse(STATIC_DIR / "index.html", headers=_headers(request))


async def config(request: web.Request) -> web.Response:
    """``GET /config.json``: where the page's WebSocket connects."""
    ws_url = _page_ws_url(request)
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
    """``GET /static/{name}``: one file of the dashboard (flat directory, no traversal).

    Only names listed at start are served: the received name never reaches the file system
    (a 5,000-character name would be ENAMETOOLONG there).
    """
    name = request.match_info["name"]
    if name not in _STATIC_FILES:
        raise ApiError(404, f"no static file {names.one_line(name[:80])}", code="not_found")
    return web.FileResponse(STATIC_DIR / name, headers=_headers(request))
