"""The WebSocket endpoint ``/v1/ws`` (notes §2, §5): upgrade, hello, attach, frames, detach.

Each connection is a :class:`Connection`, driven by picows' callbacks as the socket is read:
no task waits on it. :meth:`WebSocketEndpoint.route` takes or refuses the upgrade request
(path, origin, subprotocol) before the 101. Then the first message must be a
``connection.hello`` within the hello timeout (4408), of a version this master speaks
(4426), with a credential (4401 / 4403); the attach (4404 / 4409 / 4410; 1013 when the store
cannot be reached: nothing is attached, the peer reattaches after a backoff) is the
connection's one task. Attached, each message is checked against the rate limit, decoded
and offered to its session's inbox; while that inbox is full the socket is not read. A
close, a lost socket or a missed pong detaches.

The connection is also its participant's :class:`~relay.fanout.Sink`: the outbox frames what
it sends and writes it to the transport itself. Nothing here parses JSON twice: a text
message's bytes are checked as UTF-8 once, decoded once, and those bytes are what gets
logged and relayed.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
import time
from collections.abc import Coroutine
from http import HTTPStatus
from typing import Any, Final

import msgspec
import structlog
from multidict import CIMultiDict
from picows import (
    WSFrame,
    WSListener,
    WSMsgType,
    WSTransport,
    WSUpgradeRequest,
    WSUpgradeResponse,
    WSUpgradeResponseWithListener,
)

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

from .fanout import Data, wake_all
from .hub import Hub
from .session import Participant, Session

__all__ = [
    "WS_PATH",
    "Connection",
    "RateLimiter",
    "WebSocketEndpoint",
    "close_reason",
    "peer_log",
]

log = structlog.get_logger("rawp.ws")

WS_PATH: Final = "/v1/ws"
_PATH: Final = WS_PATH.encode()
_MAX_CLOSE_REASON_BYTES: Final = 123
_FLUSH_BEFORE_CLOSE_S: Final = 1.0
_CLOSE_TIMEOUT_S: Final = 10.0  # a close we sent waits this long for the peer's (RFC 6455 §7)
_FAIL_TIMEOUT_S: Final = 1.0  # the same after a protocol error: the peer is broken
_MAX_PENDING: Final = 64  # messages read while attaching before the socket is not read
_MAX_PENDING_BYTES: Final = 1 << 20  # ... or their bytes
# Fragments of one message: its size is bounded by max_frame_bytes, but empty fragments cost
# nothing against that bound, and a peer could grow the list of parts for ever with them.
_MAX_FRAGMENTS: Final = 4096
# What the transport buffers before the outbox waits (and the send queue's bound counts,
# notes §11): the bytes a slow consumer costs beyond its send queue.
_WRITE_LIMIT: Final = 32 * 1024
_connection_ids = itertools.count(1)

# What a connection is doing: input is read in the first three phases, frames are written
# in the first four.
_HELLO: Final = 0  # upgraded, waiting for connection.hello
_ATTACHING: Final = 1  # the hello is being authenticated and attached
_ATTACHED: Final = 2  # frames go to the session
_DRAINING: Final = 3  # reads nothing more: what is queued goes out, then the close
_CLOSING: Final = 4  # a close was sent or received, or the socket is gone

_TEXT: Final = WSMsgType.TEXT
_BINARY: Final = WSMsgType.BINARY
_CONTINUATION: Final = WSMsgType.CONTINUATION
_CLOSE: Final = WSMsgType.CLOSE
_PING: Final = WSMsgType.PING
_PONG: Final = WSMsgType.PONG
# Close codes a peer may send (RFC 6455 §7.4): 1004-1006 and 1015 are reserved, below 1000
# and from 5000 on undefined.
_SENDABLE_CLOSE: Final = frozenset((1000, 1001, 1002, 1003, *range(1007, 1015), *range(3000, 5000)))


class _PeerLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """picows' logger. What a peer did wrong (a broken frame, a bad upgrade request) is
    logged at info, not as the master's error; an exception in picows stays an error."""

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if level == logging.ERROR and not kwargs.get("exc_info"):
            level = logging.INFO
        super().log(level, msg, *args, **kwargs)


