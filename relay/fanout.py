"""Delivery to one participant: a bounded send queue, written from the caller when it can.

The fan-out path only appends already-encoded bytes to each recipient's :class:`Outbox`; it
never waits on a socket. A recipient whose queue grows past its byte bound is a slow
consumer: it is closed with 4429 and recovers by reattaching (notes §11).

The fan-out posts (:meth:`Outbox.post`) and then flushes each recipient once per batch
(:meth:`Outbox.flush`): when no writer task is busy and the socket takes bytes without
waiting, the flush frames and writes them from the caller — no writer wake-up per recipient,
which was most of the cost of a frame sent to 1,000 edges (``make bench ARGS=churn``).
:meth:`Outbox.put` does the same at the next loop step. A writer task runs only while
there is something the caller cannot write without waiting: a paused transport, or a
message of 1 MiB or more (a backlog, written in slices); it ends once the queue is empty.
An attached, idle connection has no task (an attach created one and kept it waiting on a
future for the connection's life: a task to create and a future per edge,
``make bench ARGS=storm``; 1.8 KiB of an idle edge's memory, ``make bench ARGS=memory``).

The outbox frames what it sends itself: everything queued (up to :data:`_CHUNK` bytes) as
unfragmented, unmasked text frames (RFC 6455 §5.2, a server's frames), handed to the
:class:`Sink` in one write; it waits only while the transport is paused. One write per batch
instead of one send per frame was measured at ~2× the fan-out throughput
(``make bench ARGS=throughput``, bench/results/throughput.md).
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from collections.abc import Callable
from typing import Final, Protocol

from protocol.errors import CloseCode

__all__ = ["SLOW_CONSUMER", "Data", "Outbox", "Sink", "wake_all"]

SLOW_CONSUMER: Final = CloseCode.SLOW_CONSUMER

_CHUNK: Final = 64 * 1024  # bytes framed into one transport write
_LARGE: Final = 1 << 20  # a message this big is written in slices, never joined (a backlog)

Data = bytes | bytearray
"""An encoded frame: ``bytes``, or the ``bytearray`` a streamed backlog is assembled in."""
_SMALL_HEADERS: Final = tuple(bytes((0x81, n)) for n in range(126))  # FIN + text, no mask
_pack_16: Final = struct.Struct("!BBH").pack
_pack_64: Final = struct.Struct("!BBQ").pack


def _text_header(n: int) -> bytes:
    """The header of an unmasked, unfragmented text frame of ``n`` payload bytes."""
    if n < 126:
        return _SMALL_HEADERS[n]
    return _header(0x81, n)


def _header(first: int, n: int) -> bytes:
    """An unmasked frame header: ``first`` is FIN | opcode, ``n`` the payload length."""
    if n < 126:
        return bytes((first, n))
    if n < 65536:
        return _pack_16(first, 126, n)
    return _pack_64(first, 127, n)


class Sink(Protocol):
    """The server side of one WebSocket connection, as an outbox writes to it
    (:class:`relay.ws.Connection`; in-memory ones in the tests): framed bytes in, and when
    the transport takes them."""

    @property
    def open(self) -> bool:
        """Frames may still be written: no close sent or received, the socket is up."""
        ...

    @property
    def writable(self) -> bool:
        """Open, and the transport takes more now (its write buffer is not over its limit)."""
        ...

    def write(self, data: Data | memoryview) -> None:
        """Hand whole, already framed WebSocket frames to the transport."""
        ...

    async def drain(self) -> None:
        """Return once the transport takes more again, or the connection is no longer open."""
        ...

    async def close(self, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        """Close the connection with ``code`` (RFC 6455 §7) and wait until it is closed."""
        ...


def wake_all(waiters: list[asyncio.Future[None]] | None) -> None:
    """Resolve every future of ``waiters`` still waiting (a drain's, a paused writer's)."""
    for future in waiters or ():
        if not future.done():
            future.set_result(None)


def _sent_nowhere(seq: int) -> None:
    """A closed outbox's ``on_sent``."""


def _nothing() -> None:
    """A closed outbox's ``on_overflow``."""


