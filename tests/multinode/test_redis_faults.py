"""Redis crashes (SIGKILL) and comes back under traffic: nothing acknowledged is lost.

Two in-process masters share one redis-server of the test's own (AOF, ``appendfsync
always``): the client streams text deltas into node F1, an edge watches through node F2
(pub/sub). Redis is killed mid-stream and restarted on the same port and directory.

A frame is **acknowledged** when the edge received it with a seq, or when its sender never
got a ``store_unavailable`` error naming it (the master answers every frame it could not make
durable with one). The client behaves as the master asks (docs/protocol.md §7): on a refusal
it goes back to the first refused frame and sends everything from there again, in order.
Every acknowledged frame must be in the log after the restart, exactly
once. While Redis is down, frames are refused with ``store_unavailable`` and ``/readyz``
answers 503 on both nodes; once it is back, ``/readyz`` answers 200 and service resumes
without restarting either master: new frames are logged and reach the edge, and the edge
received every logged entry it is owed, in seq order, without a gap or a duplicate.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from relay.server import Master
from relay.store.redis import RedisStore
from tests.e2e.conftest import API_KEY
from tests.e2e.conftest import test_settings as settings_for
from tests.support.redis_server import RedisServer, redis_server_binary
from tests.support.wire import Peer, envelope, new_turn_id, usage_payload

__all__: list[str] = []

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

_NOT_STORED = re.compile(r"frame (\S+) was not stored")


async def readyz(master: Master) -> int:
    """The HTTP status of the master's ``/readyz``."""
    async with (
        aiohttp.ClientSession() as http,
        http.get(master.http_url + "/readyz", timeout=aiohttp.ClientTimeout(total=5)) as r,
    ):
        return r.status


async def wait_for(predicate: Any, timeout: float, what: str) -> None:
    """Poll an async predicate until it holds."""
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


class Traffic:
    """The client streaming deltas, and what came back to it and to the edge."""

    def __init__(self, client: Peer, edge: Peer) -> None:
        self.client = client
        self.edge = edge
        self.sent: list[tuple[float, str]] = []  # (when, message_id), re-sends included
        self.refused: set[str] = set()  # named by a store_unavailable
        self.other_errors: list[dict[str, Any]] = []
        self.edge_frames: list[dict[str, Any]] = []
        self.running = True
        self.produced: list[dict[str, Any]] = []  # every frame once, in production order
        self._index: dict[str, int] = {}
        self._next = 0  # the position in ``produced`` sent next
        self.finals: list[tuple[str, dict[str, Any]]] = []  # sent once the deltas stop

    def _produce(self, type_: str, payload: dict[str, Any]) -> None:
        frame = envelope(self.client.session_id, type_, payload)
        self._index[frame["message_id"]] = len(self.produced)
        self.produced.append(frame)

    async def send(self, block: str) -> None:
        """One frame every 10 ms: new deltas until stopped, then ``finals``; after a refusal
        everything again from the first refused frame (go-back-N)."""
        n = 0
        while True:
            if self._next == len(self.produced):
                if self.running:
                    self._produce("agent.text.delta", {"block_id": block, "delta": f"{n} "})
                    n += 1
                elif self.finals:
                    self._produce(*self.finals.pop(0))
                else:
                    await asyncio.sleep(0.01)
                    continue
            frame = self.produced[self._next]
            self._next += 1
            await self.client.send_frame(frame)
            self.sent.append((time.monotonic(), frame["message_id"]))
            await asyncio.sleep(0.01)

    def _rewind(self, message_id: str) -> None:
        at = self._index.get(message_id)
        if at is not None and at < self._next:
            self._next = at

    async def client_reader(self) -> None:
        """Collect the client's errors (store_unavailable names the refused frame)."""
        while True:
            frame = await self.client.recv(60)
            if frame["type"] != "session.error":
                continue
            payload = frame["payload"]
            match = _NOT_STORED.search(payload.get("message", ""))
            if payload["error_code"] == "store_unavailable" and match:
                assert payload["fatal"] is False
                self.refused.add(match.group(1))
                self._rewind(match.group(1))
            else:
                self.other_errors.append(frame)

    async def edge_reader(self) -> None:
        """Collect every logged entry the edge receives."""
        while True:
            frame = await self.edge.recv(60)
            if "seq" in frame:
                self.edge_frames.append(frame)