peer_log: Final = _PeerLog(logging.getLogger("rawp.ws.wire"), {})


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
    """The ``/v1/ws`` listener's side of every connection: which upgrades are taken, the
    live connections, their keepalive, and the attaches and detaches in flight."""

    def __init__(self, hub: Hub, *, allowed_origins: frozenset[str]) -> None:
        self.hub = hub
        self.allowed_origins = allowed_origins
        self.connections: set[Connection] = set()
        """Upgraded and not yet disconnected."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._keepalive: asyncio.Task[None] | None = None
        self.closing = False
        """Shutting down: no upgrade is taken, a connection that upgrades is closed 1001."""

    # --- the upgrade ---------------------------------------------------------------------

    def route(self, request: WSUpgradeRequest) -> WSUpgradeResponseWithListener:
        """Take the upgrade to ``/v1/ws`` as a :class:`Connection`, or refuse it: a wrong
        path (404), not an upgrade (426), a foreign browser origin (403), foreign
        subprotocols only (400) (notes §2), or the master is shutting down (503). picows then
        checks the WebSocket headers (400)."""
        if self.closing:
            return _refusal(HTTPStatus.SERVICE_UNAVAILABLE, "the master is shutting down\n")
        if request.path.split(b"?", 1)[0] != _PATH:
            return _refusal(HTTPStatus.NOT_FOUND, f"RAWP is served at {WS_PATH}\n")
        headers = request.headers
        if "websocket" not in headers.get("Upgrade", "").lower():
            return _refusal(
                HTTPStatus.UPGRADE_REQUIRED,
                "this is a WebSocket endpoint: upgrade to websocket\n",
                (("Upgrade", "websocket"), ("Connection", "Upgrade")),
            )
        origins = headers.getall("Origin", [])
        if len(origins) > 1:
            # A browser sends one; two are a forgery whichever one we would read.
            return _refusal(HTTPStatus.FORBIDDEN, "more than one Origin header\n")
        if origins and origins[0] not in self.allowed_origins:
            shown = names.one_line(origins[0][:200])
            return _refusal(HTTPStatus.FORBIDDEN, f"origin {shown} is not allowed\n")
        offered = _offered_subprotocols(headers)
        if offered and SUBPROTOCOL not in offered:
            return _refusal(
                HTTPStatus.BAD_REQUEST, f"this master speaks the {SUBPROTOCOL} subprotocol\n"
            )
        return WSUpgradeResponseWithListener(
            WSUpgradeResponse.create_101_response(_accepted_headers(offered)), Connection(self)
        )

    # --- life ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the keepalive sweep (notes §2: a ping after a quiet interval)."""
        if self._keepalive is None:
            self._keepalive = asyncio.get_running_loop().create_task(self._sweep())

    async def close_all(self, code: int, reason: str, timeout: float) -> None:
        """Close every connection with ``code`` and wait, up to ``timeout`` in all, for them
        to be gone and their detaches done (the shutdown: 1001); then cut what is left."""
        self.closing = True
        if self._keepalive is not None:
            self._keepalive.cancel()
        for connection in list(self.connections):
            connection.shut(code, reason)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        # Each connection that goes spawns its detach: wait for both until none is left.
        while self.connections or self._tasks:
            left = deadline - loop.time()
            if left <= 0:
                break
            waiting = [*self._tasks, *(c.gone() for c in self.connections)]
            await asyncio.wait(waiting, timeout=left)
        cut = list(self.connections)
        for connection in cut:
            connection.abort()
        if cut:  # their disconnects (and the detaches those spawn) come a loop step later
            await asyncio.wait([c.gone() for c in cut], timeout=1.0)
        late = list(self._tasks)
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)

    def spawn(self, work: Coroutine[Any, Any, None], context: contextvars.Context | None) -> None:
        """Run one attach or detach; the shutdown waits for it."""
        task = asyncio.get_running_loop().create_task(work, context=context)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _sweep(self) -> None:
        """Every half of the shorter of the two heartbeat settings: ping the connections
        that sent nothing for the interval, close those whose ping went unanswered for the
        timeout (1011, then detached). One timer for the node, not one per connection."""
        settings = self.hub.settings
        interval, timeout = settings.heartbeat_interval_s, settings.heartbeat_timeout_s
        period = max(0.05, min(interval, timeout) / 2)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            for connection in list(self.connections):
                try:
                    connection.keepalive(now, interval, timeout)
                except Exception:  # one connection's failure must not end the node's sweep
                    log.exception("keepalive_failed", conn=connection.id)


