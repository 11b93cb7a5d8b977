"""Helpers shared by the end-to-end tests: HTTP calls, log reads, handshakes, polling."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable
from typing import Any

import aiohttp
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.support.wire import Peer, envelope

__all__ = [
    "detached",
    "hello_close_code",
    "http",
    "logged",
    "new_session",
    "next_frame",
    "nothing_pending",
    "open_session",
    "wait_until",
]


async def wait_until(predicate: Callable[[], Any], timeout: float = 5.0) -> None:
    """Poll ``predicate`` (sync or async) until it is truthy; ``timeout`` only guards a hang."""
    async with asyncio.timeout(timeout):
        while True:
            value = predicate()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return
            await asyncio.sleep(0.01)


async def http(
    master: Master, method: str, path: str, *, token: str | None = API_KEY
) -> tuple[int, Any]:
    """One HTTP request to the master's API; returns (status, decoded JSON body or text)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as client,
        client.request(method, master.http_url + path, headers=headers) as response,
    ):
        text = await response.text()
        try:
            return response.status, json.loads(text)
        except ValueError:
            return response.status, text


async def logged(master: Master, session_id: str, *, status: bool = False) -> list[dict[str, Any]]:
    """The session log as the store holds it (decoded envelopes, seq order); the master's
    session.status frames (notes §17.4) only when ``status``."""
    frames = [json.loads(e.data) for e in await master.store.read(session_id)]
    return [f for f in frames if status or f["type"] != "session.status"]


async def detached(master: Master, session_id: str, peer: Peer) -> None:
    """Wait until the master has processed ``peer``'s detach (its socket is closed)."""

    def gone() -> bool:
        session = master.hub.sessions.get(session_id)
        return session is None or peer.participant_id not in session.participants

    await wait_until(gone)


async def nothing_pending(peer: Peer, via: Peer) -> None:
    """Prove ``peer`` has nothing queued: a sentinel from edge ``via``, sent now, comes next.

    Frames are committed in order, so anything the master meant for ``peer`` before this
    point (an error, an echo) would arrive before the sentinel. The sentinel is a
    control.cancel naming no turn: a user.message would wait while a turn is open (notes
    §17.3).
    """
    sentinel = await via.send("control.cancel", {})
    got = await next_frame(peer)
    assert got["message_id"] == sentinel["message_id"], got


def is_presence(frame: dict[str, Any]) -> bool:
    """True for session.presence frames (most tests look past them)."""
    return bool(frame["type"] == "session.presence")


async def next_frame(peer: Peer, timeout: float = 5.0) -> dict[str, Any]:
    """The next frame that is not a presence notice."""
    while True:
        frame = await peer.recv(timeout)
        if not is_presence(frame):
            return frame


async def new_session(
    master: Master, session_id: str, *, edges: int = 1
) -> tuple[Peer, list[Peer]]:
    """A client that created ``session_id`` and ``edges`` edges, every presence drained.

    After this each peer's next frame is whatever the test sends next.
    """
    client = await Peer.open(master.ws_url, session_id, token=API_KEY, create=True)
    attached: list[Peer] = []
    for _ in range(edges):
        edge = await Peer.open(master.ws_url, session_id, role="edge", token=API_KEY)
        # Everyone already attached hears about the new edge.
        for peer in (client, *attached):
            got = await peer.recv()
            assert got["type"] == "session.presence", got
            assert got["payload"]["participant_id"] == edge.participant_id
        attached.append(edge)
    return client, attached


async def open_session(master: Master, session_id: str) -> Peer:
    """A client alone in a new session."""
    client, _ = await new_session(master, session_id, edges=0)
    return client


async def hello_close_code(
    master: Master,
    message: str | bytes | None,
    *,
    timeout: float = 5.0,
) -> int | None:
    """Open a WebSocket, send ``message`` (None: nothing) and return the master's close code."""
    async with connect(master.ws_url, subprotocols=["rawp.1"]) as ws:  # type: ignore[list-item]
        if message is not None:
            await ws.send(message)
        try:
            async with asyncio.timeout(timeout):
                while True:
                    await ws.recv()
        except ConnectionClosed:
            pass
        return ws.close_code


def hello(session_id: str, **payload: Any) -> str:
    """A connection.hello text message; ``payload`` overrides the defaults (None removes)."""
    body: dict[str, Any] = {"protocol_version": "1.0.2", "role": "client", "token": API_KEY}
    for key, value in payload.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    return json.dumps(envelope(session_id, "connection.hello", body))
