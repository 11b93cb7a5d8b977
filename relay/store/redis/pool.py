"""The connections of one node to one Redis: a pool that waits when all are busy.

A reconnect storm asks for more connections at once than any pool holds, so a command that
finds them all busy waits (up to ``timeout`` seconds) for one to come back instead of failing
(bench/results/storm-profile.md round 12). redis-py's ``BlockingConnectionPool`` does that,
but takes a condition, a timeout and its observability records on every command, busy or
not; here a command takes a free connection at once and only one that finds none waits (28
against 46 µs of CPU per ``GET``, storm-profile.md round 13): a Redis attach is bound by the
master's CPU per command.

Not kept from redis-py's pools: their metrics records and the "connection released" event
(which re-authenticates connections of a streaming credential provider; the store uses
none).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError

__all__ = ["WaitingPool"]


class WaitingPool(aioredis.ConnectionPool):
    """At most ``max_connections``; a command that finds them all busy waits up to
    ``timeout`` seconds for one (then redis-py's ``ConnectionError``, as its blocking pool
    raises), first come first woken."""

    def __init__(self, *, timeout: float = 5.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.timeout = timeout
        self._waiters: deque[asyncio.Future[None]] = deque()

    def _full(self) -> bool:
        return not self._available_connections and (
            len(self._in_use_connections) >= self.max_connections
        )

    async def get_connection(self, *_args: Any, **_options: Any) -> AbstractConnection:
        """A connected connection: a free one at once, else the first given back."""
        if self._full():
            await self._wait()
        # no await between the check and the take: nobody else can take it meanwhile
        connection: AbstractConnection = self.get_available_connection()  # type: ignore[no-untyped-call]
        try:
            await self.ensure_connection(connection)
        except BaseException:
            await self.release(connection)
            raise
        return connection

    async def _wait(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        while self._full():
            woken: asyncio.Future[None] = loop.create_future()
            self._waiters.append(woken)
            try:
                async with asyncio.timeout_at(deadline):
                    await woken
            except BaseException as exc:
                if woken.done() and not woken.cancelled():
                    self._wake()  # woken, but leaving: the connection goes to the next
                else:
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(woken)
                if isinstance(exc, TimeoutError):
                    raise RedisConnectionError("No connection available.") from None
                raise

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def release(self, connection: AbstractConnection) -> None:
        """Give ``connection`` back and wake the longest waiter."""
        self._in_use_connections.remove(connection)  # KeyError when given back twice
        if connection.should_reconnect():  # type: ignore[no-untyped-call]
            await connection.disconnect()
        self._available_connections.append(connection)
        self._wake()
