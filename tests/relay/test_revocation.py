"""Credentials end with their validity (notes §16.9, relay/revocation.py).

An expired or revoked credential ends every WebSocket (4401) and SSE stream opened with it,
busy streams included, on every node — a token revoked over HTTP on another node, and an
API key revoked with ``rawp keys revoke`` against Redis. Waits are bounded, never timed.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from relay.auth import SCOPES, digest
from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.e2e.conftest import test_settings as settings_for
from tests.e2e.util import wait_until
from tests.relay.http.test_sse import RawStream
from tests.support.redis_server import RedisServer
from tests.support.wire import Peer, new_turn_id

_RAWP = Path(sys.executable).with_name("rawp")


class Chatter:
    """A client that keeps its session busy (a text delta every few ms) until stopped."""

    def __init__(self, client: Peer) -> None:
        self.client = client
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Open a turn and start streaming deltas."""
        await self.client.send("session.turn.start", {"turn_id": new_turn_id(), "turn_index": 0})
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        i = 0
        while True:
            await self.client.send("agent.text.delta", {"block_id": "b", "delta": f"{i} "})
            i += 1
            await asyncio.sleep(0.002)

    async def stop(self) -> None:
        """Stop streaming."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


async def _stream_ends(stream: RawStream, timeout: float = 10.0) -> bool:
    """Read a (busy) stream until the master ends it; True once it did."""
    async with asyncio.timeout(timeout):
        while await stream.next_event(timeout) is not None:
            pass
    return True


async def _open_stream(master: Master, session_id: str, secret: str) -> RawStream:
    path = f"/v1/sessions/{session_id}/events/stream"
    stream = await RawStream.open(master, path, {"Authorization": f"Bearer {secret}"})
    assert stream.status == 200
    return stream


async def test_expiry_ends_websockets_and_busy_streams(master: Master) -> None:
    """A token whose expiry passes closes its WebSocket 4401 and ends its busy SSE stream."""
    client = await Peer.open(master.ws_url, "s-exp", token=API_KEY, create=True)
    token, _ = await master.hub.auth.issue_token("default", "s-exp", ttl_s=1.0)
    edge = await Peer.open(master.ws_url, "s-exp", role="edge", token=token)
    stream = await _open_stream(master, "s-exp", token)
    chatter = Chatter(client)
    await chatter.start()
    try:
        assert await _stream_ends(stream)
        assert await edge.closed_with(10.0) == 4401
    finally:
        await chatter.stop()
    await stream.close()
    await client.close()


async def test_the_watch_reads_each_held_credential_once_until_its_last_connection_goes(
    master: Master,
) -> None:
    """Connections hold their credential from attach to detach, counted once per credential."""
    held = master.hub.held_credentials
    key_id = digest(API_KEY)
    client = await Peer.open(master.ws_url, "s-held", token=API_KEY, create=True)
    token, _ = await master.hub.auth.issue_token("default", "s-held")
    edges = [
        await Peer.open(master.ws_url, "s-held", role="edge", token=API_KEY),
        await Peer.open(master.ws_url, "s-held", role="edge", token=token),
    ]
    assert held.count(key_id) == 2
    assert held.count(digest(token)) == 1
    assert sorted(held.principals()) == sorted([key_id, digest(token)])
    await edges[1].close()
    await wait_until(lambda: held.count(digest(token)) == 0)
    assert held.count(key_id) == 2  # the others still hold theirs
    for peer in (edges[0], client):
        await peer.close()
    await wait_until(lambda: not held.principals())


async def test_revocation_over_http_ends_busy_streams_at_once(master: Master) -> None:
    """Revoking a token ends its busy SSE stream (no idle ping is needed)."""
    client = await Peer.open(master.ws_url, "s-rv", token=API_KEY, create=True)
    token, record = await master.hub.auth.issue_token("default", "s-rv")
    stream = await _open_stream(master, "s-rv", token)
    chatter = Chatter(client)
    await chatter.start()
    try:
        assert await stream.next_event() is not None
        await master.hub.auth.revoke(record.digest)  # as `DELETE /v1/tokens` or another node
        assert await _stream_ends(stream)
    finally:
        await chatter.stop()
    await stream.close()
    await client.close()


async def _open_streams(master: Master) -> float:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{master.http_url}/metrics") as response,
    ):
        text = await response.text()
    return sum(
        float(line.split()[1]) for line in text.splitlines() if line.startswith("rawp_sse_streams ")
    )


async def test_revocation_ends_a_stream_whose_reader_stopped_reading(master: Master) -> None:
    """A revoked token's stream stuck behind a reader that stopped reading is cut as well."""
    client = await Peer.open(master.ws_url, "s-stuck", token=API_KEY, create=True)
    token, record = await master.hub.auth.issue_token("default", "s-stuck")
    sock = await _stuck_reader(master, "s-stuck", token)
    await _flood(master, client, "s-stuck")
    await master.hub.auth.revoke(record.digest)
    await _until_true(lambda: _no_streams(master))
    sock.close()
    await client.close()


