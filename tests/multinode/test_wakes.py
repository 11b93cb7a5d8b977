"""Wakes on two ``rawp serve`` nodes sharing one Redis (notes §17.5): each due revisit is
logged once whichever node sweeps first, reaches the client on the node it is attached to,
and a claim left by a node that died before logging is taken over once its lease ends."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from relay.store.redis import RedisStore
from tests.support.masters import MasterProcess, start_all
from tests.support.redis_server import RedisServer
from tests.support.wire import Peer

__all__: list[str] = []

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

KEY = "rk_multinode_key"


def at(seconds: float) -> str:
    """An RFC 3339 time ``seconds`` from now."""
    moment = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)
    return moment.isoformat().replace("+00:00", "Z")


@contextlib.asynccontextmanager
async def two_nodes(
    server: RedisServer, tmp_path: Path, *, extra: list[str] | None = None
) -> AsyncIterator[list[MasterProcess]]:
    """Masters A and B on ``server`` (emptied first), ``extra`` flags added; stopped at the
    end."""
    with contextlib.closing(server.client()) as c:
        c.flushall()
    masters = [
        MasterProcess(n, server.url, api_key=KEY, log_dir=tmp_path, reattach_window=30)
        for n in "AB"
    ]
    for master in masters:
        master.argv += extra or []
    try:
        await asyncio.to_thread(start_all, masters)
        yield masters
    finally:
        await asyncio.gather(*(asyncio.to_thread(m.stop) for m in masters))


async def logged_wakes(store: RedisStore, session_id: str) -> list[dict[str, Any]]:
    """The session.wake entries of the session's log."""
    frames = [json.loads(e.data) for e in await store.read(session_id)]
    return [f for f in frames if f["type"] == "session.wake"]


async def eventually(check: Any, timeout: float = 10.0) -> None:
    """Poll the coroutine function ``check`` until it returns truthy."""
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_two_nodes_log_each_wake_once(redis_server: RedisServer, tmp_path: Path) -> None:
    """Ten sessions, clients on A, edges on B, each with a revisit due in ~1 s: every wake is
    logged exactly once and reaches its client and its edge exactly once."""
    store = RedisStore(redis_server.url)
    async with two_nodes(redis_server, tmp_path) as (a, b):
        pairs: list[tuple[Peer, Peer]] = []
        for i in range(10):
            sid = f"s-mn-wake-{i}"
            client = await Peer.open(a.ws_url, sid, token=KEY, create=True)
            edge = await Peer.open(b.ws_url, sid, role="edge", token=KEY)
            pairs.append((client, edge))
        due = at(1.0)
        for i, (client, _) in enumerate(pairs):
            await client.send("session.revisit.request", {"revisit_id": f"r{i}", "at": due})
        for client, edge in pairs:
            for peer in (client, edge):
                got = await peer.recv_type("session.wake", timeout=10.0)
                assert got["sender"]["role"] == "master"
        await asyncio.sleep(1.0)  # several sweeps of both nodes later
        for i, (client, edge) in enumerate(pairs):
            wakes = await logged_wakes(store, f"s-mn-wake-{i}")
            assert len(wakes) == 1, wakes
            for peer in (client, edge):
                seen = Counter(f["type"] for f in peer.received)
                assert seen["session.wake"] == 1, (i, peer.received)
        assert await store.list_wakes("default", due_only=False, after=None, limit=100) == []
    await store.close()


