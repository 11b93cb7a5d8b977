"""Start-up and ordered shutdown of one master: store → hub → WebSocket + HTTP listeners.

Shutdown is idempotent and ordered (as uvicorn / aiohttp do it): stop accepting, close
every connection with 1001, wait for them with a timeout, stop background work, close the
store last. SIGTERM and SIGINT trigger it.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
import ssl
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import structlog
from aiohttp import web
from picows import ws_create_server

from protocol.errors import CloseCode, StoreError

from .auth import KeyRefused
from .config import Settings
from .http import create_app
from .http.hardening import HardenedRunner
from .hub import Hub
from .startup import (
    EXIT_BAD_SETTING,
    StartupError,
    listen_error,
    store_start_failed,
    tls_error,
)
from .store import open_store
from .store.base import Store
from .ws import Connection, WebSocketEndpoint, peer_log

__all__ = ["Master"]

log = structlog.get_logger("rawp.server")
_LISTEN_BACKLOG = 4096  # pending connections the WebSocket listener queues (see _serve_ws)
# The first read buffer of a connection (picows doubles it as a message needs): a hello and
# an edge's frames are small, and an idle edge keeps it (``make bench ARGS=memory``).
_READ_BUFFER = 2048


class Master:
    """One master process's servers. ``await start()``, then ``await stop()``."""

    def __init__(
        self, settings: Settings, *, store: Store | None = None, session_lock: bool = True
    ) -> None:
        if not settings.node_id:
            settings = replace(settings, node_id="m-" + secrets.token_hex(4))
        self.settings = settings
        self.store = (
            store
            if store is not None
            else open_store(
                settings.store,
                cluster=settings.redis_cluster,
                retention=settings.retention,
                node_id=settings.node_id,  # [multinode] publishes as this node
            )
        )
        self.hub = Hub(settings, self.store, session_lock=session_lock)
        self.ws_port = settings.ws_port
        self.http_port = settings.http_port
        self._ws_server: asyncio.Server | None = None
        self._ws_endpoint: WebSocketEndpoint | None = None
        self._http_runner: web.AppRunner | None = None
        self._stopped: asyncio.Event | None = None
        self._stopping: asyncio.Task[None] | None = None

    @property
    def ws_url(self) -> str:
        """Where clients and edges connect."""
        return f"{self.settings.scheme[0]}://{_host(self.settings.host)}:{self.ws_port}/v1/ws"

    @property
    def http_url(self) -> str:
        """The HTTP API's base URL."""
        return f"{self.settings.scheme[1]}://{_host(self.settings.host)}:{self.http_port}"

    @property
    def ws_connections(self) -> frozenset[Connection]:
        """The WebSocket connections open now (upgraded, not yet gone)."""
        endpoint = self._ws_endpoint
        return frozenset(endpoint.connections) if endpoint is not None else frozenset()

    async def start(self) -> None:
        """Open the store, then listen (HTTP first, so the dashboard's origin is known).

        Raises :class:`~relay.startup.StartupError` (one line: cause and fix) when the TLS
        files, the store or a port is not usable, after closing what it had opened.
        """
        self._stopped = asyncio.Event()
        try:
            await self._start()
        except BaseException:
            with contextlib.suppress(Exception):
                await self._stop(started=False)  # nothing half-started stays behind
            raise

    async def _start(self) -> None:
        tls = self._tls()  # before anything opens: a missing file starts nothing
        try:
            await self.hub.start()
        except (StoreError, OSError) as exc:  # not ours to use (7), or no answer (4)
            raise store_start_failed(self.settings.store, exc) from exc
        except KeyRefused as exc:  # the keys given (one secret for two workspaces)
            raise StartupError(f"--api-key: {exc.message}", EXIT_BAD_SETTING) from exc
        app = create_app(self.hub, ws_url=lambda: self.ws_url)  # [http-api] dashboard's ws URL
        # [trust] header deadline, problem+json for aiohttp's own errors (relay/http/hardening)
        runner = HardenedRunner(
            app,
            header_timeout_s=self.settings.hello_timeout_s,
            access_log=None,
            handle_signals=False,
        )
        await runner.setup()
        self._http_runner = runner
        site = web.TCPSite(runner, self.settings.host, self.settings.http_port, ssl_context=tls)
        try:
            await site.start()
        except OSError as exc:
            raise listen_error(
                "HTTP", self.settings.host, self.settings.http_port, "--http-port", exc
            ) from exc
        self.http_port = _bound_port(runner.addresses, self.settings.http_port)
        endpoint = WebSocketEndpoint(self.hub, allowed_origins=self._origins())
        self._ws_endpoint = endpoint
        try:
            self._ws_server = await self._serve_ws(endpoint, tls)
        except OSError as exc:
            raise listen_error(
                "WebSocket", self.settings.host, self.settings.ws_port, "--ws-port", exc
            ) from exc
        endpoint.start()
        sock = next(iter(self._ws_server.sockets))
        self.ws_port = sock.getsockname()[1]
        log.info("listening", ws=self.ws_url, http=self.http_url, store=self.store.name)

    async def _serve_ws(
        self, endpoint: WebSocketEndpoint, tls: ssl.SSLContext | None
    ) -> asyncio.Server:
        """The WebSocket listener: picows parses the upgrade and the frames, the endpoint
        does the rest (relay/ws.py). No compression is negotiated; the keepalive is the
        endpoint's own sweep, not a task per connection."""
        return await ws_create_server(
            endpoint.route,
            self.settings.host,
            self.settings.ws_port,
            websocket_handshake_timeout=self.settings.hello_timeout_s,
            logger_name=peer_log,
            max_frame_size=self.settings.max_frame_bytes,
            enable_auto_pong=False,  # answered by the connection, not while it cannot write
            read_buffer_init_size=_READ_BUFFER,
            use_aiofastnet=False,  # the event loop's own server (uvloop's when it runs)
            ssl=tls,
            # A reconnect storm (issue 16: every edge back at once after a restart) overflows
            # asyncio's default accept backlog of 100: dropped SYNs come back only after the
            # kernel's 1 s, 3 s, 7 s… retransmits. The kernel caps it at net.core.somaxconn.
            backlog=_LISTEN_BACKLOG,
        )

    def _origins(self) -> frozenset[str]:
        own = {
            f"{self.settings.scheme[1]}://{host}:{self.http_port}"
            for host in {_host(self.settings.host), "localhost", "127.0.0.1", "[::1]"}
        }
        return frozenset(own | set(self.settings.allowed_origins))

    def _tls(self) -> ssl.SSLContext | None:
        if not self.settings.tls_cert:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(self.settings.tls_cert, self.settings.tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise tls_error(self.settings.tls_cert, self.settings.tls_key, exc) from exc
        return context

    async def stop(self) -> None:
        """Ordered shutdown; safe to call more than once and concurrently."""
        if self._stopping is None:
            self._stopping = asyncio.get_running_loop().create_task(self._stop())
        await asyncio.shield(self._stopping)

    async def _stop(self, *, started: bool = True) -> None:
        timeout = self.settings.shutdown_timeout_s
        self.hub.shutting_down = True
        if self._ws_server is not None:
            self._ws_server.close()  # accepts nothing more
        if self._ws_endpoint is not None:
            # Every connection closed 1001 (going away), gone and detached, within the timeout.
            await self._ws_endpoint.close_all(
                CloseCode.GOING_AWAY, "the master is shutting down", timeout
            )
        if self._http_runner is not None:
            await self._http_runner.cleanup()
        await self.hub.stop()
        await self.store.close()
        if self._stopped is not None:
            self._stopped.set()
        if started:
            log.info("stopped")

    async def run_until_signalled(self, on_started: Callable[[], None] | None = None) -> None:
        """Serve until SIGTERM / SIGINT, then shut down in order."""
        await self.start()
        if on_started is not None:
            on_started()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: loop.create_task(self.stop()))
        assert self._stopped is not None
        await self._stopped.wait()


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _bound_port(addresses: list[Any], default: int) -> int:
    for address in addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    return default
