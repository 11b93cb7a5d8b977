"""Producer acks and refusal references (notes §16.3), over real sockets to a real master."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from protocol import frames as F
from protocol.client import ConnectionStatus, FrameRefused, RawpClient
from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.support.clients import FAST, wait_until
from tests.support.wire import Peer, new_turn_id


async def _log_seq(master: Master, session_id: str, message_id: str) -> int | None:
    return await master.store.message_seq(session_id, message_id)


async def test_the_master_acks_what_it_committed_of_the_senders_frames(master: Master) -> None:
    """connection.ack {last_seq, last_message_id} names the sender's latest committed frame."""
    sid = "s-ack-wire"
    client = await Peer.open(master.ws_url, sid, token=API_KEY, create=True, acks=True)
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    last = await client.send("agent.text.delta", {"block_id": "b1", "delta": "hi"})
    acks = []
    while not acks or acks[-1]["payload"]["last_message_id"] != last["message_id"]:
        frame = await client.recv_type("connection.ack")
        assert frame["sender"]["role"] == "master"
        acks.append(frame)
    seqs = [a["payload"]["last_seq"] for a in acks]
    # cumulative, and only when something new was committed: strictly increasing
    assert seqs == sorted(set(seqs))
    assert seqs[-1] == await _log_seq(master, sid, last["message_id"])
    # nothing new of ours committed: no further ack
    assert await client.no_frame(0.3)
    await client.close()


async def test_only_the_sender_is_acked(master: Master) -> None:
    """An edge sees the client's frames, never an ack for them (acks go to their sender)."""
    sid = "s-ack-edge"
    # a client that steers: the edge's message during the turn is relayed at once (§17.3)
    client = await Peer.open(
        master.ws_url, sid, token=API_KEY, create=True, acks=True, accepts_input_during_turn=True
    )
    edge = await Peer.open(master.ws_url, sid, role="edge", token=API_KEY, acks=True)
    turn = new_turn_id()
    start = await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    got = await edge.recv_until(lambda f: f.get("message_id") == start["message_id"])
    assert all(f["type"] != "connection.ack" for f in got)
    answer = await edge.send("user.message", {"text": "go on"})
    ack = await edge.recv_type("connection.ack")
    assert ack["payload"]["last_message_id"] == answer["message_id"]
    await client.close()
    await edge.close()


async def test_a_refusal_names_the_refused_frame(master: Master) -> None:
    """A refused frame's session.error carries ref_message_id; a warning carries none."""
    sid = "s-ack-refuse"
    client = await Peer.open(master.ws_url, sid, token=API_KEY, create=True, acks=True)
    bad = await client.send(
        "session.turn.end", {"turn_id": new_turn_id(), "stop_reason": "end_turn"}
    )
    error = await client.recv_type("session.error")
    assert error["payload"]["error_code"] == "turn_state"
    assert error["payload"]["ref_message_id"] == bad["message_id"]
    # usage_missing is a warning about an accepted frame: no reference, and it is logged
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    late = await client.send("agent.state", {"state": "idle"})
    warning = await client.recv_type("session.error")
    assert warning["payload"]["error_code"] == "usage_missing"
    assert "ref_message_id" not in warning["payload"]
    await wait_until(
        lambda: _log_seq(master, sid, late["message_id"]), what="the warned frame was logged"
    )
    await client.close()


async def test_an_undecodable_frame_is_referenced_when_its_id_is_readable(master: Master) -> None:
    """A frame refused before it is decoded still names its message_id when it has one."""
    sid = "s-ack-invalid"
    client = await Peer.open(master.ws_url, sid, token=API_KEY, create=True, acks=True)
    message_id = str(uuid.uuid4())
    broken: dict[str, Any] = {"type": "agent.text.delta", "message_id": message_id}
    await client.send_frame(broken)
    error = await client.recv_type("session.error")
    assert error["payload"]["error_code"] == "invalid_frame"
    assert error["payload"]["ref_message_id"] == message_id
    await client.close()


def _agent(master: Master, sid: str, **options: Any) -> RawpClient:
    return RawpClient(
        master.ws_url, sid, role="client", token=API_KEY, create=True, backoff=FAST, **options
    )


