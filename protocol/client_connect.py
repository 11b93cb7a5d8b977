"""Opening the client's WebSocket (part of the asyncio adapter): the socket, the welcome, retries.

:func:`open_socket` makes the connection (a 4xx answer to the upgrade is
:class:`~protocol.client_errors.ConnectRefused`), :func:`read_welcome` reads the master's
answer to the hello (a refusal close is the :class:`~protocol.errors.HandshakeError` it
stands for) and :func:`dial` retries an attempt with the reconnect backoff. What is said on
the connection is the client core's business (:mod:`protocol.client_core`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, Final

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.typing import Subprotocol

from . import codec
from .client_errors import ConnectRefused, ReconnectExhausted
from .errors import HandshakeError, InvalidFrame
from .frames import SUBPROTOCOL, Welcome
from .reconnect import Backoff, ConnectionStatus, refusal

__all__ = ["dial", "open_socket", "read_welcome"]

log = logging.getLogger("rawp.client")

_RECEIVE_LIMIT: Final = 64 << 20  # a backlog may be the buffer capacity plus envelopes


async def open_socket(
    url: str,
    *,
    open_timeout: float,
    ping_interval: float | None,
    ping_timeout: float | None,
    ssl_context: ssl.SSLContext | None,
) -> ClientConnection:
    """A WebSocket to ``url`` speaking RAWP; a 4xx answer raises :class:`ConnectRefused`."""
    # websockets makes its own TLS context for wss:// only when ``ssl`` is not passed.
    tls: dict[str, Any] = {"ssl": ssl_context} if ssl_context is not None else {}
    try:
        return await connect(
            url,
            subprotocols=[Subprotocol(SUBPROTOCOL)],
            open_timeout=open_timeout,
            ping_interval=ping_interval,
            ping_timeout=ping_timeout,
            max_size=_RECEIVE_LIMIT,
            compression=None,
            proxy=None,
            user_agent_header="rawp-client",
            **tls,
        )
    except InvalidStatus as exc:
        status = exc.response.status_code
        if 400 <= status < 500:
            body = exc.response.body.decode(errors="replace").strip() if exc.response.body else ""
            raise ConnectRefused(
                f"{url} refused the WebSocket handshake: HTTP {status} {body}".strip(),
                status,
            ) from None
        raise


async def read_welcome(ws: ClientConnection, timeout: float) -> Welcome:
    """The master's ``connection.welcome``; a refusal close raises what it stands for."""
    try:
        message = await asyncio.wait_for(ws.recv(), timeout)
    except ConnectionClosed as exc:
        code = exc.rcvd.code if exc.rcvd is not None else None
        reason = exc.rcvd.reason if exc.rcvd is not None else ""
        refused = refusal(code, reason)
        if refused is not None:
            raise refused from None
        raise
    frame = codec.decode(message)
    if not isinstance(frame, Welcome):
        raise InvalidFrame(f"expected connection.welcome, got {frame.type}")
    return frame


async def dial(
    attempt_once: Callable[[], Awaitable[ClientConnection]],
    *,
    url: str,
    backoff: Backoff,
    first: bool,
    max_attempts: int | None,
    rng: random.Random | None,
    set_status: Callable[[ConnectionStatus], None],
    record_error: Callable[[BaseException | None], None],
) -> ClientConnection:
    """``attempt_once`` until it succeeds, waiting as ``backoff`` says between attempts (and
    before the first unless ``first``). A refusal ends it at once; ``max_attempts`` (else
    the backoff's) failures raise :class:`ReconnectExhausted`."""
    attempt = 0
    while True:
        if not first or attempt > 0:
            set_status(ConnectionStatus.RECONNECTING)
            await asyncio.sleep(backoff.delay(attempt, rng))
        set_status(ConnectionStatus.CONNECTING)
        try:
            ws = await attempt_once()
        except (HandshakeError, ConnectRefused) as exc:
            record_error(exc)
            set_status(ConnectionStatus.CLOSED)
            raise
        except (OSError, TimeoutError, ConnectionClosed, InvalidHandshake) as exc:
            record_error(exc)
            attempt += 1
            # The first failure of a series is worth a warning (a wrong port must not
            # retry in silence); the rest only at debug level, so a long outage is quiet.
            level = logging.WARNING if attempt == 1 else logging.DEBUG
            log.log(level, "could not connect to %s (attempt %d): %s", url, attempt, exc)
            limit = max_attempts if max_attempts is not None else backoff.max_attempts
            if limit is not None and attempt >= limit:
                set_status(ConnectionStatus.CLOSED)
                raise ReconnectExhausted(
                    f"could not reach {url} in {attempt} attempt(s): {exc}"
                ) from exc
        else:
            if attempt > 0:
                log.info("connected to %s after %d failed attempt(s)", url, attempt)
            record_error(None)
            return ws