class Outbox:
    """Bounded, ordered send queue of one connection.

    ``on_sent(seq)`` is called after each frame that carries a log seq was written, so the
    participant's cursor follows what actually left for the socket.

    An idle outbox holds no task, future or event: with thousands of idle edges per master,
    two ``asyncio.Event`` (a deque each) per connection were ~1.3 KiB of the per-edge memory
    (``make bench ARGS=memory``).
    """

    def __init__(
        self,
        sink: Sink,
        *,
        limit_bytes: int,
        on_sent: Callable[[int], None],
        on_overflow: Callable[[], None],
    ) -> None:
        self._sink = sink
        self._limit = limit_bytes
        self._on_sent = on_sent
        self._on_overflow = on_overflow
        self._queue: deque[tuple[Data, int]] = deque()
        self._bytes = 0
        self._allowance = 0  # bytes queued before start(): see start()
        self._idle_waiters: list[asyncio.Future[None]] | None = None  # drain() callers
        self._started = False
        self._flush_due = False  # a flush is scheduled for the next loop step
        self._closed = False
        self._task: asyncio.Task[None] | None = None  # the writer, while it has work

    @property
    def queued_bytes(self) -> int:
        """Bytes waiting to be written."""
        return self._bytes

    @property
    def closed(self) -> bool:
        """True once the outbox accepts nothing more."""
        return self._closed

    def start(self) -> None:
        """Start writing: what is queued goes out at the next loop step (or through the
        writer task), or sooner with the session's next flush.

        What was queued before the start (the welcome and the reattach backlog, which the
        participant's buffer policy already bounds) does not count against the send bound.
        """
        if not self._started and not self._closed:
            self._started = True
            self._allowance = self._bytes
            # Not from inside the attach: written with the loop step's other writes, the
            # welcome cost the master ~5 % less CPU per attach on either loop (make bench
            # ARGS=storm; a write made in the middle of handling a read costs more).
            self._flush_soon()

    def put(self, data: Data, seq: int = 0) -> None:
        """Queue one frame (seq 0: not a log entry); it is written at the next loop step,
        with whatever else is queued by then (several errors of one step: one write)."""
        if self.post(data, seq) and self._started:
            self._flush_soon()

    def _flush_soon(self) -> None:
        if not self._flush_due:
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush_due_now)

    def _flush_due_now(self) -> None:
        self._flush_due = False
        self.flush()

    def post(self, data: Data, seq: int = 0) -> bool:
        """Queue one frame without waking the writer: :meth:`flush` must follow. Never blocks.

        The fan-out posts a batch to every recipient and then flushes each once, so a frame
        to N recipients costs N queue appends and N socket writes, not N writer wake-ups.
        False when the outbox is closed (or was just closed as a slow consumer).
        """
        if self._closed:
            return False
        self._queue.append((data, seq))
        self._bytes += len(data)
        if self._started and self._bytes > self._limit + self._allowance:
            self._closed = True
            self._queue.clear()
            self._bytes = 0
            self._on_overflow()
            return False
        return True

    def flush(self) -> None:
        """Write what is queued now, from the caller, when no writer task is busy and the
        socket takes it without waiting; otherwise leave it to the writer task."""
        if not self._started or self._closed or self._task is not None or not self._queue:
            return  # not started, closed, or the writer is busy: it writes
        sink = self._sink
        if not sink.writable:
            self._spawn_writer()
            return
        try:
            while self._queue and sink.writable:
                if len(self._queue[0][0]) >= _LARGE:
                    self._spawn_writer()  # written in slices by the writer, waiting between
                    return
                self._write_chunk(sink)
        except Exception:
            # The chunk in hand is gone with the socket: end here, as the writer would (a
            # later frame written after a lost one would be a gap in the stream).
            self.close()
            return
        if self._queue:
            self._spawn_writer()  # paused: the writer waits for the transport to drain
        elif self._idle_waiters:
            self._wake_drainers()

    def _spawn_writer(self) -> None:
        if self._task is None:
            self._task = task = asyncio.get_running_loop().create_task(self._run())
            task.add_done_callback(self._writer_done)

    def _writer_done(self, task: asyncio.Task[None]) -> None:
        # Also when it was cancelled before its first step (its ``finally`` never ran):
        # a task left set would stop every later flush.
        if self._task is task:
            self._task = None  # the next flush or put writes what is queued
            self._wake_drainers()

    def _consumed(self, size: int) -> None:
        self._bytes -= size
        # The handshake allowance shrinks with the queue: once the welcome and backlog are
        # out, the bound is the configured one again.
        self._allowance = min(self._allowance, self._bytes)

    async def drain(self, timeout: float) -> bool:
        """Wait until everything queued was written; False on timeout."""
        if self._closed or (not self._queue and self._task is None):
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._idle_waiters is None:
            self._idle_waiters = []
        self._idle_waiters.append(future)
        try:
            await asyncio.wait_for(future, timeout)
        except TimeoutError:
            return False
        return True

    def _wake_drainers(self) -> None:
        waiters, self._idle_waiters = self._idle_waiters, None
        wake_all(waiters)

    def close(self) -> None:
        """Stop accepting and stop the writer (queued frames are dropped).

        Closed, it calls its owner back no more, and lets go of the callbacks: they are the
        owner's bound methods, and an owner holding the outbox that holds them is a reference
        cycle, left for the collector instead of freed with the connection (issue 16)."""
        self._closed = True
        self._queue.clear()
        self._bytes = 0
        self._on_sent = _sent_nowhere
        self._on_overflow = _nothing
        self._wake_drainers()
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        """Write until the queue is empty, waiting on the socket as needed; then end."""
        queue = self._queue
        sink = self._sink
        try:
            while queue and not self._closed:
                if not sink.open:
                    # Nowhere to write: the reader side notices and detaches the participant.
                    self._closed = True
                    break
                await self._write_batch(sink)
        except Exception:
            # The socket is gone; the reader side notices and detaches the participant.
            self._closed = True
        finally:
            if self._task is asyncio.current_task():
                self._task = None
            self._wake_drainers()  # (and _writer_done, for a task cancelled before it ran)

    async def _write_batch(self, sink: Sink) -> None:
        """Frame up to _CHUNK queued bytes, write them at once, wait while paused.

        A large message (a reattach backlog) goes out as a fragmented message (RFC 6455
        §5.4), one _CHUNK per fragment, waiting while the transport is paused after each: the
        transport never buffers a copy of it (Python 3.11's copies what the socket did not
        take), so it costs one copy in all, and the keepalive's pings may come between fragments.
        """
        data, seq = self._queue[0]
        if len(data) < _LARGE:
            self._write_chunk(sink)
            await sink.drain()
            return
        self._queue.popleft()
        view = memoryview(data)
        size = len(view)
        for at in range(0, size, _CHUNK):
            if not sink.open:
                # Closed while it waited (a close frame may be out): nothing may follow it,
                # and the message did not arrive whole.
                view.release()
                self._closed = True
                return
            piece = view[at : at + _CHUNK]
            fin = 0x80 if at + _CHUNK >= size else 0
            opcode = 0x1 if at == 0 else 0x0  # text, then continuations
            sink.write(_header(fin | opcode, len(piece)))
            sink.write(piece)
            await sink.drain()
        view.release()
        self._consumed(len(data))
        if seq:
            self._on_sent(seq)

    def _write_chunk(self, sink: Sink) -> None:
        """Frame up to _CHUNK queued bytes and hand them to the transport in one write."""
        queue = self._queue
        parts: list[Data] = []
        append = parts.append
        small = _SMALL_HEADERS
        size = 0
        last_seq = 0
        while queue and size < _CHUNK and (not parts or len(queue[0][0]) < _LARGE):
            data, seq = queue.popleft()
            n = len(data)
            size += n
            append(small[n] if n < 126 else _text_header(n))
            append(data)
            if seq:
                last_seq = seq
        self._consumed(size)
        sink.write(b"".join(parts))
        if last_seq:
            self._on_sent(last_seq)
