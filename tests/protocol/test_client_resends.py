"""The client library re-sends by itself after store_unavailable (docs/protocol.md §7).

A real master on the Redis store of the test's own redis-server (AOF, ``appendfsync
always``, a free loopback port). A :class:`RawpClient` streams text deltas; Redis is killed
mid-stream and started again on the same port and directory. The master refuses what it
cannot make durable (``store_unavailable``) and then every later frame of the connection;
the library goes back to the first refused frame and sends everything from there again,
with backoff, on the same connection. Every frame the caller sent is in the log exactly
once and in the order it was sent, and the caller never saw a refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path

import pytest

from protocol import frames as F
from protocol.client import Backoff, ConnectionStatus, RawpClient
from relay.server import Master
from relay.store.base import LogEntry
from relay.store.redis import RedisStore
from tests.e2e.conftest import API_KEY
from tests.e2e.conftest import test_settings as settings_for
from tests.support.redis_server import RedisServer, redis_server_binary

__all__: list[str] = []

pytestmark = [pytest.mark.redis, pytest.mark.timeout(90)]


async def test_a_redis_outage_mid_stream_loses_nothing_and_reorders_nothing(
    tmp_path: Path,
) -> None:
    """Redis killed and restarted under a client's stream: the library re-sends from the
    first refused frame, in order; the log holds every frame sent exactly once, in order."""
    if redis_server_binary() is None:
        pytest.skip("redis-server is not on PATH")
    server = RedisServer(tmp_path / "redis")
    server.start()
    master = Master(
        settings_for(
            store=server.url,
            node_id="R1",
            reattach_window_s=30.0,
            node_heartbeat_s=0.2,
            node_dead_after_s=30.0,  # the outage is shorter: the node is not declared dead
        )
    )
    await master.start()
    sid = "s-client-resends"
    statuses: list[ConnectionStatus] = []
    client = RawpClient(
        master.ws_url,
        sid,
        role="client",
        token=API_KEY,
        create=True,
        backoff=Backoff(initial=0.1, maximum=1.0),
        resend_rounds=None,  # never give the connection up: the re-sends alone must do it
        on_status=statuses.append,
    )
    seen: list[F.Frame | F.GenericFrame] = []

    async def read() -> None:
        async for frame in client:
            seen.append(frame)

    reader: asyncio.Task[None] | None = None
    try:
        await client.connect(timeout=20)
        reader = asyncio.create_task(read())
        sent: list[str] = []
        turn = await client.turn_start()
        sent.append(turn.message_id)

        async def stream(seconds: float) -> None:
            until = time.monotonic() + seconds
            while time.monotonic() < until:
                sent.append((await client.text_delta("b1", f"{len(sent)} ")).message_id)
                await asyncio.sleep(0.01)

        await stream(0.5)
        server.kill()  # --- Redis dies under the stream -----------------------------------
        await stream(1.5)
        assert client.resend_due or client.resent, "no store_unavailable while Redis was down"
        await asyncio.to_thread(server.start)  # --- back, AOF replayed; master not restarted
        await stream(1.5)
        sent.append((await client.text_done("b1")).message_id)
        sent.append((await client.turn_end(turn.payload.turn_id)).message_id)
        await client.flush(timeout=30)

        logged = _client_frames(await _log(server, sid))
        assert logged == sent, "not every frame exactly once, in the order it was sent"
        assert client.resent > 0
        assert ConnectionStatus.RECONNECTING not in statuses  # same connection throughout
        refusals = [f for f in seen if isinstance(f, F.SessionError)]
        assert refusals == [], "the caller saw a refusal the library handled"
    finally:
        await client.close()
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
        await master.stop()
        server.kill()


async def _log(server: RedisServer, sid: str) -> list[LogEntry]:
    store = RedisStore(server.url)
    try:
        return await store.read(sid)
    finally:
        await store.close()


def _client_frames(log: list[LogEntry]) -> list[str]:
    """The client's frames in log order, a reattach history's frames where it sits."""
    ids: list[str] = []
    for e in log:
        if e.sender_role != "client":
            continue
        if e.type == "session.history":
            ids += [f["message_id"] for f in json.loads(e.data)["payload"]["frames"]]
        else:
            ids.append(e.message_id)
    return ids


async def test_an_outage_that_outlasts_the_rounds_is_carried_by_a_reattach(
    tmp_path: Path,
) -> None:
    """With few, fast rounds the client gives the connection up and reattaches; its history
    carries what was refused: still every frame once, in order, and no refusal seen."""
    if redis_server_binary() is None:
        pytest.skip("redis-server is not on PATH")
    server = RedisServer(tmp_path / "redis")
    server.start()
    master = Master(
        settings_for(
            store=server.url,
            node_id="R2",
            reattach_window_s=30.0,
            node_heartbeat_s=0.2,
            node_dead_after_s=30.0,
        )
    )
    await master.start()
    sid = "s-client-resends-reattach"
    statuses: list[ConnectionStatus] = []
    client = RawpClient(
        master.ws_url,
        sid,
        role="client",
        token=API_KEY,
        create=True,
        backoff=Backoff(initial=0.02, maximum=0.1),
        resend_rounds=2,
        on_status=statuses.append,
    )
    seen: list[F.Frame | F.GenericFrame] = []

    async def read() -> None:
        async for frame in client:
            seen.append(frame)

    reader: asyncio.Task[None] | None = None
    try:
        await client.connect(timeout=20)
        reader = asyncio.create_task(read())
        turn = await client.turn_start()
        sent = [turn.message_id]
        for n in range(20):
            sent.append((await client.text_delta("b1", f"{n} ")).message_id)
            await asyncio.sleep(0.01)
        server.kill()
        for n in range(20, 60):
            sent.append((await client.text_delta("b1", f"{n} ")).message_id)
            await asyncio.sleep(0.03)
        await asyncio.to_thread(server.start)
        for n in range(60, 80):
            sent.append((await client.text_delta("b1", f"{n} ")).message_id)
            await asyncio.sleep(0.01)
        sent.append((await client.text_done("b1")).message_id)
        sent.append((await client.turn_end(turn.payload.turn_id)).message_id)
        await client.flush(timeout=30)
        log = await _log(server, sid)
        assert _client_frames(log) == sent, "not every frame exactly once, in order"
        assert ConnectionStatus.RECONNECTING in statuses  # it gave the connection up
        assert any(e.type == "session.history" for e in log)
        assert client.resent > 0
        errors = [f for f in seen if isinstance(f, F.SessionError)]
        assert errors == [], "the caller saw a refusal the library handled"
    finally:
        await client.close()
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
        await master.stop()
        server.kill()