class Connection(WSListener):
    """One connection of ``/v1/ws``, from the 101 to its detach; also the outbox's sink."""

    __slots__ = (
        "_context",
        "_done",
        "_drainers",
        "_gone",
        "_heard",
        "_limiter",
        "_part_size",
        "_part_text",
        "_parts",
        "_pending",
        "_pending_bytes",
        "_pending_full",
        "_ping_at",
        "_quiet_since",
        "_raw",
        "_reading_paused",
        "_room",
        "_timer",
        "close_code",
        "endpoint",
        "id",
        "participant",
        "paused",
        "phase",
        "session",
        "transport",
    )

    def __init__(self, endpoint: WebSocketEndpoint) -> None:
        self.endpoint = endpoint
        self.id = next(_connection_ids)
        self.phase = _HELLO
        self.transport: WSTransport | None = None
        self._raw: asyncio.Transport | None = None
        self.session: Session | None = None
        self.participant: Participant | None = None
        self.close_code: int | None = None
        """The close code sent or received (None: the socket was cut)."""
        self.paused = False
        """The transport's write buffer is over its limit: the outbox waits."""
        self._gone = False
        self._done: asyncio.Future[None] | None = None  # close() callers, until gone
        self._drainers: list[asyncio.Future[None]] | None = None
        self._timer: asyncio.TimerHandle | None = None  # the hello's, or a close's
        self._parts: list[bytes] | None = None  # a fragmented message so far
        self._part_text = True
        self._part_size = 0
        self._pending: list[tuple[bytes, bool]] | None = None  # read while attaching
        self._pending_bytes = 0
        self._room: asyncio.Task[None] | None = None  # waits for a full inbox to take more
        self._limiter: RateLimiter | None = None
        self._context: contextvars.Context | None = None  # logs name the session once attached
        self._pending_full = False  # what was read while attaching reached its bound
        self._reading_paused = False  # the socket is not read (pending full, or inbox full)
        self._heard = True
        self._quiet_since = 0.0
        self._ping_at: float | None = None

    # --- picows' callbacks ---------------------------------------------------------------

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport
        self._raw = raw = transport.underlying_transport
        raw.set_write_buffer_limits(_WRITE_LIMIT)
        self.endpoint.connections.add(self)
        if self.endpoint.closing:  # upgraded while the master shuts down
            self.shut(CloseCode.GOING_AWAY, "the master is shutting down")
            return
        settings = self.endpoint.hub.settings
        self._timer = asyncio.get_running_loop().call_later(
            settings.hello_timeout_s, self._hello_late
        )

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        self._heard = True
        kind = frame.msg_type
        if frame.rsv1 or frame.rsv2 or frame.rsv3:
            self.fail(CloseCode.PROTOCOL_ERROR, "reserved bits set without an extension")
        elif kind is _TEXT or kind is _BINARY or kind is _CONTINUATION:
            if self.phase >= _DRAINING:
                return
            if kind is _CONTINUATION:
                self._continued(frame)
            elif self._parts is not None:
                self.fail(CloseCode.PROTOCOL_ERROR, "a new message inside a fragmented one")
            elif frame.fin:
                self.message(frame.get_payload_as_bytes(), kind is _TEXT)
            else:
                self._parts = [frame.get_payload_as_bytes()]
                self._part_text = kind is _TEXT
                self._part_size = frame.payload_size
        elif kind is _CLOSE:
            code = _code_of(frame.get_close_code()) if frame.payload_size >= 2 else None
            if code is not None and code not in _SENDABLE_CLOSE:
                self.fail(CloseCode.PROTOCOL_ERROR, f"close code {code} may not be sent")
            else:
                self.peer_closed(code)
        elif kind is _PING:
            # Answered while the peer reads what we write: a peer that pings and never reads
            # would otherwise grow our write buffer with pongs.
            if not self.paused and self.phase < _CLOSING:
                transport.send_pong(frame.get_payload_as_bytes())
        elif kind is _PONG:
            self._ping_at = None

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        self._gone = True
        self.phase = _CLOSING
        self.endpoint.connections.discard(self)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._parts = None  # (what was read while attaching is the attach's to handle)
        if self._room is not None:
            self._room.cancel()
            self._room = None
        if self.close_code is None:
            handshake = transport.close_handshake
            if handshake is not None:
                info = handshake.sent if handshake.sent is not None else handshake.recv
                if info is not None:
                    self.close_code = _code_of(info.code)
        self._wake_drainers()
        if self._done is not None and not self._done.done():
            self._done.set_result(None)
        if self.participant is not None:
            self.endpoint.spawn(self._detach(), self._context)
        # (an attach still in flight detaches when it returns: it finds the socket gone)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._wake_drainers()

    # --- the outbox's sink ---------------------------------------------------------------

    @property
    def open(self) -> bool:
        """Frames may still be written: no close sent or received, the socket is up."""
        return self.phase < _CLOSING and not self._close_sent_by_picows()

    @property
    def writable(self) -> bool:
        """Open, and the transport takes more now."""
        return self.phase < _CLOSING and not self.paused and not self._close_sent_by_picows()

    def _close_sent_by_picows(self) -> bool:
        """picows closes by itself on a frame it cannot parse (1002, 1009, …) or an exception
        in a callback (1011): nothing may follow that close."""
        transport = self.transport
        if transport is not None and transport.is_close_frame_sent and self.phase < _CLOSING:
            self.phase = _CLOSING
            self._read_as_due()
            return True
        return False

    @property
    def buffered(self) -> int:
        """Bytes written and not yet taken by the socket (at most about ``_WRITE_LIMIT``)."""
        return self._raw.get_write_buffer_size() if self._raw is not None else 0

    def write(self, data: Data | memoryview) -> None:
        """Hand whole, already framed WebSocket frames to the transport."""
        assert self._raw is not None
        self._raw.write(data)

    async def drain(self) -> None:
        """Return once the transport takes more again, or the connection is closing."""
        if self.paused and self.phase < _CLOSING:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            if self._drainers is None:
                self._drainers = []
            self._drainers.append(future)
            await future

    async def close(self, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        """Close with ``code`` (RFC 6455 §7) and wait until the socket is gone."""
        self.shut(code, reason)
        await self.wait_gone()

    # --- closing -------------------------------------------------------------------------

    def shut(self, code: int, reason: str, *, timeout: float = _CLOSE_TIMEOUT_S) -> None:
        """Send a close frame (once): nothing is read or written after it; the socket is
        closed when the peer answers with its own, or after ``timeout``."""
        if self.phase == _CLOSING or self.transport is None or self._close_sent_by_picows():
            return
        self.phase = _CLOSING
        self.close_code = int(code)
        self._parts = None
        self._wake_drainers()
        self._read_as_due()  # the peer's answer must be read
        self.transport.send_close(code, close_reason(reason))  # type: ignore[arg-type]
        self._abort_in(timeout)

    def _abort_in(self, timeout: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(timeout, self.abort)

    def fail(self, code: int, reason: str) -> None:
        """Fail the connection (RFC 6455 §7.1.7): the peer broke the protocol."""
        self.shut(code, reason, timeout=_FAIL_TIMEOUT_S)

    def abort(self) -> None:
        """Cut the socket now (a peer that does not answer our close)."""
        if not self._gone and self.transport is not None:
            self.transport.disconnect(graceful=False)

    def gone(self) -> asyncio.Future[None]:
        """Done once the socket is closed."""
        if self._done is None:
            self._done = asyncio.get_running_loop().create_future()
            if self._gone:
                self._done.set_result(None)
        return self._done

    async def wait_gone(self) -> None:
        """Return once the socket is closed."""
        if not self._gone:
            await asyncio.shield(self.gone())

    def peer_closed(self, code: int | None) -> None:
        """The peer's close frame (``code`` None: it had none): echoed (RFC 6455 §5.5.1)
        unless ours was sent first, then our side of the socket is closed."""
        assert self.transport is not None
        if self.phase != _CLOSING and not self._close_sent_by_picows():
            self.phase = _CLOSING
            self._parts = None
            self._wake_drainers()
            self._read_as_due()
            self.close_code = int(CloseCode.NO_STATUS_RECEIVED) if code is None else code
            if code is not None:
                self.transport.send_close(code)  # type: ignore[arg-type]
            else:
                self.transport.send(_CLOSE, b"")
        self.transport.disconnect()
        # A peer that stops reading keeps a graceful close from ever finishing: cut it then.
        self._abort_in(_FAIL_TIMEOUT_S)

    def _wake_drainers(self) -> None:
        drainers, self._drainers = self._drainers, None
        wake_all(drainers)

    def keepalive(self, now: float, interval: float, timeout: float) -> None:
        """One round of the endpoint's keepalive sweep for this connection."""
        if self.phase >= _DRAINING or self.transport is None:
            return
        if self._reading_paused:
            # Not reading (its session's inbox is full): its pong could not be read either.
            self._heard = True
            self._ping_at = None
            return
        if self._ping_at is not None:
            if now - self._ping_at >= timeout:
                # A peer that answers no ping will not answer a close either.
                self.fail(CloseCode.INTERNAL_ERROR, "keepalive ping timeout")
            return
        if self._heard:
            self._heard = False
            self._quiet_since = now
        elif now - self._quiet_since >= interval:
            self._ping_at = now
            self.transport.send_ping()

    # --- messages ------------------------------------------------------------------------

    def _continued(self, frame: WSFrame) -> None:
        parts = self._parts
        if parts is None:
            self.fail(CloseCode.PROTOCOL_ERROR, "a continuation without a message to continue")
            return
        self._part_size += frame.payload_size
        if self._part_size > self.endpoint.hub.settings.max_frame_bytes:
            self.fail(CloseCode.MESSAGE_TOO_BIG, "message over max_frame_bytes")
            return
        if len(parts) >= _MAX_FRAGMENTS:
            self.fail(CloseCode.MESSAGE_TOO_BIG, f"message in more than {_MAX_FRAGMENTS} fragments")
            return
        parts.append(frame.get_payload_as_bytes())
        if frame.fin:
            self._parts = None
            self.message(b"".join(parts), self._part_text)

    def message(self, data: bytes, text: bool) -> None:
        """One whole message as read (its fragments joined), by what the connection is doing:
        the hello, kept for after the attach, or a frame for the session."""
        if text and not data.isascii():  # (ASCII is UTF-8: checked without a copy)
            try:
                data.decode()
            except UnicodeDecodeError:
                self.fail(CloseCode.INVALID_DATA, "invalid UTF-8 in a text message")
                return
        phase = self.phase
        if phase == _ATTACHED:
            self._received(data, text)
        elif phase == _HELLO:
            self._hello(data, text)
        elif phase == _ATTACHING:
            pending = self._pending
            assert pending is not None
            pending.append((data, text))
            self._pending_bytes += len(data)
            if len(pending) >= _MAX_PENDING or self._pending_bytes >= _MAX_PENDING_BYTES:
                self._pending_full = True
                self._read_as_due()  # not until attached

    def _hello(self, data: bytes, text: bool) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        try:
            hello = _decode_hello(data, text)
        except HandshakeError as exc:
            self._refuse(exc)
            return
        self.phase = _ATTACHING
        self._pending = []
        self.endpoint.spawn(self._attach(hello), None)

    def _hello_late(self) -> None:
        self._timer = None
        if self.phase == _HELLO:
            self._refuse(HelloTimeout("no connection.hello within the handshake timeout"))

    def _refuse(self, exc: HandshakeError) -> None:
        self.endpoint.hub.metrics.closes.labels(str(exc.close_code)).inc()
        log.info("handshake_refused", conn=self.id, code=int(exc.close_code), reason=exc.message)
        self.shut(exc.close_code, exc.message)

    def _read_as_due(self) -> None:
        """Read the socket, or not: not while what was read behind the hello fills its bound
        or the session's inbox is full (``_room``); always once closing (the peer's close)."""
        paused = self.phase < _CLOSING and (self._pending_full or self._room is not None)
        raw = self._raw
        if paused != self._reading_paused and raw is not None and not self._gone:
            self._reading_paused = paused
            if paused:
                raw.pause_reading()
            else:
                raw.resume_reading()

    async def _attach(self, hello: Hello) -> None:
        """Authenticate and attach (the connection's one task); then read what came."""
        hub = self.endpoint.hub
        try:
            principal = await hub.auth.authenticate(hello.payload.token)
            session, participant = await hub.attach(self, hello, principal)
        except HandshakeError as exc:
            self._refuse(exc)
            return
        except StoreError as exc:
            # The store failed mid-attach (an outage, a fenced lease): nothing was attached.
            code = CloseCode.TRY_AGAIN_LATER
            hub.metrics.closes.labels(str(int(code))).inc()
            log.warning("attach_store_unavailable", conn=self.id, error=str(exc))
            self.shut(code, "the store is unavailable: reattach later")
            return
        except Exception:
            log.exception("attach_failed", conn=self.id)
            self.shut(CloseCode.INTERNAL_ERROR, "internal error")
            return
        self.session, self.participant = session, participant
        _forget_upgrade_headers(self.transport)
        # Bound once attached: what this connection logs from here on names its session and
        # participant (the detach runs in this context too).
        structlog.contextvars.bind_contextvars(
            conn=self.id,
            session_id=session.id,
            role=participant.role,
            participant_id=participant.id,
        )
        self._context = contextvars.copy_context()
        log.info("attached", generation=participant.generation)
        hub.held_credentials.hold(participant.principal)  # [trust] checked until detached
        settings = hub.settings
        self._limiter = RateLimiter(
            settings.rate_frames_per_s, settings.rate_bytes_per_s, settings.rate_burst_s
        )
        pending, self._pending = self._pending, None
        if self.phase == _ATTACHING:
            self.phase = _ATTACHED
        # What came behind the hello is handled now, in order; also when the peer closed
        # meanwhile: what it sent before its close is not lost.
        for data, text in pending or ():
            if self.phase == _DRAINING or participant.fenced:
                break
            self._context.run(self._received, data, text)
        self._pending_full = False
        self._read_as_due()
        if self._gone:
            await self._detach()

    async def _detach(self) -> None:
        hub = self.endpoint.hub
        participant, session = self.participant, self.session
        assert participant is not None
        assert session is not None
        self.participant = None
        hub.held_credentials.release(participant.principal)
        hub.metrics.disconnected(participant.role)
        try:
            await session.detach(participant, finalize_client=not hub.shutting_down)
        except Exception:
            log.exception("detach_failed")
        # (1006: cut without a close frame either way, as RFC 6455 §7.1.5 reports it)
        log.info("detached", code=self.close_code or int(CloseCode.ABNORMAL_CLOSURE))

    def _received(self, raw: bytes, text: bool) -> None:
        """One message of an attached participant: limits, decode, then its session."""
        participant = self.participant
        session = self.session
        limiter = self._limiter
        assert participant is not None
        assert session is not None
        assert limiter is not None
        if participant.fenced:
            return  # superseded or dropped: whoever fenced it closes the socket
        if not limiter.allow(len(raw)):  # binary messages count too: each costs an answer
            settings = self.endpoint.hub.settings
            if limiter.strikes >= settings.rate_strikes_to_close:
                if self.phase == _ATTACHED:  # (not when it is closing anyway)
                    self.endpoint.hub.metrics.closes.labels(str(CloseCode.POLICY_VIOLATION)).inc()
                    self.phase = _DRAINING  # read nothing more; errors go out, then the close
                    self.endpoint.spawn(self._close_after_errors(), self._context)
                return
            participant.send_error(
                RateLimited("too many frames or bytes per second"), ref_message_id=_ref_of(raw)
            )
            return
        if not text:
            participant.send_error(UnsupportedData("binary messages are not RAWP frames"))
            return
        try:
            frame = codec.decode_received(raw)
        except ProtocolError as exc:
            participant.send_error(exc, ref_message_id=_ref_of(raw))
            return
        if frame.session_id != session.id:
            participant.send_error(
                InvalidFrame(f"session_id {frame.session_id} is not this connection's session"),
                ref_message_id=frame.message_id,
            )
            return
        if isinstance(frame, Ack):
            participant.ack(frame.payload.last_seq)
            return
        if not session.offer(participant, frame, raw) and self._room is None:
            # The inbox is full: read no more from this socket until it has room.
            self._room = asyncio.get_running_loop().create_task(
                self._read_on(session), context=self._context
            )
            self._read_as_due()

    async def _read_on(self, session: Session) -> None:
        try:
            await session.room()
        finally:
            self._room = None
            self._read_as_due()

    async def _close_after_errors(self) -> None:
        """The rate_limited errors queued so far go out before the close (§11)."""
        participant = self.participant
        if participant is not None:
            await participant.outbox.drain(_FLUSH_BEFORE_CLOSE_S)
        self.shut(CloseCode.POLICY_VIOLATION, "rate limit exceeded")


def close_reason(text: str) -> str:
    """``text`` as a close reason: one line, at most 123 bytes of UTF-8 (RFC 6455 §5.5).

    Refusals echo received text (a protocol version, a session id): cut by characters, a
    non-ASCII one would overflow the control frame and fail the close itself.
    """
    data = names.one_line(text).encode()[:_MAX_CLOSE_REASON_BYTES]
    return data.decode(errors="ignore")  # a character cut in half is dropped


def _code_of(code: Any) -> int:
    """A close code as picows hands it: its enum member, or the bare number for codes the
    enum does not name (4409)."""
    return int(getattr(code, "value", code))


def _decode_hello(data: bytes, text: bool) -> Hello:
    """The first message as a ``connection.hello`` of 1.0.x, or the refusal to close with."""
    if not text:
        raise MalformedHello("the first frame must be a connection.hello text message")
    try:
        hello = codec.decode(data)
    except ProtocolError as exc:
        raise MalformedHello(f"invalid connection.hello: {exc.message}") from None
    if not isinstance(hello, Hello):
        raise MalformedHello("the first frame must be connection.hello")
    version = hello.payload.protocol_version
    if version.split(".")[:2] != ["1", "0"]:
        raise ProtocolVersionMismatch(f"protocol_version {version} is not supported; use 1.0.x")
    return hello


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


_NO_HEADERS: Final[CIMultiDict[str]] = CIMultiDict()  # shared once attached; nothing writes it


def _forget_upgrade_headers(transport: WSTransport | None) -> None:
    """Drop the upgrade request's and response's headers once attached: ~2 KiB per
    connection that nothing reads after the handshake (``make bench ARGS=memory``)."""
    if transport is None:
        return
    for message in (transport.request, transport.response):
        if message is not None:
            message.headers = _NO_HEADERS


def _offered_subprotocols(headers: CIMultiDict[str]) -> list[str]:
    return [
        token.strip()
        for value in headers.getall("Sec-WebSocket-Protocol", [])
        for token in value.split(",")
        if token.strip()
    ]


_SERVER: Final = (("Server", "rawp"),)
_WITH_SUBPROTOCOL: Final = (("Server", "rawp"), ("Sec-WebSocket-Protocol", SUBPROTOCOL))


def _accepted_headers(offered: list[str]) -> tuple[tuple[str, str], ...]:
    """The 101's headers: ``rawp.1`` named when offered; a handshake that offers none is
    accepted as rawp.1 (foreign-only offers were refused by the route)."""
    return _WITH_SUBPROTOCOL if SUBPROTOCOL in offered else _SERVER


def _refusal(
    status: HTTPStatus, text: str, headers: tuple[tuple[str, str], ...] = ()
) -> WSUpgradeResponseWithListener:
    """An HTTP answer instead of the 101: the status and one line of plain text."""
    response = WSUpgradeResponse.create_error_response(
        status,
        text.encode(),
        (("Server", "rawp"), ("Content-Type", "text/plain; charset=utf-8"), *headers),
    )
    return WSUpgradeResponseWithListener(response, None)
