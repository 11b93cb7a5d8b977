"""The client's connection status and who hears of its changes (part of the asyncio adapter)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from .reconnect import ConnectionStatus

__all__ = ["StatusWatch"]

StatusCallback = Callable[[ConnectionStatus], None]


class StatusWatch:
    """Where the connection is, the callbacks told of each change, and waiting for one."""

    def __init__(self) -> None:
        self.status = ConnectionStatus.NEW
        self._changed = asyncio.Event()
        self._callbacks: list[StatusCallback] = []

    def set(self, status: ConnectionStatus, first: StatusCallback | None = None) -> None:
        """Move to ``status``: wake the waiters, then call ``first`` and every callback."""
        if status is self.status:
            return
        self.status = status
        self._changed.set()
        self._changed = asyncio.Event()
        if first is not None:
            first(status)
        for callback in tuple(self._callbacks):
            callback(status)

    def add_callback(self, callback: StatusCallback) -> Callable[[], None]:
        """Call ``callback(status)`` on every change; returns a function that removes it."""
        self._callbacks.append(callback)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._callbacks.remove(callback)

        return remove

    async def wait(self, statuses: tuple[ConnectionStatus, ...], timeout: float | None) -> None:
        """Wait until the status is one of ``statuses`` (TimeoutError after ``timeout``)."""
        async with asyncio.timeout(timeout):
            while self.status not in statuses:
                await self._changed.wait()
