"""The WebSocket endpoint ``/v1/ws`` (notes §2, §5): handshake, credentials, reader loop.

One coroutine per connection: wait for ``connection.hello`` (4408 after the timeout), check
version (4426) and credential (4401 / 4403), attach (4404 / 4409 / 4410; 1013 when the store
cannot be reached: nothing is attached, the peer reattaches after a backoff), then read frames
until the socket closes and hand each to the session. Nothing here parses JSON twice: the
text message is encoded to bytes once and those bytes are what gets logged and relayed.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from http import HTTPStatus
from typing import Final

import msgspec
import structlog
from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from protocol import codec, names
from protocol.errors import (
    CloseCode,
    HandshakeError,
    HelloTimeout,
    InvalidFrame,
    MalformedHello,
    ProtocolError,
    ProtocolVersionMismatch,
    RateLimited,
    StoreError,
    UnsupportedData,
)
from protocol.frames import SUBPROTOCOL, Ack, Hello

from .hub import Hub
from .session import Participant, Session

__all__ = ["WS_PATH", "RateLimiter", "WebSocketEndpoint", "close_reason"]

log = structlog.get_logger("rawp.ws")

WS_PATH: Final = "/v1/ws"
_POLICY: Final = CloseCode.POLICY_VIOLATION
_MAX_CLOSE_REASON_BYTES: Final = 123
_FLUSH_BEFORE_CLOSE_S: Final = 1.0
_connection_ids = itertools.count(1)
_NO_HEADERS: Final = Headers()  # shared by every attached connection; nothing writes to it


class RateLimiter:
    """Token buckets for frames/s and bytes/s of one connection (notes §11)."""

    def __init__(self, frames_per_s: float, bytes_per_s: float, burst_s: float) -> None:
        self._rates = (frames_per_s, bytes_per_s)
        self._caps = (frames_per_s * burst_s, bytes_per_s * burst_s)
        self._tokens = list(self._caps)
        self._at = time.monotonic()
        self.strikes = 0

    def allow(self, size: int) -> bool:
        """Spend one frame and ``size`` bytes; False (and a strike) when over the limit."""
        now = time.monotonic()
        elapsed, self._at = now - self._at, now
        for i in (0, 1):
            self._tokens[i] = min(self._caps[i], self._tokens[i] + elapsed * self._rates[i])
        if self._tokens[0] >= 1 and self._tokens[1] >= size:
            self._tokens[0] -= 1
            self._tokens[1] -= size
            self.strikes = 0
            return True
        self.strikes += 1
        return False


class WebSocketEndpoint:
    """Callbacks for ``websockets.asyncio.server.serve``."""

    def __init__(self, hub: Hub, *, allowed_origins: frozenset[str]) -> None:
        self.hub = hub
        self.allowed_origins = allowed_origins

    def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        """Refuse wrong paths, foreign browser origins and foreign subprotocols (notes §2)."""
        if request.path.split("?", 1)[0] != WS_PATH:
            return connection.respond(HTTPStatus.NOT_FOUND, f"RAWP is served at {WS_PATH}\n")
        origins = request.headers.get_all("Origin")
        if len(origins) > 1:
            # A browser sends one; two are a forgery whichever one we would read.
            return connection.respond(HTTPStatus.FORBIDDEN, "more than one Origin header\n")
        if origins and origins[0] not in self.allowed_origins:
            shown = names.one_line(origins[0][:200])
            return connection.respond(HTTPStatus.FORBIDDEN, f"origin {shown} is not allowed\n")
        offered = _offered_subprotocols(request.headers)
        if offered and SUBPROTOCOL not in offered:
            return connection.respond(
                HTTPStatus.BAD_REQUEST, f"this master speaks the {SUBPROTOCOL} subprotocol\n"
            )
        return None

    @staticmethod
    def process_response(
        connection: ServerConnection, request: Request, response: Response
    ) -> None:
        """``rawp.1`` named in the 101 when offered; a handshake that offers none is accepted
        as rawp.1 (foreign-only offers were refused by :meth:`process_request`).

        Not websockets' ``select_subprotocol``: the closure it wraps that callback in holds
        the connection that holds it, so every closed connection was a reference cycle left
        for the collector, which then freed a whole round of closed connections in the next
        burst of attaches (issue 16; bench/results/storm-profile.md round 11)."""
        if response.status_code == HTTPStatus.SWITCHING_PROTOCOLS and SUBPROTOCOL in (
            _offered_subprotocols(request.headers)
        ):
            response.headers["Sec-WebSocket-Protocol"] = SUBPROTOCOL

    async def handler(self, connection: ServerConnection) -> None:
        """One connection, from hello to close."""
        hub = self.hub
        conn = next(_connection_ids)
        try:
            attached = await self._handshake(connection)
        except HandshakeError as exc:
            hub.metrics.closes.labels(str(exc.close_code)).inc()
            log.info("handshake_refused", conn=conn, code=int(exc.close_code), reason=exc.message)
            await connection.close(exc.close_code, close_reason(exc.message))
            return
        except ConnectionClosed:
            return
        except StoreError as exc:
            # The store failed mid-attach (an outage, a fenced lease): nothing was attached.
            code = CloseCode.TRY_AGAIN_LATER
            hub.metrics.closes.labels(str(int(code))).inc()
            log.warning("attach_store_unavailable", conn=conn, error=str(exc))
            await connection.close(code, "the store is unavailable: reattach later")
            return
        session, participant = attached
        _forget_upgrade_headers(connection)
        # Bound once attached (one context copy per connection, not two): what this
        # connection logs from here on names its session and participant.
        structlog.contextvars.bind_contextvars(
            conn=conn, session_id=session.id, role=participant.role, participant_id=participant.id
        )
        log.info("attached", generation=participant.generation)
        hub.held_credentials.hold(participant.principal)  # [trust] checked until detached
        try:
            await self._read(connection, session, participant)
        except ConnectionClosed:
            pass
        finally:
            hub.held_credentials.release(participant.principal)
            hub.metrics.disconnected(participant.role)
            await session.detach(participant, finalize_client=not hub.shutting_down)
            log.info("detached", code=connection.close_code)
            structlog.contextvars.clear_contextvars()

    async def _handshake(self, connection: ServerConnection) -> tuple[Session, Participant]:
        settings = self.hub.settings
        try:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for wraps recv() in a task
            async with asyncio.timeout(settings.hello_timeout_s):
                first = await connection.recv()
        except TimeoutError:
            raise HelloTimeout("no connection.hello within the handshake timeout") from None
        if isinstance(first, bytes):
            raise MalformedHello("the first frame must be a connection.hello text message")
        try:
            hello = codec.decode(first)
        except ProtocolError as exc:
            raise MalformedHello(f"invalid connection.hello: {exc.message}") from None
        if not isinstance(hello, Hello):
            raise MalformedHello("the first frame must be connection.hello")
        version = hello.payload.protocol_version
        if version.split(".")[:2] != ["1", "0"]:
            raise ProtocolVersionMismatch(f"protocol_version {version} is not supported; use 1.0.x")
        principal = await self.hub.auth.authenticate(hello.payload.token)
        return await self.hub.attach(connection, hello, principal)

    async def _read(
        self, connection: ServerConnection, session: Session, participant: Participant
    ) -> None:
        settings = self.hub.settings
        metrics = self.hub.metrics
        limiter = RateLimiter(
            settings.rate_frames_per_s, settings.rate_bytes_per_s, settings.rate_burst_s
        )
        async for message in connection:
            if participant.fenced:
                return
            if isinstance(message, bytes):
                participant.send_error(UnsupportedData("binary messages are not RAWP frames"))
                continue
            raw = message.encode()
            if not limiter.allow(len(raw)):
                if limiter.strikes >= settings.rate_strikes_to_close:
                    metrics.closes.labels(str(_POLICY)).inc()
                    # The rate_limited errors queued so far go out before the close (§11).
                    await participant.outbox.drain(_FLUSH_BEFORE_CLOSE_S)
                    await connection.close(_POLICY, "rate limit exceeded")
                    return
                participant.send_error(
                    RateLimited("too many frames or bytes per second"), ref_message_id=_ref_of(raw)
                )
                continue
            try:
                frame = codec.decode(raw)
            except ProtocolError as exc:
                participant.send_error(exc, ref_message_id=_ref_of(raw))
                continue
            if frame.session_id != session.id:
                participant.send_error(
                    InvalidFrame(f"session_id {frame.session_id} is not this connection's session"),
                    ref_message_id=frame.message_id,
                )
                continue
            if isinstance(frame, Ack):
                participant.ack(frame.payload.last_seq)
                continue
            await session.submit(participant, frame, raw)  # counted in frames_in per batch


def close_reason(text: str) -> str:
    """``text`` as a close reason: one line, at most 123 bytes of UTF-8 (RFC 6455 §5.5).

    Refusals echo received text (a protocol version, a session id): cut by characters, a
    non-ASCII one would overflow the control frame and fail the close itself.
    """
    data = names.one_line(text).encode()[:_MAX_CLOSE_REASON_BYTES]
    return data.decode(errors="ignore")  # a character cut in half is dropped


class _Ref(msgspec.Struct):
    """Just the ``message_id`` of a frame that is refused before it is decoded."""

    message_id: str | None = None


_ref_decoder: Final = msgspec.json.Decoder(_Ref)


def _ref_of(raw: bytes) -> str | None:
    """The refused frame's ``message_id`` for ``ref_message_id`` (notes §16.3), if readable."""
    try:
        return _ref_decoder.decode(raw).message_id
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None


def _forget_upgrade_headers(connection: ServerConnection) -> None:
    """Drop the upgrade request's and response's headers once attached.

    websockets keeps both for the connection's life (``connection.request`` itself must stay:
    it marks the handshake as done); their headers are ~2 KiB per connection that nothing
    reads after the handshake — measured with ``make bench ARGS=memory`` (RSS per idle edge).
    """
    if connection.request is not None:
        connection.request.headers = _NO_HEADERS
    if connection.response is not None:
        connection.response.headers = _NO_HEADERS


def _offered_subprotocols(headers: Headers) -> list[str]:
    return [
        token.strip()
        for value in headers.get_all("Sec-WebSocket-Protocol")
        for token in value.split(",")
        if token.strip()
    ]
