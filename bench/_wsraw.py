"""A tiny RFC 6455 client on a raw asyncio transport, for load generators and fuzzing.

The ``websockets`` client parses every frame in Python objects and an ``asyncio.Queue``;
with 1,000 edges (or 3 edges reading 100,000 frames/s) the load generator would cost as
much CPU as the relay it measures. This client does the least that is correct: an HTTP/1.1
upgrade, then a frame parser over one ``bytearray`` that hands each message's bytes to a
callback (or a queue), answers pings, and records the close code. Sending masks with the
C ``apply_mask`` of websockets, and :meth:`RawWS.send_many` writes a batch of frames in one
``transport.write``.

It can also write what a well-behaved client never does (for the fuzzers): text frames
holding invalid UTF-8, reserved opcodes or bits, unmasked frames, fragments, raw bytes.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import os
import struct
from collections.abc import Callable, Iterable
from typing import Final

try:
    from websockets.speedups import apply_mask
except ImportError:  # pragma: no cover - the C extension ships with websockets wheels
    from websockets.utils import apply_mask

__all__ = [
    "BINARY",
    "CLOSE",
    "PING",
    "PONG",
    "TEXT",
    "HandshakeFailed",
    "RawWS",
    "encode_frame",
    "open_raw",
]

CONT: Final = 0x0
TEXT: Final = 0x1
BINARY: Final = 0x2
CLOSE: Final = 0x8
PING: Final = 0x9
PONG: Final = 0xA

_ZERO_KEY: Final = b"\x00\x00\x00\x00"


class HandshakeFailed(Exception):
    """The server did not answer 101 Switching Protocols."""

    def __init__(self, status: int, head: bytes) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.head = head


def encode_frame(
    opcode: int,
    payload: bytes,
    *,
    fin: bool = True,
    rsv: int = 0,
    mask: bool = True,
    random_key: bool = True,
) -> bytes:
    """One client frame. ``random_key=False`` uses a zero key (same bytes, no XOR cost)."""
    n = len(payload)
    b0 = (0x80 if fin else 0) | (rsv & 0x7) << 4 | (opcode & 0xF)
    m = 0x80 if mask else 0
    if n < 126:
        head = bytes((b0, m | n))
    elif n < 65536:
        head = struct.pack("!BBH", b0, m | 126, n)
    else:
        head = struct.pack("!BBQ", b0, m | 127, n)
    if not mask:
        return head + payload
    if not random_key:
        return head + _ZERO_KEY + payload
    key = os.urandom(4)
    return head + key + apply_mask(payload, key)


class RawWS(asyncio.Protocol):
    """One client connection. Messages go to ``on_message(data, now_ns)`` or to :meth:`recv`."""

    def __init__(
        self,
        on_message: Callable[[bytes], None] | None = None,
        *,
        random_key: bool = True,
    ) -> None:
        self.transport: asyncio.Transport | None = None
        self.on_message = on_message
        self.random_key = random_key
        self.close_code: int | None = None
        self.close_reason = ""
        self.bytes_received = 0
        self.messages: collections.deque[bytes] = collections.deque()
        self._buf = bytearray()
        self._upgraded = False
        self._fragments: list[bytes] | None = None
        loop = asyncio.get_running_loop()
        self._handshake: asyncio.Future[None] = loop.create_future()
        self._closed: asyncio.Future[None] = loop.create_future()
        self._ready = asyncio.Event()
        self._sent_close = False

    # --- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.bytes_received += len(data)
        buf = self._buf
        buf += data
        if not self._upgraded:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buf[: end + 4])
            del buf[: end + 4]
            status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0
            if status != 101:
                if not self._handshake.done():
                    self._handshake.set_exception(HandshakeFailed(status, head))
                if self.transport is not None:
                    self.transport.close()
                return
            self._upgraded = True
            if not self._handshake.done():
                self._handshake.set_result(None)
        self._parse()

    def _parse(self) -> None:
        buf = self._buf
        n = len(buf)
        pos = 0
        on_message = self.on_message
        while n - pos >= 2:
            b0 = buf[pos]
            length = buf[pos + 1] & 0x7F
            start = pos + 2
            if length == 126:
                if n - pos < 4:
                    break
                length = (buf[pos + 2] << 8) | buf[pos + 3]
                start = pos + 4
            elif length == 127:
                if n - pos < 10:
                    break
                length = int.from_bytes(buf[pos + 2 : pos + 10], "big")
                start = pos + 10
            end = start + length
            if end > n:
                break
            opcode = b0 & 0x0F
            payload = bytes(buf[start:end])
            pos = end
            if opcode in (TEXT, BINARY):
                if not b0 & 0x80:
                    self._fragments = [payload]
                    continue
                if on_message is not None:
                    on_message(payload)
                else:
                    self.messages.append(payload)
                    self._ready.set()
            elif opcode == CONT:
                if self._fragments is None:
                    continue
                self._fragments.append(payload)
                if b0 & 0x80:
                    whole = b"".join(self._fragments)
                    self._fragments = None
                    if on_message is not None:
                        on_message(whole)
                    else:
                        self.messages.append(whole)
                        self._ready.set()
            elif opcode == PING:
                self.write_frame(PONG, payload)
            elif opcode == CLOSE:
                self._got_close(payload)
        if pos:
            del buf[:pos]

    def _got_close(self, payload: bytes) -> None:
        if self.close_code is None:
            self.close_code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else 1005
            self.close_reason = payload[2:].decode("utf-8", "replace")
        if not self._sent_close:
            self._sent_close = True
            self.write_frame(CLOSE, payload[:2])
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.close_code is None:
            self.close_code = 1006
        if not self._handshake.done():
            self._handshake.set_exception(ConnectionError("closed during the handshake"))
        if not self._closed.done():
            self._closed.set_result(None)
        self._ready.set()

    # --- sending ----------------------------------------------------------------------------

    @property
    def open(self) -> bool:
        """True until the connection is closed (by either side)."""
        return not self._closed.done() and self.close_code is None

    def write_frame(self, opcode: int, payload: bytes, **options: object) -> None:
        """Write one frame (``encode_frame`` options: fin, rsv, mask, random_key)."""
        if self.transport is None or self.transport.is_closing():
            return
        options.setdefault("random_key", self.random_key)
        self.transport.write(encode_frame(opcode, payload, **options))  # type: ignore[arg-type]

    def send_text(self, data: bytes) -> None:
        """Send one text message (``data`` must be UTF-8 for a well-behaved peer)."""
        self.write_frame(TEXT, data)

    def send_many(self, messages: Iterable[bytes]) -> None:
        """Send text messages in one transport write."""
        if self.transport is None or self.transport.is_closing():
            return
        key = self.random_key
        self.transport.write(b"".join(encode_frame(TEXT, m, random_key=key) for m in messages))

    def write_raw(self, data: bytes) -> None:
        """Write bytes as they are (handshake abuse, broken framing)."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    @property
    def write_buffer_size(self) -> int:
        """Bytes written but not yet handed to the kernel."""
        return 0 if self.transport is None else self.transport.get_write_buffer_size()

    # --- receiving --------------------------------------------------------------------------

    async def recv(self, timeout: float | None = 10.0) -> bytes:
        """The next message (queue mode). Raises ConnectionError once closed and drained."""
        async with asyncio.timeout(timeout):
            while not self.messages:
                if self._closed.done():
                    raise ConnectionError(f"closed with {self.close_code}")
                self._ready.clear()
                await self._ready.wait()
        return self.messages.popleft()

    async def close(self, code: int = 1000, timeout: float = 2.0) -> int | None:
        """Closing handshake (falls back to dropping the TCP connection)."""
        if self.transport is not None and not self._sent_close and self.close_code is None:
            self._sent_close = True
            self.write_frame(CLOSE, struct.pack("!H", code))
        try:
            await asyncio.wait_for(asyncio.shield(self._closed), timeout)
        except TimeoutError:
            self.abort()
        return self.close_code

    def pause_reading(self) -> None:
        """Stop reading from the socket (a consumer that stalls)."""
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        """Read again."""
        if self.transport is not None:
            self.transport.resume_reading()

    def abort(self) -> None:
        """Drop the TCP connection without a closing handshake."""
        if self.transport is not None:
            self.transport.abort()

    async def wait_closed(self, timeout: float | None = None) -> int | None:
        """Wait until the connection is closed; returns the close code (1006: no close)."""
        await asyncio.wait_for(asyncio.shield(self._closed), timeout)
        return self.close_code


