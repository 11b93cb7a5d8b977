"""API keys end their connections as tokens do (notes §16.9, §17.6): at their expiry, at their
revocation over ``DELETE /v1/keys``, on every node; many streams of one key end together.

The expiry test measures the delay from the key's expiry to its connections' close and prints
it (a figure to read, not a timed assertion: only a generous bound is asserted).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from relay.auth import digest
from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.e2e.conftest import test_settings as settings_for
from tests.relay.http.test_sse import RawStream
from tests.relay.test_revocation import Chatter
from tests.support.redis_server import RedisServer
from tests.support.wire import Peer

_BOUND_S = 15.0  # generous: the watch looks every 0.5 s; a loaded machine may lag


async def _stream(master: Master, session_id: str, secret: str) -> RawStream:
    path = f"/v1/sessions/{session_id}/events/stream"
    stream = await RawStream.open(master, path, {"Authorization": f"Bearer {secret}"})
    assert stream.status == 200
    return stream


async def _ended(stream: RawStream) -> float:
    """Read until the master ends the stream; the monotonic time it did."""
    async with asyncio.timeout(_BOUND_S):
        while await stream.next_event(_BOUND_S) is not None:
            pass
    return time.monotonic()


async def _closed(peer: Peer) -> tuple[int | None, float]:
    code = await peer.closed_with(_BOUND_S)
    return code, time.monotonic()


async def test_a_keys_expiry_ends_its_websockets_and_streams(master: Master) -> None:
    """A key's expiry passing closes its WebSocket 4401 and ends its busy SSE stream; the delay
    from the expiry to each end is printed."""
    client = await Peer.open(master.ws_url, "s-kexp", token=API_KEY, create=True)
    expires_at = time.time() + 1.5
    secret, _ = await master.hub.auth.create_key(
        "default", ["read"], expires_at_ms=int(expires_at * 1000)
    )
    edge = await Peer.open(master.ws_url, "s-kexp", role="edge", token=secret)
    stream = await _stream(master, "s-kexp", secret)
    expiry_mono = time.monotonic() + (expires_at - time.time())
    chatter = Chatter(client)
    await chatter.start()
    try:
        (code, ws_at), stream_at = await asyncio.gather(_closed(edge), _ended(stream))
    finally:
        await chatter.stop()
    assert code == 4401
    print(
        f"\nkey expiry → WebSocket closed {ws_at - expiry_mono:.3f} s, "
        f"SSE stream ended {stream_at - expiry_mono:.3f} s"
    )
    assert ws_at >= expiry_mono - 0.05  # not before its expiry
    await stream.close()
    await client.close()


async def test_revoking_a_key_ends_200_streams_at_once(master: Master) -> None:
    """200 WebSockets of one key close 4401 when it is revoked; another key's stay."""
    client = await Peer.open(master.ws_url, "s-many", token=API_KEY, create=True)
    secret, record = await master.hub.auth.create_key("default", ["read"])
    edges = await asyncio.gather(
        *(Peer.open(master.ws_url, "s-many", role="edge", token=secret) for _ in range(200))
    )
    assert master.hub.held_credentials.count(record.digest) == 200
    async with (
        aiohttp.ClientSession() as http,
        http.delete(
            f"{master.http_url}/v1/keys/{record.digest}",
            headers={"Authorization": f"Bearer {API_KEY}"},
        ) as response,
    ):
        assert response.status == 200
    codes = await asyncio.gather(*(edge.closed_with(_BOUND_S) for edge in edges))
    assert set(codes) == {4401}
    note = await client.send("agent.state", {"state": "thinking"})
    async with asyncio.timeout(5):
        while await master.store.message_seq("s-many", note["message_id"]) is None:
            await asyncio.sleep(0.01)
    await client.close()


@pytest.fixture
async def two_nodes(redis_server: RedisServer) -> AsyncIterator[Callable[[], Any]]:
    """Two in-process masters on our own Redis."""
    with contextlib.closing(redis_server.client()) as c:
        c.flushall()
    started: list[Master] = []

    async def start() -> list[Master]:
        for n in (1, 2):
            master = Master(settings_for(store=redis_server.url, node_id=f"N{n}"))
            await master.start()
            started.append(master)
        return started

    yield start
    for master in started:
        await master.stop()


@pytest.mark.redis
@pytest.mark.timeout(60)
async def test_a_key_revoked_over_http_on_one_node_ends_its_connections_on_another(
    two_nodes: Callable[[], Any],
) -> None:
    """Created on A, used on B (WebSocket and stream), revoked on A: B's end too."""
    a, b = await two_nodes()
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{a.http_url}/v1/keys",
            json={"scopes": ["read", "write"]},
            headers={"Authorization": f"Bearer {API_KEY}"},
        ) as response:
            assert response.status == 201
            secret = (await response.json())["key"]
        client = await Peer.open(b.ws_url, "s-ab", token=API_KEY, create=True)
        edge = await Peer.open(b.ws_url, "s-ab", role="edge", token=secret)
        stream = await _stream(b, "s-ab", secret)
        chatter = Chatter(client)
        await chatter.start()
        try:
            async with http.delete(
                f"{a.http_url}/v1/keys/{digest(secret)}",
                headers={"Authorization": f"Bearer {API_KEY}"},
            ) as response:
                assert response.status == 200
            assert await edge.closed_with(_BOUND_S) == 4401
            await _ended(stream)
        finally:
            await chatter.stop()
        await stream.close()
        async with http.get(
            f"{b.http_url}/v1/sessions", headers={"Authorization": f"Bearer {secret}"}
        ) as response:
            assert response.status == 401
        await client.close()
