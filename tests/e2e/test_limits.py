"""Limits answer with clear codes, never a crash: frame size, rate, slow consumers, edges (§11)."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.e2e.util import hello, hello_close_code, logged, new_session, next_frame, wait_until
from tests.support.wire import Peer, envelope


async def test_frame_over_max_frame_bytes_closes_1009(make_master: Any) -> None:
    """A message larger than max_frame_bytes closes the connection 1009; the session lives on."""
    master: Master = await make_master(max_frame_bytes=4096)
    client, (edge,) = await new_session(master, "s-lim-big")
    assert client.welcome["payload"]["max_frame_bytes"] == 4096
    big = await edge.send("user.message", {"text": "x" * 5000})
    assert await edge.closed_with() == 1009
    assert (await client.recv())["payload"]["state"] == "detached"
    assert big["message_id"] not in {f["message_id"] for f in await logged(master, "s-lim-big")}
    # Under the limit is fine (with room for the backlog's envelope: it fits the limit too).
    sent = await client.send("agent.text.delta", {"block_id": "b", "delta": "y" * 3000})
    other = await Peer.open(
        master.ws_url, "s-lim-big", role="edge", token=API_KEY, resume={"last_seq": 0}
    )
    history = await other.recv()
    assert sent["message_id"] in {f["message_id"] for f in history["payload"]["frames"]}


async def test_nothing_delivered_is_larger_than_the_welcomes_max_frame_bytes(
    make_master: Any,
) -> None:
    """A frame that fits max_frame_bytes only before the master stamps it is refused
    invalid_frame; what is delivered, live or in a backlog, never exceeds the limit."""
    master: Master = await make_master(max_frame_bytes=4096)
    client, (edge,) = await new_session(master, "s-lim-stamp")
    limit = client.welcome["payload"]["max_frame_bytes"]
    frame = envelope("s-lim-stamp", "agent.text.delta", {"block_id": "b", "delta": ""})
    frame["payload"]["delta"] = "z" * (limit - len(json.dumps(frame, separators=(",", ":"))))
    exact = json.dumps(frame, separators=(",", ":"))
    assert len(exact) == limit
    await client.ws.send(exact)
    refused = await client.recv()
    assert refused["payload"]["error_code"] == "invalid_frame"
    assert frame["message_id"] in refused["payload"]["message"]
    fits = await client.send("agent.text.delta", {"block_id": "b", "delta": "w" * (limit - 400)})
    live = await edge.ws.recv()
    assert json.loads(live)["message_id"] == fits["message_id"]
    assert len(live.encode() if isinstance(live, str) else live) <= limit
    other = await Peer.open(
        master.ws_url, "s-lim-stamp", role="edge", token=API_KEY, resume={"last_seq": 0}
    )
    backlog = await other.ws.recv()
    assert len(backlog.encode() if isinstance(backlog, str) else backlog) <= limit
    assert json.loads(backlog)["payload"]["buffer_status"]["truncated"] is True


async def test_oversized_hello_closes_1009(make_master: Any) -> None:
    """The limit holds before the hello too."""
    master: Master = await make_master(max_frame_bytes=1024)
    message = hello("s-lim-big-hello", create={"name": "n" * 2000})
    assert await hello_close_code(master, message) == 1009


async def test_persistent_rate_excess_gets_rate_limited_then_1008(make_master: Any) -> None:
    """Frames over the rate are answered rate_limited (not relayed); persisting closes 1008."""
    master: Master = await make_master(
        rate_frames_per_s=2.0, rate_burst_s=1.0, rate_strikes_to_close=3
    )
    _client, (edge,) = await new_session(master, "s-lim-rate")
    sent: list[dict[str, Any]] = []
    try:
        for n in range(50):
            sent.append(await edge.send("user.message", {"text": f"m{n}"}))
    except ConnectionClosed:
        pass
    frames: list[dict[str, Any]] = []
    try:
        while True:
            frames.append(await edge.recv())
    except ConnectionClosed:
        pass
    assert edge.ws.close_code == 1008
    errors = [f for f in frames if f["type"] == "session.error"]
    assert errors, "rate_limited must be said before the close"
    assert {e["payload"]["error_code"] for e in errors} == {"rate_limited"}
    assert all(e["payload"]["fatal"] is False for e in errors)
    relayed = [f for f in await logged(master, "s-lim-rate") if f["type"] == "user.message"]
    assert 1 <= len(relayed) <= 2 + len(sent) - len(errors)
    assert len(relayed) < len(sent)


async def test_rate_limited_frames_recover_below_the_limit(make_master: Any) -> None:
    """Short of persisting, a rate-limited connection stays open and is served again."""
    master: Master = await make_master(
        rate_frames_per_s=50.0, rate_burst_s=0.1, rate_strikes_to_close=1000
    )
    sid = "s-lim-rate-ok"
    client, (edge,) = await new_session(master, sid)
    refused = master.hub.metrics.errors.labels("rate_limited")
    sent = [await edge.send("user.message", {"text": f"m{n}"}) for n in range(30)]

    async def relayed_ids() -> list[str]:
        return [f["message_id"] for f in await logged(master, sid) if f["type"] == "user.message"]

    async def accounted() -> bool:
        return bool(len(await relayed_ids()) + refused._value.get() == len(sent))

    await wait_until(accounted)  # every frame was either relayed or refused
    errors = int(refused._value.get())
    relayed = await relayed_ids()
    assert 0 < errors < len(sent)
    for _ in range(errors):
        assert (await edge.recv())["payload"]["error_code"] == "rate_limited"
    assert [(await next_frame(client))["message_id"] for _ in relayed] == relayed
    # Once the bucket refills it is served normally again (the bound only guards a hang).
    for _ in range(100):
        before = refused._value.get()
        later = await edge.send("user.message", {"text": "later"})

        async def decided(message_id: str = later["message_id"], n: float = before) -> bool:
            return message_id in await relayed_ids() or refused._value.get() > n

        await wait_until(decided)
        if later["message_id"] in await relayed_ids():
            assert (await next_frame(client))["message_id"] == later["message_id"]
            break
        assert (await edge.recv())["payload"]["error_code"] == "rate_limited"
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the connection was never served again")
    assert edge.ws.close_code is None


async def test_slow_consumer_is_closed_4429_and_recovers_by_reattach(make_master: Any) -> None:
    """An edge that stops reading is closed 4429 once its send queue passes the bound."""
    master: Master = await make_master(send_queue_bytes=64 * 1024)
    sid = "s-lim-slow"
    client, (witness,) = await new_session(master, sid)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", master.ws_port))
    sock.setblocking(False)
    slow = await Peer.open(master.ws_url, sid, role="edge", token=API_KEY, sock=sock, max_queue=1)
    await client.recv()
    await witness.recv()
    outbox = master.hub.sessions[sid].participants[slow.participant_id].outbox
    sent = 0
    # The slow edge reads nothing while the client streams; the witness reads everything.
    while not outbox.closed:
        await client.send("agent.text.delta", {"block_id": "b", "delta": "x" * 4000})
        await next_frame(witness)
        sent += 1
        assert sent < 20_000, "the slow edge was never cut off"
    assert await slow.closed_with(timeout=15) == 4429
    assert slow.ws.close_reason is not None
    assert "slow_consumer" in slow.ws.close_reason
    got = [f for f in slow.received[1:] if f["type"] == "agent.text.delta"]
    assert len(got) < sent
    # The session and the other participants are untouched.
    assert (await witness.recv())["payload"] == {
        "participant_id": slow.participant_id,
        "role": "edge",
        "state": "detached",
    }
    # It recovers by reattach. The backlog must fit the send queue too, so it asks for a
    # RING buffer smaller than the queue bound: it gets the newest frames it missed.
    cursor = got[-1]["seq"] if got else slow.welcome["payload"]["session"]["head_seq"]
    back = await Peer.open(
        master.ws_url,
        sid,
        role="edge",
        token=API_KEY,
        participant_id=slow.participant_id,
        resume={"last_seq": cursor},
        buffer={"policy": "RING", "capacity_bytes": 32 * 1024},
    )
    history = await back.recv()
    kept = [f["seq"] for f in history["payload"]["frames"] if f["type"] == "agent.text.delta"]
    missed = sent - len(got)
    last = witness.received[-2]["seq"]  # the last delta, before the detach notice
    assert kept == list(range(last - len(kept) + 1, last + 1))
    status = history["payload"]["buffer_status"]
    assert status["truncated"] is (len(kept) < missed)
    assert status["lost_frame_count"] == missed - len(kept)
    sentinel = await client.send("agent.state", {"state": "idle"})
    assert (await next_frame(back))["message_id"] == sentinel["message_id"]


async def test_edges_per_session_limit_closes_4403(make_master: Any) -> None:
    """One edge more than max_edges_per_session is refused 4403."""
    master: Master = await make_master(max_edges_per_session=2)
    await new_session(master, "s-lim-edges", edges=2)
    message = hello("s-lim-edges", role="edge")
    assert await hello_close_code(master, message) == 4403


async def test_garbage_after_welcome_never_closes(master: Master) -> None:
    """A stream of malformed frames is answered frame by frame; the connection stays usable."""
    client, (edge,) = await new_session(master, "s-lim-garbage")
    bad: list[str | bytes] = ["", "{", "null", "[]", json.dumps({"type": 5}), b"\xff" * 10]
    for message in bad:
        await client.ws.send(message)
    codes = [(await next_frame(client))["payload"]["error_code"] for _ in bad]
    assert codes == ["invalid_frame"] * 5 + ["unsupported_data"]
    sentinel = await client.send("agent.state", {"state": "thinking"})
    assert (await next_frame(edge))["message_id"] == sentinel["message_id"]


async def test_size_limit_holds_without_subprotocol(make_master: Any) -> None:
    """max_frame_bytes holds for a connection that negotiated no subprotocol."""
    master: Master = await make_master(max_frame_bytes=2048)
    async with connect(master.ws_url) as ws:
        await ws.send(hello("s-lim-nosub", create={}))
        assert json.loads(await ws.recv())["type"] == "connection.welcome"
        await ws.send("z" * 4096)
        try:
            while True:
                await ws.recv()
        except ConnectionClosed:
            pass
        assert ws.close_code == 1009


async def test_backlog_larger_than_the_send_bound_is_delivered(make_master: Any) -> None:
    """A reattach backlog bigger than send_queue_bytes still arrives whole."""
    master = await make_master(send_queue_bytes=4096, buffer_capacity=256 * 1024)
    client = await Peer.open(master.ws_url, "s-big-backlog", token=API_KEY, create=True)
    edge = await Peer.open(master.ws_url, "s-big-backlog", role="edge", token=API_KEY)
    edge_id, cursor = edge.participant_id, edge.welcome["payload"]["session"]["head_seq"]
    await edge.close()
    for i in range(40):
        await client.send("agent.text.delta", {"block_id": "b", "delta": f"{i:03d}" + "x" * 500})
    await wait_until(lambda: master.hub.sessions["s-big-backlog"].head >= cursor + 41)
    again = await Peer.open(
        master.ws_url,
        "s-big-backlog",
        role="edge",
        token=API_KEY,
        participant_id=edge_id,
        resume={"last_seq": cursor},
    )
    history = await again.recv_type("session.history")
    deltas = [f for f in history["payload"]["frames"] if f["type"] == "agent.text.delta"]
    assert len(deltas) == 40
    assert history["payload"]["buffer_status"]["truncated"] is False
    await client.send("agent.text.done", {"block_id": "b"})
    assert (await again.recv_type("agent.text.done"))["payload"]["block_id"] == "b"
    await client.close()
    await again.close()