async def _stuck_reader(master: Master, session_id: str, secret: str) -> socket.socket:
    """An SSE request on a socket with a tiny window that is never read."""
    url = urlsplit(master.http_url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window fills fast
    sock.connect((url.hostname, url.port))
    request = f"GET /v1/sessions/{session_id}/events/stream HTTP/1.1\r\nHost: x\r\n"
    sock.sendall((request + f"Authorization: Bearer {secret}\r\n\r\n").encode())
    return sock


async def _flood(master: Master, client: Peer, session_id: str) -> None:
    """~5 MB of text the stuck reader never takes, all logged."""
    await client.send("session.turn.start", {"turn_id": new_turn_id(), "turn_index": 0})
    big = "x" * 60_000
    for _ in range(80):
        await client.send("agent.text.delta", {"block_id": "b", "delta": big})
    await _until_true(lambda: _head(master, session_id, 80))


async def _head(master: Master, session_id: str, at_least: int) -> bool:
    return await master.store.head_seq(session_id) >= at_least


async def _no_streams(master: Master) -> bool:
    return await _open_streams(master) == 0


async def _until_true(predicate: Callable[[], Any], timeout: float = 15.0) -> None:
    async with asyncio.timeout(timeout):
        while not await predicate():
            await asyncio.sleep(0.05)


async def test_shutdown_is_not_held_by_a_stream_whose_reader_stopped_reading(
    make_master: Any,
) -> None:
    """A master stops even while a stream is stuck behind a reader that stopped reading."""
    master = await make_master()
    client = await Peer.open(master.ws_url, "s-stop", token=API_KEY, create=True)
    sock = await _stuck_reader(master, "s-stop", API_KEY)
    await _flood(master, client, "s-stop")
    async with asyncio.timeout(20):  # the runner would otherwise wait 60 s for the stream
        await master.stop()
    sock.close()


@pytest.fixture
async def nodes(redis_server: RedisServer) -> AsyncIterator[Callable[..., Any]]:
    """In-process masters N1, N2, … on our own Redis; all stopped after the test."""
    with contextlib.closing(redis_server.client()) as c:
        c.flushall()
    started: list[Master] = []

    async def start(count: int) -> list[Master]:
        for _ in range(count):
            options = {"store": redis_server.url, "node_id": f"N{len(started) + 1}"}
            master = Master(settings_for(**options))
            await master.start()
            started.append(master)
        return started[-count:]

    yield start
    for master in started:
        await master.stop()


@pytest.mark.redis
@pytest.mark.timeout(60)
async def test_a_token_revoked_on_one_node_ends_its_connections_on_another(nodes: Any) -> None:
    """Revoked over HTTP on node A: the token's WebSocket and busy stream on B end."""
    a, b = await nodes(2)
    client = await Peer.open(b.ws_url, "s-multi", token=API_KEY, create=True)
    token, record = await a.hub.auth.issue_token("default", "s-multi")
    edge = await Peer.open(b.ws_url, "s-multi", role="edge", token=token)
    stream = await _open_stream(b, "s-multi", token)
    chatter = Chatter(client)
    await chatter.start()
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.delete(
                f"{a.http_url}/v1/tokens/{record.digest}",
                headers={"Authorization": f"Bearer {API_KEY}"},
            ) as response,
        ):
            assert response.status == 200
        assert await _stream_ends(stream)
        assert await edge.closed_with(10.0) == 4401
    finally:
        await chatter.stop()
    await stream.close()
    await client.close()


@pytest.mark.redis
@pytest.mark.timeout(60)
async def test_rawp_keys_revoke_ends_the_keys_connections_on_every_node(
    nodes: Any, redis_server: RedisServer
) -> None:
    """`rawp keys revoke` against Redis: the key's sockets (4401) and streams end on A and B."""
    a, b = await nodes(2)
    key, _ = await a.hub.auth.create_key("default", SCOPES)
    client = await Peer.open(a.ws_url, "s-key", token=key, create=True)
    edge = await Peer.open(b.ws_url, "s-key", role="edge", token=key)
    streams = [await _open_stream(m, "s-key", key) for m in (a, b)]
    other = await Peer.open(b.ws_url, "s-key", role="edge", token=API_KEY)  # another key
    done = await asyncio.to_thread(
        subprocess.run,
        [str(_RAWP), "keys", "revoke", key, "--store", redis_server.url],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for stream in streams:
        assert await _stream_ends(stream)
        await stream.close()
    assert await client.closed_with(10.0) == 4401
    assert await edge.closed_with(10.0) == 4401
    sentinel = await other.send("user.message", {"text": "still attached"})
    async with asyncio.timeout(5):
        while await a.store.message_seq("s-key", sentinel["message_id"]) is None:
            await asyncio.sleep(0.01)
    await other.close()
