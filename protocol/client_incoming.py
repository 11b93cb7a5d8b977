"""The client's incoming stream: frames received and not yet read, and how the stream ended.

Part of the asyncio adapter (:mod:`protocol.client`): the reader task pushes, the caller's
:meth:`~protocol.client.RawpClient.receive` waits. Bounded: past ``max_queue`` frames the
oldest is dropped (a UI that stopped reading must not grow the process without limit).
"""

from __future__ import annotations

import asyncio
from collections import deque

from .frames import Frame, GenericFrame

__all__ = ["Incoming"]


class _End:
    """Marks the end of the incoming stream (kept at its tail once reached)."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


class Incoming:
    """The frames received and not yet read, in order, then (once) the end of the stream."""

    def __init__(self, max_queue: int | None) -> None:
        self.max_queue = max_queue
        self._items: deque[Frame | GenericFrame | _End] = deque()
        self._ready = asyncio.Event()
        self._ended = False

    def push(self, frame: Frame | GenericFrame) -> int:
        """Queue ``frame``; returns how many frames a full queue dropped for it (0 or 1)."""
        self._items.append(frame)
        dropped = 0
        if self.max_queue is not None and len(self._items) > self.max_queue:
            self._items.popleft()
            dropped = 1
        self._ready.set()
        return dropped

    def end(self, error: BaseException | None) -> None:
        """The stream ends after what is queued, raising ``error`` if given (once only)."""
        if not self._ended:
            self._ended = True
            self._items.append(_End(error))
            self._ready.set()

    async def next(self, timeout: float | None) -> Frame | GenericFrame | None:
        """The next frame; None once the stream ended. Raises what ended it abnormally,
        or TimeoutError when nothing arrives within ``timeout`` seconds."""
        async with asyncio.timeout(timeout):
            while not self._items:
                self._ready.clear()
                await self._ready.wait()
        item = self._items[0]
        if isinstance(item, _End):
            if item.error is not None:
                raise item.error
            return None
        self._items.popleft()
        return item