async def open_raw(
    host: str,
    port: int,
    *,
    path: str = "/v1/ws",
    subprotocol: str | None = "rawp.1",
    on_message: Callable[[bytes], None] | None = None,
    random_key: bool = True,
    extra_headers: Iterable[tuple[str, str]] = (),
    timeout: float = 10.0,
    rcvbuf: int | None = None,
) -> RawWS:
    """Connect and upgrade. Raises :class:`HandshakeFailed` on a non-101 answer.

    ``rcvbuf`` shrinks the socket's receive buffer (a slow consumer fills it sooner).
    """
    loop = asyncio.get_running_loop()
    if rcvbuf is None:
        connecting = loop.create_connection(
            lambda: RawWS(on_message, random_key=random_key), host, port
        )
    else:
        import socket

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setblocking(False)
        await loop.sock_connect(sock, (host, port))
        connecting = loop.create_connection(
            lambda: RawWS(on_message, random_key=random_key), sock=sock
        )
    transport, proto = await asyncio.wait_for(connecting, timeout)
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: {host}:{port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
    ]
    if subprotocol:
        lines.append(f"Sec-WebSocket-Protocol: {subprotocol}")
    lines += [f"{k}: {v}" for k, v in extra_headers]
    transport.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    try:
        await asyncio.wait_for(asyncio.shield(proto._handshake), timeout)
    except BaseException:
        transport.abort()
        raise
    return proto
