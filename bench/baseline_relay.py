"""The baseline: a minimal websockets fan-out relay (no validation, no store, no seq).

``python -m bench.baseline_relay [--port 0] [--loop asyncio|uvloop] [--keep]`` prints
``baseline relay: ws URL`` once listening. It speaks just enough RAWP for the same load
generators to drive it: the first message of a connection must be a ``connection.hello``
(parsed once, for role and session) and is answered with a small ``connection.welcome``;
after that every message from a session's client goes, untouched and unparsed, to every
edge of that session with ``websockets.broadcast`` (one write per recipient, no per-recipient
await) — the least work a fan-out relay can do with the same WebSocket library and the same
server options (max frame size, no compression, queue size) as the master.

``--keep`` keeps each session's frames in a list, and an edge hello with ``resume.last_seq``
gets the frames after it as one ``session.history``-shaped message: the naive in-memory
replay the reattach benchmark compares against.

``--engine picows`` serves the same with picows (the WebSocket library the master runs on,
relay/ws.py): a hello answered with the welcome from the socket's read callback, a client's
messages written to its session's edges as they arrive. It is the least a reattach costs on
the master's own library (the storm benchmark quotes it beside the websockets server the
aims name); no ``--keep``.

Not a benchmark module (it defines no ``NAME``): the benchmarks start it as a process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
from collections import defaultdict

from picows import WSFrame, WSListener, WSMsgType, WSTransport, ws_create_server
from websockets.asyncio.server import ServerConnection, broadcast, serve
from websockets.exceptions import ConnectionClosed

__all__ = ["main"]


class Relay:
    """Sessions → client and edges; optional frame lists for replay."""

    def __init__(self, keep: bool) -> None:
        self.keep = keep
        self.edges: defaultdict[str, set[ServerConnection]] = defaultdict(set)
        self.frames: defaultdict[str, list[bytes]] = defaultdict(list)

    async def handler(self, ws: ServerConnection) -> None:
        # A connection cut without a closing handshake (the generators drop thousands at
        # once) ends quietly: websockets would log a traceback for each, costing this
        # server more CPU than the master spends on the same closes.
        with contextlib.suppress(ConnectionClosed):
            await self._serve_one(ws)

    async def _serve_one(self, ws: ServerConnection) -> None:
        try:
            first = await asyncio.wait_for(ws.recv(decode=False), 10)
            hello = json.loads(first)
            session_id = hello["session_id"]
            payload = hello["payload"]
            role = payload["role"]
        except Exception:
            await ws.close(4400, "expected connection.hello")
            return
        welcome = {
            "type": "connection.welcome",
            "session_id": session_id,
            "payload": {"participant_id": f"p-{id(ws):x}", "resumed": False},
        }
        await ws.send(json.dumps(welcome))
        if role == "client":
            await self._client(ws, session_id)
            return
        resume = payload.get("resume")
        if self.keep and resume is not None:
            frames = self.frames[session_id][int(resume.get("last_seq", 0)) :]
            await ws.send(
                b'{"type":"session.history","payload":{"frames":[%s]}}' % b",".join(frames),
                text=True,
            )
        edges = self.edges[session_id]
        edges.add(ws)
        try:
            async for _ in ws:
                pass
        finally:
            edges.discard(ws)

    async def _client(self, ws: ServerConnection, session_id: str) -> None:
        edges = self.edges[session_id]
        frames = self.frames[session_id]
        keep = self.keep
        async for message in ws:
            if keep:
                frames.append(message.encode() if isinstance(message, str) else message)
            broadcast(edges, message)


class PicowsPeer(WSListener):
    """One connection of the picows relay: the hello answered, then a client's messages
    written to its session's edges; no task, no queue."""

    __slots__ = ("edges", "is_client", "session_id", "transport")

    def __init__(self, edges: defaultdict[str, set[PicowsPeer]]) -> None:
        self.edges = edges
        self.transport: WSTransport | None = None
        self.session_id: str | None = None
        self.is_client = False

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        kind = frame.msg_type
        if kind is WSMsgType.CLOSE:
            transport.send_close(frame.get_close_code())
            transport.disconnect()
        elif kind is not WSMsgType.TEXT:
            return
        elif self.session_id is None:
            self._hello(transport, frame.get_payload_as_bytes())
        elif self.is_client:
            data = frame.get_payload_as_bytes()
            for edge in self.edges[self.session_id]:
                if edge.transport is not None:
                    edge.transport.send(WSMsgType.TEXT, data)

    def _hello(self, transport: WSTransport, data: bytes) -> None:
        try:
            hello = json.loads(data)
            session_id = hello["session_id"]
            role = hello["payload"]["role"]
        except Exception:
            transport.send_close(4400, b"expected connection.hello")  # type: ignore[arg-type]
            transport.disconnect()
            return
        welcome = {
            "type": "connection.welcome",
            "session_id": session_id,
            "payload": {"participant_id": f"p-{id(self):x}", "resumed": False},
        }
        transport.send(WSMsgType.TEXT, json.dumps(welcome).encode())
        self.session_id = session_id
        self.is_client = role == "client"
        if not self.is_client:
            self.edges[session_id].add(self)

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        if self.session_id is not None and not self.is_client:
            self.edges[self.session_id].discard(self)


async def _serve_picows(args: argparse.Namespace) -> None:
    edges: defaultdict[str, set[PicowsPeer]] = defaultdict(set)
    server = await ws_create_server(
        lambda request: PicowsPeer(edges),
        args.host,
        args.port,
        max_frame_size=1 << 20,
        enable_auto_ping=True,
        auto_ping_idle_timeout=20,
        auto_ping_reply_timeout=20,
        read_buffer_init_size=2048,  # as the master's (relay/server.py)
        use_aiofastnet=False,
        backlog=4096,
    )
    async with server:
        port = next(iter(server.sockets)).getsockname()[1]
        print(f"baseline relay: ws ws://{args.host}:{port}/v1/ws", flush=True)
        await _until_signalled(args.max_seconds)


async def _until_signalled(max_seconds: float) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), max_seconds)


async def _serve(args: argparse.Namespace) -> None:
    if args.engine == "picows":
        await _serve_picows(args)
        return
    relay = Relay(args.keep)
    async with serve(
        relay.handler,
        args.host,
        args.port,
        max_size=1 << 20,
        max_queue=64,
        compression=None,
        ping_interval=20,
        ping_timeout=20,
        backlog=4096,  # as the master's listener (relay/server.py)
    ) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        print(f"baseline relay: ws ws://{args.host}:{port}/v1/ws", flush=True)
        await _until_signalled(args.max_seconds)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.baseline_relay")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--loop", choices=("auto", "asyncio", "uvloop"), default="auto")
    parser.add_argument("--keep", action="store_true", help="keep frames for replay")
    parser.add_argument("--engine", choices=("websockets", "picows"), default="websockets")
    parser.add_argument("--max-seconds", type=float, default=900.0)
    args = parser.parse_args()
    if args.keep and args.engine != "websockets":
        parser.error("--keep is served by the websockets engine only")
    from ._procs import raise_nofile

    raise_nofile()
    from relay.cli import event_loop_factory

    factory = event_loop_factory(args.loop)  # the same loop choice as the master's
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(_serve(args))


if __name__ == "__main__":
    main()