async def test_send_returns_the_committed_seq(master: Master) -> None:
    """await client.send(frame) returns the seq the frame has in the log."""
    sid = "s-ack-client"
    async with _agent(master, sid) as agent:
        turn = await agent.turn_start()
        seq = await agent.committed(turn)
        assert seq == await _log_seq(master, sid, turn.message_id)
        delta = F.TextDelta(
            payload=F.TextDeltaPayload(block_id="b1", delta="x"), **agent._envelope()
        )
        assert await agent.send(delta) == await _log_seq(master, sid, delta.message_id)
        assert agent.unsettled == 0
        assert agent.in_flight == 0  # committed frames leave the in-flight window


async def test_send_raises_the_refusal(master: Master) -> None:
    """A refused frame raises FrameRefused with the master's error code; nothing is logged."""
    sid = "s-ack-client-refused"
    async with _agent(master, sid) as agent:
        end = F.TurnEnd(
            payload=F.TurnEndPayload(turn_id=new_turn_id(), stop_reason="end_turn"),
            **agent._envelope(),
        )
        with pytest.raises(FrameRefused) as refused:
            await agent.send(end)
        assert refused.value.code == "turn_state"
        assert refused.value.message_id == end.message_id
        assert await _log_seq(master, sid, end.message_id) is None
        # the connection goes on: a valid frame is committed after the refusal
        turn = await agent.turn_start()
        assert await agent.committed(turn) > 0


async def test_many_posted_frames_settle_with_one_flush(master: Master) -> None:
    """Frames posted without waiting are all committed once flush() returns."""
    sid = "s-ack-flush"
    async with _agent(master, sid) as agent:
        turn = await agent.turn_start()
        sent = [await agent.text_delta("b1", str(n)) for n in range(200)]
        await agent.text_done("b1")
        await agent.turn_end(turn.payload.turn_id)
        await agent.usage(input_tokens=1, output_tokens=2)
        await agent.flush(timeout=10)
        assert agent.unsettled == 0
        for frame in sent:
            assert await _log_seq(master, sid, frame.message_id) is not None


async def test_a_frame_sent_while_disconnected_is_committed_after_the_reattach(
    master: Master,
) -> None:
    """send() of a buffered frame returns once the reattach history carrying it is logged."""
    sid = "s-ack-buffered"
    async with _agent(master, sid) as agent:
        turn = await agent.turn_start()
        await agent.committed(turn)
        delta = F.TextDelta(
            payload=F.TextDeltaPayload(block_id="b1", delta="while away"), **agent.envelope()
        )
        sending: list[asyncio.Task[int]] = []

        def on_status(status: ConnectionStatus) -> None:
            # sent at the moment the client knows it is disconnected: it must be buffered
            if status is ConnectionStatus.RECONNECTING and not sending:
                sending.append(asyncio.get_running_loop().create_task(agent.send(delta)))

        agent.add_status_callback(on_status)
        agent.abort_connection()
        await wait_until(lambda: bool(sending), what="the client noticed the drop")
        seq = await sending[0]
        # it travelled inside the reattach session.history: that entry's seq
        entries = await master.store.read(sid, after_seq=seq - 1, limit=1)
        assert entries[0].type == "session.history"
        assert delta.message_id.encode() in entries[0].data


async def test_committed_after_the_answer_still_returns_the_seq(master: Master) -> None:
    """committed() asked once the ack is in returns the kept seq (and a refusal is kept too)."""
    sid = "s-ack-late"
    async with _agent(master, sid) as agent:
        turn = await agent.turn_start()
        await agent.flush(timeout=10)
        assert agent.unsettled == 0
        assert await agent.committed(turn) == await _log_seq(master, sid, turn.message_id)
        wrong = await agent.turn_start()  # a second turn.start while one is open: refused
        with pytest.raises(FrameRefused):
            await agent.flush(timeout=10)
        with pytest.raises(FrameRefused):
            await agent.committed(wrong)


async def test_a_send_given_up_on_does_not_cancel_the_answer(master: Master) -> None:
    """A caller's timeout around send() leaves the frame's answer to flush() and others."""
    sid = "s-ack-cancel"
    async with _agent(master, sid) as agent:
        turn = F.TurnStart(
            payload=F.TurnStartPayload(turn_id=new_turn_id(), turn_index=0), **agent.envelope()
        )
        waiting = asyncio.get_running_loop().create_task(agent.send(turn))
        await asyncio.sleep(0)
        waiting.cancel()
        await agent.flush(timeout=10)
        assert await agent.committed(turn) == await _log_seq(master, sid, turn.message_id)
