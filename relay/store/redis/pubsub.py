"""Following sessions: the append batches every node publishes, as :class:`Subscription`\\ s.

The append script publishes each batch on the session's channel ``rawp:{S}:pub`` as msgpack
``[node_id, [LogEntry, ...]]``. Entries published with ``seq`` 0 are control messages between
nodes (relay/cluster/), never log entries: a log's seqs start at 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any, Final, NamedTuple

import msgspec
import redis.exceptions as rexc

from protocol.errors import StoreUnavailableError

from ..base import LogEntry
from .errors import mapped, store_error
from .framing import encode, published_dec, text
from .keys import channel

__all__ = ["PubSub", "Published", "Subscription"]

_log = logging.getLogger("relay.store.redis")


class Published(NamedTuple):
    """One append batch as published on the session's channel."""

    session_id: str
    node_id: str
    entries: list[LogEntry]


class PubSub:
    """Publishing and subscribing as one node, on one client."""

    def __init__(self, client: Any, node_id: str) -> None:
        self.client = client
        self.node_id = node_id
        self.node_packed = encode(node_id)
        """msgpack of the node id: how a batch of this node's starts, after the array header."""
        self._subscriptions: set[Subscription] = set()

    async def publish(self, session_id: str, entries: Sequence[LogEntry]) -> None:
        """Publish ``entries`` on the session's channel as this node (see RedisStore)."""
        payload = encode((self.node_id, list(entries)))
        with mapped():
            await self.client.publish(channel(session_id), payload)

    async def subscribe(self, *session_ids: str, own: bool = True) -> Subscription:
        """A subscription to these sessions, confirmed by Redis (see RedisStore)."""
        sub = Subscription(self, own=own)
        self._subscriptions.add(sub)
        if session_ids:
            try:
                await sub.add(*session_ids)
            except BaseException:
                await sub.aclose()
                raise
        return sub

    async def close(self) -> None:
        """End every subscription."""
        for sub in list(self._subscriptions):
            await sub.aclose()


class Subscription:
    """Published append batches of some sessions: an async iterator of :class:`Published`.

    One Redis connection carries every channel; a reader task owns it, so ``add`` and
    ``remove`` may be called while another task iterates.

    Outages: batches published while the connection is down are lost. The iterator raises
    StoreUnavailableError once when the connection fails (iterate again to go on); once it is
    back, it yields an empty batch (``node_id`` "") per session as its channel is subscribed
    again: the consumer then reads what it missed from the log (notes §12: a seq gap is filled
    from the log), and misses nothing published after that.
    """

    _CONFIRM_TIMEOUT: Final = 10.0

    def __init__(self, pubsub: PubSub, *, own: bool = True) -> None:
        self._hub = pubsub
        # a batch starts with msgpack [node_id, ...]: this prefix marks our node's own
        self._own_prefix = None if own else b"\x92" + pubsub.node_packed
        self._pubsub: Any = pubsub.client.pubsub()
        self._queue: asyncio.Queue[Published | BaseException | None] = asyncio.Queue()
        self._confirm: dict[bytes, list[asyncio.Future[None]]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._closed = False

    async def add(self, *session_ids: str) -> None:
        """Subscribe to more sessions; returns once Redis confirmed."""
        channels = [channel(s).encode() for s in session_ids]
        loop = asyncio.get_running_loop()
        waits: list[asyncio.Future[None]] = []
        for ch in channels:
            fut: asyncio.Future[None] = loop.create_future()
            self._confirm.setdefault(ch, []).append(fut)
            waits.append(fut)
        try:
            with mapped():
                await self._pubsub.subscribe(*channels)
            if self._reader is None:
                self._reader = asyncio.create_task(self._read())
            async with asyncio.timeout(self._CONFIRM_TIMEOUT):
                await asyncio.gather(*waits)
        except TimeoutError as exc:
            raise StoreUnavailableError("redis did not confirm the subscription") from exc
        finally:
            for ch, fut in zip(channels, waits, strict=True):
                pending = self._confirm.get(ch, [])
                if fut in pending:
                    pending.remove(fut)
                if not pending:
                    self._confirm.pop(ch, None)

    async def remove(self, *session_ids: str) -> None:
        """Stop receiving these sessions' batches."""
        with mapped():
            await self._pubsub.unsubscribe(*(channel(s) for s in session_ids))

    async def _read(self) -> None:
        backoff = 0.05
        failing = False
        while True:
            try:
                msg = await self._pubsub.get_message(timeout=None)
                backoff, failing = 0.05, False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the reader must outlive any one failure
                if not failing:  # one error per outage, not one per reconnect attempt
                    self._queue.put_nowait(store_error(exc))
                    failing = True
                await asyncio.sleep(backoff)  # the next read reconnects and resubscribes
                backoff = min(backoff * 2, 1.0)
                continue
            if msg is None:
                continue
            ch = msg.get("channel")
            if not isinstance(ch, bytes):
                continue
            session_id = text(ch).split("{", 1)[1].rsplit("}", 1)[0]
            if msg["type"] == "subscribe":
                waiters = self._confirm.pop(ch, [])
                for fut in waiters:
                    if not fut.done():
                        fut.set_result(None)
                if not waiters:
                    # resubscribed after a reconnect: from here on nothing is missed, what
                    # came before must be read from the log
                    self._queue.put_nowait(Published(session_id, "", []))
            elif msg["type"] == "message":
                own = self._own_prefix
                if own is not None and msg["data"].startswith(own):
                    continue
                try:
                    node_id, entries = published_dec.decode(msg["data"])
                except msgspec.DecodeError:
                    _log.warning("undecodable batch on %s", text(ch))
                    continue
                self._queue.put_nowait(Published(session_id, node_id, entries))

    def __aiter__(self) -> AsyncIterator[Published]:
        return self

    async def __anext__(self) -> Published:
        if self._closed and self._queue.empty():
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is None:
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            raise item
        return item

    async def aclose(self) -> None:
        """Unsubscribe and close the connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._hub._subscriptions.discard(self)
        if self._reader is not None:
            # cancelled again until it ends: on Python 3.11 a cancel that lands inside
            # redis-py's asyncio.wait_for can be swallowed (gh-86296)
            while not self._reader.done():
                self._reader.cancel()
                await asyncio.wait({self._reader}, timeout=0.1)
        with contextlib.suppress(rexc.RedisError, OSError):
            await self._pubsub.aclose()
        self._queue.put_nowait(None)

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
