"""Delivery to one participant: a bounded send queue drained by its own writer task.

The fan-out path only appends already-encoded bytes to each recipient's :class:`Outbox`; it
never waits on a socket. A recipient whose queue grows past its byte bound is a slow
consumer: it is closed with 4429 and recovers by reattaching (notes §11).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Final, Protocol

__all__ = ["SLOW_CONSUMER", "Outbox", "Sink"]

SLOW_CONSUMER: Final = 4429


class Sink(Protocol):
    """The part of a WebSocket connection an outbox writes to."""

    async def send(self, message: bytes, *, text: bool | None = None) -> None: ...

    async def close(self, code: int = 1000, reason: str = "") -> None: ...


class Outbox:
    """Bounded, ordered send queue of one connection.

    ``on_sent(seq)`` is called after each frame that carries a log seq was written, so the
    participant's cursor follows what actually left for the socket.
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
        self._queue: deque[tuple[bytes, int]] = deque()
        self._bytes = 0
        self._ready = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False
        self._task: asyncio.Task[None] | None = None

    @property
    def queued_bytes(self) -> int:
        """Bytes waiting to be written."""
        return self._bytes

    @property
    def closed(self) -> bool:
        """True once the outbox accepts nothing more."""
        return self._closed

    def start(self) -> None:
        """Start the writer task."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def put(self, data: bytes, seq: int = 0) -> None:
        """Queue one frame (seq 0: not a log entry). Never blocks."""
        if self._closed:
            return
        self._queue.append((data, seq))
        self._bytes += len(data)
        self._idle.clear()
        self._ready.set()
        if self._bytes > self._limit:
            self._closed = True
            self._queue.clear()
            self._bytes = 0
            self._on_overflow()

    async def drain(self, timeout: float) -> bool:
        """Wait until everything queued was written; False on timeout."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        """Stop accepting and stop the writer (queued frames are dropped)."""
        self._closed = True
        self._queue.clear()
        self._bytes = 0
        self._idle.set()
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        queue = self._queue
        try:
            while True:
                await self._ready.wait()
                self._ready.clear()
                while queue:
                    data, seq = queue.popleft()
                    self._bytes -= len(data)
                    await self._sink.send(data, text=True)
                    if seq:
                        self._on_sent(seq)
                self._idle.set()
        except Exception:
            # The socket is gone; the reader side notices and detaches the participant.
            self._closed = True
        finally:
            self._idle.set()
