"""A small TCP proxy between a master node and Redis that injects network faults.

Every connection a node opens to Redis goes through :class:`FaultProxy` (127.0.0.1 only):
requests are forwarded to the real redis-server as they come, replies come back through a
per-connection queue so they can be held back. The faults, switched on and off by the fault
suite while traffic flows:

* :meth:`FaultProxy.cut` — abort every open connection now (both sides, no FIN handshake):
  a command just sent may or may not have run;
* :meth:`FaultProxy.delay` — hold every reply back for some seconds (a slow link); commands
  still reach Redis at once, so the node may give up on a call that Redis did run;
* :meth:`FaultProxy.lose_replies` — forward requests, throw replies away, then cut: the
  scripts ran and their answers never arrive (the case notes §12's "nothing acknowledged is
  lost" must survive, and an append must not be applied twice or out of order);
* :meth:`FaultProxy.refuse` — refuse new connections (Redis unreachable for this node only).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

__all__ = ["FaultProxy"]

_CHUNK = 1 << 16


@dataclass(eq=False)
class _Link:
    """One proxied connection: the node's side and Redis's side."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    replies: asyncio.Queue[tuple[float, bytes] | None] = field(default_factory=asyncio.Queue)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def abort(self) -> None:
        """Drop both sides at once (RST where the OS does so for an abort)."""
        for writer in (self.client, self.upstream):
            transport = writer.transport
            with contextlib.suppress(Exception):
                transport.abort()
        self.replies.put_nowait(None)


class FaultProxy:
    """Forwards 127.0.0.1:``port`` to 127.0.0.1:``upstream_port``, with faults on demand."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._delay = 0.0
        self._lose = False
        self._refuse = False

    async def start(self) -> None:
        """Listen on a free loopback port (kept for the proxy's life)."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and drop every connection."""
        if self._server is not None:
            self._server.close()
        self.cut()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    # --- faults ---------------------------------------------------------------------------

    def cut(self) -> None:
        """Abort every open connection."""
        for link in list(self._links):
            link.abort()
        self._links.clear()

    def delay(self, seconds: float) -> None:
        """Hold replies back ``seconds`` from now on (0: no delay)."""
        self._delay = seconds

    async def lose_replies(self, seconds: float) -> None:
        """For ``seconds``, forward requests and drop their replies; then cut everything."""
        self._lose = True
        try:
            await asyncio.sleep(seconds)
        finally:
            self._lose = False
            self.cut()

    def refuse(self, on: bool) -> None:
        """Refuse (close at once) new connections while ``on``."""
        self._refuse = on
        if on:
            self.cut()

    def heal(self) -> None:
        """No fault any more (open connections are kept)."""
        self._delay = 0.0
        self._lose = False
        self._refuse = False

    # --- forwarding -----------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._refuse:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.transport.abort()  # Redis is down: so is the link
            return
        link = _Link(writer, up_writer)
        self._links.add(link)
        loop = asyncio.get_running_loop()
        link.tasks = [
            loop.create_task(self._requests(link, reader)),
            loop.create_task(self._collect(link, up_reader)),
            loop.create_task(self._replies(link)),
        ]
        await asyncio.gather(*link.tasks, return_exceptions=True)
        link.abort()
        self._links.discard(link)

    async def _requests(self, link: _Link, reader: asyncio.StreamReader) -> None:
        try:
            while data := await reader.read(_CHUNK):
                link.upstream.write(data)
                await link.upstream.drain()
        finally:
            link.abort()

    async def _collect(self, link: _Link, reader: asyncio.StreamReader) -> None:
        loop = asyncio.get_running_loop()
        try:
            while data := await reader.read(_CHUNK):
                if self._lose:
                    continue  # the command ran; its answer is lost
                link.replies.put_nowait((loop.time() + self._delay, data))
        finally:
            link.replies.put_nowait(None)

    async def _replies(self, link: _Link) -> None:
        loop = asyncio.get_running_loop()
        try:
            while (item := await link.replies.get()) is not None:
                due, data = item
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                link.client.write(data)
                await link.client.drain()
        finally:
            link.abort()