async def test_a_wake_of_a_client_away_reaches_it_on_the_other_node(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """The client asks on A and leaves; the wake is logged once and listed due; the client
    comes back through B with no resume and gets it right after its welcome."""
    store = RedisStore(redis_server.url)
    async with two_nodes(redis_server, tmp_path) as (a, b):
        client = await Peer.open(a.ws_url, "s-mn-away", token=KEY, create=True)
        await client.send("session.revisit.request", {"revisit_id": "r1", "at": at(1.0)})
        await eventually(lambda: store.list_wakes("default", due_only=False, after=None, limit=10))
        await client.close()

        async def listed_due() -> bool:
            return bool(await store.list_wakes("default", due_only=True, after=None, limit=10))

        await eventually(listed_due)
        assert len(await logged_wakes(store, "s-mn-away")) == 1
        back = await Peer.open(b.ws_url, "s-mn-away", token=KEY)
        got = await back.recv_type("session.wake", timeout=5.0)
        assert got["payload"]["revisit_id"] == "r1"
        assert await store.list_wakes("default", due_only=True, after=None, limit=10) == []
        assert len(await logged_wakes(store, "s-mn-away")) == 1
    await store.close()


async def test_a_claim_left_by_a_dead_node_is_logged_once_after_its_lease(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """A node that claimed a due wake and died before logging it (its claim made here, through
    the store, while no master runs) leaves the claim's lease to run out; then a node logs it,
    once."""
    store = RedisStore(redis_server.url)
    async with two_nodes(redis_server, tmp_path) as (a, _):
        client = await Peer.open(a.ws_url, "s-mn-dead", token=KEY, create=True)
        await client.send("session.revisit.request", {"revisit_id": "r1", "at": at(1.0)})
        await eventually(lambda: store.list_wakes("default", due_only=False, after=None, limit=10))
        # Claim it the way a node would, 0.5 s before it is due: the nodes' sweeps find it
        # claimed, under a lease as long as theirs (2 s with --node-dead-after 1).
        await asyncio.sleep(0.5)
        now_ms = int(time.time() * 1000)
        claimed = await store.claim_due_wakes(now_ms + 600, 2000)
        assert [r.revisit_id for r in claimed] == ["r1"]
        started = time.monotonic()
        got = await client.recv_type("session.wake", timeout=10.0)
        assert time.monotonic() - started >= 1.5  # only once the dead claim's lease ran out
        assert got["payload"]["revisit_id"] == "r1"
        await asyncio.sleep(0.6)
        assert len(await logged_wakes(store, "s-mn-dead")) == 1
    await store.close()


async def test_two_nodes_post_each_wake_once(redis_server: RedisServer, tmp_path: Path) -> None:
    """Both nodes have the webhook: ten wakes of clients away are POSTed once each."""
    posts: list[dict[str, Any]] = []

    async def handle(request: web.Request) -> web.Response:
        posts.append(json.loads(await request.read()))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
    hook = ["--wake-webhook", url, "--wake-webhook-secret", "s3cret"]
    try:
        async with two_nodes(redis_server, tmp_path, extra=hook) as (a, b):
            due = at(1.0)
            for i in range(10):
                node = a if i % 2 else b
                client = await Peer.open(node.ws_url, f"s-mn-hook-{i}", token=KEY, create=True)
                await client.send("session.revisit.request", {"revisit_id": "r", "at": due})
                await asyncio.sleep(0.05)
                await client.close()

            async def all_posted() -> bool:
                return len(posts) >= 10

            await eventually(all_posted)
            await asyncio.sleep(1.0)  # both nodes sweep on: nothing is posted twice
            assert sorted(p["session_id"] for p in posts) == [f"s-mn-hook-{i}" for i in range(10)]
    finally:
        await runner.cleanup()


async def test_a_revisit_whose_record_the_store_refused_is_still_woken(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """A revisit logged (acked) while the store refuses its wake record is scheduled once the
    store takes writes again, with the session still loaded and its client attached: woken
    once, not left waiting for the session's next load."""
    store = RedisStore(redis_server.url)
    async with two_nodes(redis_server, tmp_path) as (a, _):
        client = await Peer.open(a.ws_url, "s-mn-refused", token=KEY, create=True)
        with contextlib.closing(redis_server.client()) as c:
            c.set("rawp:{~wk}:rec", "not a hash")  # every wake script call fails (WRONGTYPE)
            await client.send("session.revisit.request", {"revisit_id": "r1", "at": at(1.0)})
            await asyncio.sleep(0.5)  # the request is logged, its record refused
            c.delete("rawp:{~wk}:rec")
        got = await client.recv_type("session.wake", timeout=10.0)
        assert got["payload"]["revisit_id"] == "r1"
        await asyncio.sleep(0.6)
        assert len(await logged_wakes(store, "s-mn-refused")) == 1
        assert Counter(f["type"] for f in client.received)["session.wake"] == 1
    await store.close()