async def test_redis_crash_under_traffic_loses_nothing_acknowledged(tmp_path: Path) -> None:
    """Kill -9 and restart Redis mid-stream: acknowledged frames survive, service resumes."""
    if redis_server_binary() is None:
        pytest.skip("redis-server is not on PATH")
    server = RedisServer(tmp_path / "redis")  # our own: the shared fixture is not crashed
    server.start()
    masters: list[Master] = []
    tasks: list[asyncio.Task[None]] = []
    try:
        for node in ("F1", "F2"):
            master = Master(
                settings_for(
                    store=server.url,
                    node_id=node,
                    reattach_window_s=30.0,
                    node_heartbeat_s=0.2,
                    node_dead_after_s=10.0,  # the outage is shorter: nobody is declared dead
                )
            )
            await master.start()
            masters.append(master)
        m1, m2 = masters
        sid = "s-redis-fault"
        client = await Peer.open(m1.ws_url, sid, role="client", token=API_KEY, create=True)
        edge = await Peer.open(m2.ws_url, sid, role="edge", token=API_KEY)
        joined = edge.welcome["payload"]["session"]["head_seq"]
        turn = new_turn_id()
        await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
        traffic = Traffic(client, edge)
        tasks = [
            asyncio.create_task(traffic.send("b1")),
            asyncio.create_task(traffic.client_reader()),
            asyncio.create_task(traffic.edge_reader()),
        ]
        await asyncio.sleep(0.5)

        # --- Redis crashes -------------------------------------------------------------
        server.kill()
        await wait_for(lambda: _refused(traffic), 10, "a store_unavailable answer")
        assert [await readyz(m) for m in masters] == [503, 503]
        await asyncio.sleep(1.0)  # traffic goes on into the outage

        # --- Redis comes back (AOF replayed); the masters are not restarted ---------------
        server.start()
        await wait_for(lambda: _ready(masters), 15, "/readyz 200 on both nodes")
        back_at = time.monotonic()
        await asyncio.sleep(1.0)
        traffic.finals = [
            ("agent.text.done", {"block_id": "b1"}),
            ("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"}),
            ("session.usage", usage_payload(turn)),
        ]
        traffic.running = False
        await wait_for(lambda: _finals_sent(traffic), 15, "the last frames to be produced")
        last = traffic.produced[-1]
        await wait_for(
            lambda: _received(traffic, last["message_id"]), 15, "the edge to get the last frame"
        )

        # --- what the store kept ----------------------------------------------------------
        store = RedisStore(server.url)
        try:
            log = await store.read(sid)
        finally:
            await store.close()
        assert [e.seq for e in log] == list(range(1, len(log) + 1))
        logged = [e.message_id for e in log]
        assert len(logged) == len(set(logged)), "a frame was logged twice"
        sent_ids = [mid for _, mid in traffic.sent]
        # Every frame produced is logged once, in production order (re-sends included).
        produced = [f["message_id"] for f in traffic.produced]
        assert [m for m in logged if m in set(produced)] == produced
        by_edge = {f["message_id"] for f in traffic.edge_frames}
        acknowledged = by_edge | (set(sent_ids) - traffic.refused)
        assert traffic.refused, "no store_unavailable while Redis was down"
        assert not traffic.other_errors, traffic.other_errors
        missing = acknowledged - set(logged)
        assert not missing, f"{len(missing)} acknowledged frames were lost"
        assert by_edge <= set(logged)
        # Service came back: everything sent after the recovery was logged.
        after = [mid for at, mid in traffic.sent if at > back_at + 0.2]
        assert after
        assert set(after) <= set(logged)
        # The edge got every entry owed to it, in order, no gap, no duplicate (pub/sub
        # resubscribed and the gap of the outage was filled from the log).
        # (the master's session.status frames, notes §17.4, are kept aside by the test peer)
        owed = [
            e.seq
            for e in log
            if e.seq > joined
            and e.delivered_to(edge.participant_id, "edge")
            and e.type != "session.status"
        ]
        assert [f["seq"] for f in traffic.edge_frames] == owed
        last = [e for e in log if e.type != "session.status"][-1]
        assert json.loads(last.data)["type"] == "session.usage"
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for master in masters:
            with contextlib.suppress(Exception):
                await master.stop()
        server.kill()


async def _finals_sent(traffic: Traffic) -> bool:
    return not traffic.running and not traffic.finals


async def _refused(traffic: Traffic) -> bool:
    return bool(traffic.refused)


async def _ready(masters: list[Master]) -> bool:
    return all([await readyz(m) == 200 for m in masters])


async def _received(traffic: Traffic, message_id: str) -> bool:
    return any(f["message_id"] == message_id for f in traffic.edge_frames)
