"""Slow consumers, rate limits and oversize frames (notes §11): bounded, answered, recovered.

* An edge that stops reading never makes the master hold more than its bound for it
  (``send_queue_bytes`` in the outbox, plus what the transport holds while paused); it is
  closed 4429 and recovers by reattaching, with exact accounting: the seqs it received live,
  plus the seqs of its backlog, plus its ``lost_frame_count``, are every seq live delivery
  owed it — none twice, in order.
* A connection over its frames/s gets ``rate_limited`` per refused frame and, when it keeps
  on, close 1008; a frame over ``max_frame_bytes`` is closed 1009. Neither disturbs another
  session's stream, and the master keeps answering ``/healthz``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from bench._wsraw import RawWS, open_raw
from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.support.wire import Peer, envelope

_FAST = {"rate_frames_per_s": 1e6, "rate_bytes_per_s": 1e10}


def _hello(session_id: str, role: str, **payload: Any) -> bytes:
    body = {"protocol_version": "1.0.2", "role": role, "token": API_KEY, **payload}
    return json.dumps(envelope(session_id, "connection.hello", body)).encode()


async def _raw_edge(
    master: Master, session_id: str, **payload: Any
) -> tuple[RawWS, dict[str, Any]]:
    ws = await open_raw("127.0.0.1", master.ws_port, rcvbuf=4096)
    ws.send_text(_hello(session_id, "edge", **payload))
    welcome = json.loads(await ws.recv(timeout=5))
    assert welcome["type"] == "connection.welcome", welcome
    return ws, welcome


async def _healthy(master: Master) -> bool:
    async with (
        aiohttp.ClientSession() as http,
        http.get(master.http_url + "/healthz") as response,
    ):
        return response.status == 200


async def test_slow_consumer_is_bounded_closed_4429_and_recovers_exactly(make_master: Any) -> None:
    bound = 128 * 1024
    master: Master = await make_master(send_queue_bytes=bound, **_FAST)
    sid = "s-rel-slow"
    client = await Peer.open(master.ws_url, sid, token=API_KEY, create=True)
    slow, welcome = await _raw_edge(master, sid)
    pid = welcome["payload"]["participant_id"]
    head0 = welcome["payload"]["session"]["head_seq"]
    session = master.hub.sessions[sid]
    participant = session.participants[pid]
    slow.pause_reading()
    worst_queue = worst_total = sent = 0
    delta = "x" * 2000
    while not participant.outbox.closed:
        await client.send("agent.text.delta", {"block_id": "b", "delta": delta})
        sent += 1
        await asyncio.sleep(0)
        buffered = participant.sink.buffered  # type: ignore[attr-defined]
        worst_queue = max(worst_queue, participant.outbox.queued_bytes)
        worst_total = max(worst_total, participant.outbox.queued_bytes + buffered)
        assert sent < 20_000, "the slow edge was never cut off"
    # The bound holds: the outbox never holds more than send_queue_bytes; the transport
    # adds at most its write limit plus one coalesced write (relay/ws.py, relay/fanout.py).
    assert worst_queue <= bound
    assert worst_total <= bound + 32 * 1024 + 64 * 1024 + 4096
    slow.resume_reading()
    assert await slow.wait_closed(timeout=15) == 4429
    live = [json.loads(m) for m in slow.messages]
    live_seqs = [f["seq"] for f in live if "seq" in f]
    cursor = live_seqs[-1] if live_seqs else head0
    # Reattach with a RING buffer that fits in the send queue: the newest frames come back,
    # the rest are counted as lost.
    back, _ = await _raw_edge(
        master,
        sid,
        participant_id=pid,
        resume={"last_seq": cursor},
        buffer={"policy": "RING", "capacity_bytes": bound // 2},
    )
    history = json.loads(await back.recv(timeout=5))
    assert history["type"] == "session.history"
    kept = [f["seq"] for f in history["payload"]["frames"]]
    lost = history["payload"]["buffer_status"]["lost_frame_count"]
    log = await master.store.read(sid)
    owed = [e.seq for e in log if e.seq > head0 and e.delivered_to(pid, "edge")]
    owed = [s for s in owed if s <= max(kept + live_seqs, default=head0) or s <= cursor]
    received = live_seqs + kept
    assert received == sorted(set(received)), "a frame twice or out of order"
    assert set(received) <= set(owed)
    assert len(owed) == len(received) + lost, (len(owed), len(received), lost)
    # ... and live delivery resumes where the backlog ended.
    sentinel = await client.send("agent.state", {"state": "idle"})
    frame = json.loads(await back.recv(timeout=5))
    while frame["type"] == "session.presence":
        frame = json.loads(await back.recv(timeout=5))
    assert frame["message_id"] == sentinel["message_id"]
    assert frame["seq"] == (kept[-1] if kept else cursor) + 1 + (
        # presence frames about others between the backlog and the sentinel
        sum(
            1
            for e in await master.store.read(sid, after_seq=kept[-1] if kept else cursor)
            if e.seq < frame["seq"] and not e.delivered_to(pid, "edge")
        )
    )
    assert await _healthy(master)
    await back.close()
    await client.close()


async def test_rate_limit_answers_then_closes_1008_others_unaffected(make_master: Any) -> None:
    master: Master = await make_master(
        rate_frames_per_s=20.0, rate_burst_s=1.0, rate_strikes_to_close=5
    )
    calm = await Peer.open(master.ws_url, "s-rel-calm", token=API_KEY, create=True)
    watcher = await Peer.open(master.ws_url, "s-rel-calm", role="edge", token=API_KEY)
    await calm.recv()  # the watcher's presence
    noisy = await Peer.open(master.ws_url, "s-rel-noisy", token=API_KEY, create=True)
    for i in range(60):
        try:
            await noisy.send("agent.text.delta", {"block_id": "b", "delta": str(i)})
        except Exception:
            break
    code = await noisy.closed_with(timeout=5)
    errors = [f for f in noisy.received if f["type"] == "session.error"]
    assert code == 1008
    assert errors
    assert {f["payload"]["error_code"] for f in errors} == {"rate_limited"}
    assert all(f["payload"]["fatal"] is False for f in errors)
    sent = await calm.send("agent.state", {"state": "thinking"})
    got = await watcher.recv()
    assert got["message_id"] == sent["message_id"]
    assert await _healthy(master)


async def test_oversize_frame_closes_1009_others_unaffected(make_master: Any) -> None:
    master: Master = await make_master(max_frame_bytes=64 * 1024)
    calm = await Peer.open(master.ws_url, "s-rel-calm2", token=API_KEY, create=True)
    watcher = await Peer.open(master.ws_url, "s-rel-calm2", role="edge", token=API_KEY)
    await calm.recv()
    big = await Peer.open(master.ws_url, "s-rel-big", token=API_KEY, create=True)
    await big.send("agent.text.delta", {"block_id": "b", "delta": "x" * 100_000})
    assert await big.closed_with(timeout=5) == 1009
    sent = await calm.send("agent.state", {"state": "thinking"})
    assert (await watcher.recv())["message_id"] == sent["message_id"]
    assert await _healthy(master)
