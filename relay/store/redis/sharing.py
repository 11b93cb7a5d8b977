"""Identical reads in flight at once share one round trip.

A reconnect storm sends a thousand hellos with one credential and a thousand attaches to one
session within a few milliseconds; each read the credential and the session's header from
Redis, a command each (about a tenth of a millisecond of the master's CPU in redis-py, and
one more answer for the event loop to take). Here a read of a key that is already on its
way waits for that one instead of sending its own: a storm costs a read per round trip, not
one per hello.

What a caller gets may have been read up to one round trip before it asked: never older
than a read it could have made itself just before. A write of this store to a key
(:meth:`SharedReads.forget`) makes the reads that start after it send their own, so this
node reads its own writes. The reply is shared raw; each caller decodes its own copy (a
mutable record changed by one caller is never another's).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["SharedReads"]

T = TypeVar("T")


class SharedReads(Generic[T]):
    """Reads by key: one in flight per key, shared by every caller that asks meanwhile."""

    def __init__(self) -> None:
        self._flying: dict[str, asyncio.Future[T]] = {}

    async def read(self, key: str, fetch: Callable[[], Awaitable[T]]) -> T:
        """The reply of the read of ``key`` on its way, else of ``fetch()`` sent now."""
        flying = self._flying.get(key)
        if flying is None:
            flying = asyncio.ensure_future(fetch())
            self._flying[key] = flying
            flying.add_done_callback(lambda done: self._landed(key, done))
        # A caller cancelled (its connection closed) leaves the read to the others.
        return await asyncio.shield(flying)

    def forget(self, key: str) -> None:
        """This store wrote ``key``: reads from now on send their own."""
        self._flying.pop(key, None)

    def _landed(self, key: str, done: asyncio.Future[T]) -> None:
        if self._flying.get(key) is done:
            del self._flying[key]
        if not done.cancelled():
            done.exception()  # retrieved: every caller that waited has it raised
