"""§7.8: finalization when the client drops, unfinalization by its history (notes §8, §15)."""

from __future__ import annotations

from typing import Any

import pytest

from protocol.state import Phase
from relay.server import Master
from relay.session import rebuild_state
from tests.e2e.conftest import API_KEY
from tests.e2e.util import (
    is_presence,
    logged,
    new_session,
    next_frame,
    nothing_pending,
    wait_until,
)
from tests.support.wire import Peer, envelope, new_turn_id, usage_payload

SYNTHETIC_ORDER = [
    ("agent.text.done", "b1"),
    ("agent.thinking.done", "k1"),
    ("tool.invoke.result", "c1"),
    ("session.turn.end", None),
    ("agent.state", None),
]


async def mid_turn(master: Master, sid: str, edges: int = 2) -> tuple[Peer, list[Peer], str]:
    """A client mid-turn with every kind of unfinished state; the edges saw all of it."""
    client, attached = await new_session(master, sid, edges=edges)
    turn = new_turn_id()
    steps: list[tuple[str, dict[str, Any]]] = [
        ("session.turn.start", {"turn_id": turn, "turn_index": 0}),
        ("agent.state", {"state": "tool_calling"}),
        ("agent.thinking.delta", {"block_id": "k1", "delta": "let me see"}),
        ("agent.text.delta", {"block_id": "b1", "delta": "Hel"}),
        ("tool.invoke.request", {"call_id": "c1", "tool_name": "ls", "input": {}}),
        (
            "agent.interaction.request",
            {"interaction_id": "i1", "kind": "confirmation", "prompt": "go?"},
        ),
    ]
    for type_, payload in steps:
        await client.send(type_, payload)
    for edge in attached:
        for _ in steps:
            await next_frame(edge)
    return client, attached, turn


async def drop(peer: Peer) -> None:
    """Lose the connection without a closing handshake."""
    peer.ws.transport.abort()
    await peer.ws.wait_closed()


async def finalization_frames(edge: Peer, client_id: str) -> list[dict[str, Any]]:
    """The edge's frames from the client's detach notice through agent.state idle."""
    frames = await edge.recv_until(
        lambda f: f["type"] == "agent.state" and f["payload"]["state"] == "idle"
    )
    assert frames[0]["type"] == "session.presence"
    assert frames[0]["payload"] == {
        "participant_id": client_id,
        "role": "client",
        "state": "detached",
    }
    return frames[1:]


@pytest.mark.parametrize("how", ["dropped", "closed"])
async def test_client_loss_mid_turn_is_finalized_for_the_edges(master: Master, how: str) -> None:
    """Every edge gets the §7.8.1 synthetic closers, in order, from the master."""
    sid = f"s-fin-{how}"
    client, edges, turn = await mid_turn(master, sid)
    if how == "dropped":
        await drop(client)
    else:
        await client.close()
    for edge in edges:
        frames = await finalization_frames(edge, client.participant_id)
        got = []
        for f in frames:
            p = f["payload"]
            got.append((f["type"], p.get("block_id") or p.get("call_id")))
        assert got == SYNTHETIC_ORDER
        for f in frames:
            assert f["metadata"] == {"synthetic": True}
            assert f["sender"] == {"role": "master", "participant_id": "m-test"}
        result = frames[2]["payload"]
        assert result == {"call_id": "c1", "status": "cancelled", "output": "Connection lost"}
        assert frames[3]["payload"] == {"turn_id": turn, "stop_reason": "disconnected"}
        assert frames[4]["payload"] == {"state": "idle"}
        seqs = [f["seq"] for f in frames]
        assert seqs == list(range(seqs[0], seqs[0] + len(frames)))
    # Logged as well: a later replay shows the same.
    log = await logged(master, sid)
    assert [f["type"] for f in log if (f.get("metadata") or {}).get("synthetic")] == [
        t for t, _ in SYNTHETIC_ORDER
    ]
    # Presence detached; the pending interaction was discarded (the UI is unblocked).
    await edges[0].send("control.interaction.response", {"interaction_id": "i1", "response": 1})
    assert (await next_frame(edges[0]))["payload"]["error_code"] == "interaction_state"
    probe = await Peer.open(master.ws_url, sid, role="edge", token=API_KEY)
    assert probe.welcome["payload"]["session"]["status"] == "idle"


async def test_idle_client_loss_sends_only_presence(master: Master) -> None:
    """With nothing unfinished, a client detach is only a presence notice."""
    client, (edge,) = await new_session(master, "s-fin-idle")
    await drop(client)
    got = await edge.recv()
    assert got["payload"]["state"] == "detached"
    # The next thing the edge hears is a later event: nothing synthetic came in between.
    probe = await Peer.open(master.ws_url, "s-fin-idle", role="edge", token=API_KEY)
    got = await edge.recv()
    assert got["payload"]["participant_id"] == probe.participant_id


async def test_edge_loss_is_not_finalized(master: Master) -> None:
    """An edge leaving mid-turn changes nothing but presence."""
    client, (edge1, edge2), _ = await mid_turn(master, "s-fin-edge")
    await drop(edge1)
    got = await edge2.recv()
    assert got["payload"] == {
        "participant_id": edge1.participant_id,
        "role": "edge",
        "state": "detached",
    }
    result = await client.send("tool.invoke.result", {"call_id": "c1", "status": "ok"})
    assert (await edge2.recv())["message_id"] == result["message_id"]  # nothing in between


def history(
    sid: str, frames: list[dict[str, Any]], *, truncated: bool = False, lost: int | None = None
) -> dict[str, Any]:
    """A client's §7.1.1 session.history payload."""
    status: dict[str, Any] = {"policy_applied": "RING", "truncated": truncated}
    if lost is not None:
        status["lost_frame_count"] = lost
    status["buffer_high_watermark"] = 2048
    return {
        "frames": frames,
        "buffer_status": status,
        "last_sync_timestamp": "2026-11-29T09:00:00.000Z",
        "last_message_id": frames[-1]["message_id"] if frames else "",
        "x_client_note": "kept",
    }


async def reattach_client(master: Master, sid: str, client: Peer) -> Peer:
    """The client comes back with its participant id and cursor; its backlog is read."""
    cursor = max((f["seq"] for f in client.received if "seq" in f), default=0)
    back = await Peer.open(
        master.ws_url,
        sid,
        token=API_KEY,
        participant_id=client.participant_id,
        resume={"last_seq": cursor},
    )
    assert back.welcome["payload"]["resumed"] is True
    backlog = await back.recv()
    assert backlog["type"] == "session.history"
    # What it missed: the synthetic closers (nothing about itself).
    missed = [f["type"] for f in backlog["payload"]["frames"] if f["type"] != "session.status"]
    assert missed == [t for t, _ in SYNTHETIC_ORDER]
    return back


async def test_history_unfinalizes_and_the_turn_continues(master: Master) -> None:
    """A full history is one log entry, relayed, and takes the synthetic closers back out."""
    sid = "s-fin-unfinalize"
    client, edges, turn = await mid_turn(master, sid)
    request = next(f for f in await logged(master, sid) if f["type"] == "tool.invoke.request")
    await drop(client)
    for edge in edges:
        await finalization_frames(edge, client.participant_id)
    back = await reattach_client(master, sid, client)
    assert back.welcome["payload"]["received"]["last_message_id"] == next(
        f["message_id"]
        for f in reversed(await logged(master, sid))
        if f["sender"]["role"] == "client"
    )
    for edge in edges:
        assert (await edge.recv())["payload"]["state"] == "attached"
    offline = [
        envelope(sid, "agent.thinking.delta", {"block_id": "k1", "delta": " more"}),
        envelope(sid, "agent.thinking.done", {"block_id": "k1"}),
        envelope(sid, "agent.text.delta", {"block_id": "b1", "delta": "lo"}, x_kept=1),
    ]
    # The request the master already logged (same message_id) is sent again inside.
    duplicate = {k: v for k, v in request.items() if k not in ("seq", "sender")}
    head_before = await master.store.head_seq(sid)
    sent = await back.send("session.history", history(sid, [duplicate, *offline]))
    for edge in edges:
        got = await edge.recv()
        assert got["type"] == "session.history"
        assert got["message_id"] == sent["message_id"]
        assert got["seq"] == head_before + 1
        assert got["sender"] == {"role": "client", "participant_id": client.participant_id}
        # Duplicate removed, the rest untouched but for the sender, stamped as on live frames.
        stamp = {"role": "client", "participant_id": client.participant_id}
        assert got["payload"]["frames"] == [{**f, "sender": stamp} for f in offline]
        assert got["payload"]["buffer_status"] == sent["payload"]["buffer_status"]
    log = await logged(master, sid)
    assert [f["type"] for f in log].count("session.history") == 1
    assert log[-1]["message_id"] == sent["message_id"]
    # Unfinalized: the call and the turn are open again, the text block too.
    state = master.hub.sessions[sid].state
    assert "c1" in state.open_calls
    assert state.turn_id == turn
    assert not state.finalized
    result = await back.send("tool.invoke.result", {"call_id": "c1", "status": "ok", "output": 1})
    done = await back.send("agent.text.done", {"block_id": "b1", "text": "Hello"})
    end = await back.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    usage = await back.send("session.usage", usage_payload(turn))
    for edge in edges:
        relayed = [await next_frame(edge) for _ in range(4)]
        assert [f["message_id"] for f in relayed] == [
            m["message_id"] for m in (result, done, end, usage)
        ]
    await nothing_pending(back, via=edges[0])  # no error: every frame was accepted
    # The log replayed from seq 1 gives the live view (notes §15.1).
    replayed = rebuild_state(await master.store.read(sid))
    live = master.hub.sessions[sid].state
    assert replayed.phase == live.phase == Phase.IDLE
    assert replayed.open_calls == live.open_calls == {}
    assert replayed.turns_completed == live.turns_completed == 1


async def test_history_sent_again_is_not_logged_twice(master: Master) -> None:
    """Frames already logged inside an earlier history are dropped from a repeated history."""
    sid = "s-fin-history-twice"
    client, edges, _turn = await mid_turn(master, sid, edges=1)
    await drop(client)
    await finalization_frames(edges[0], client.participant_id)
    back = await reattach_client(master, sid, client)
    offline = [envelope(sid, "agent.text.delta", {"block_id": "b1", "delta": "lo"})]
    await back.send("session.history", history(sid, offline))
    first = await next_frame(edges[0])
    stamp = {"role": "client", "participant_id": client.participant_id}
    assert first["payload"]["frames"] == [{**f, "sender": stamp} for f in offline]
    # The client library resends the same frames in another history (same message ids).
    await back.send("session.history", history(sid, offline))
    second = await next_frame(edges[0])
    assert second["payload"]["frames"] == []
    ids = []
    for f in await logged(master, sid):
        ids += [g["message_id"] for g in f["payload"].get("frames", [])]
    assert ids.count(offline[0]["message_id"]) == 1


async def test_truncated_history_is_kept_but_not_folded(master: Master) -> None:
    """Truncated: logged and relayed, finalized state stays, edges told history_truncated."""
    sid = "s-fin-truncated"
    client, edges, turn = await mid_turn(master, sid)
    await drop(client)
    for edge in edges:
        await finalization_frames(edge, client.participant_id)
    back = await reattach_client(master, sid, client)
    for edge in edges:
        assert (await edge.recv())["payload"]["state"] == "attached"
    offline = [
        envelope(sid, "agent.text.delta", {"block_id": "b9", "delta": "partial"}),
        envelope(sid, "tool.invoke.result", {"call_id": "c1", "status": "ok"}),
    ]
    sent = await back.send("session.history", history(sid, offline, truncated=True, lost=3))
    for edge in edges:
        got = await edge.recv()
        assert got["message_id"] == sent["message_id"]
        stamp = {"role": "client", "participant_id": client.participant_id}
        assert got["payload"]["frames"] == [{**f, "sender": stamp} for f in offline]
        assert got["payload"]["buffer_status"]["truncated"] is True
        notice = await edge.recv()
        assert notice["type"] == "session.error"
        assert notice["payload"]["error_code"] == "history_truncated"
        assert notice["payload"]["fatal"] is False
        assert notice["payload"]["lost_frame_count"] == 3
        assert notice["sender"]["role"] == "master"
        assert notice["seq"] == got["seq"] + 1
    log = await logged(master, sid)
    assert log[-2]["message_id"] == sent["message_id"]
    assert log[-1]["payload"]["error_code"] == "history_truncated"
    state = master.hub.sessions[sid].state
    assert state.open_calls == {}
    assert state.turn_id is None
    # The client is not told (it knows); the turn is over for the master.
    await back.send("tool.invoke.result", {"call_id": "c1", "status": "ok"})
    assert (await next_frame(back))["payload"]["error_code"] == "tool_pairing"
    await back.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    assert (await next_frame(back))["payload"]["error_code"] == "turn_state"


async def test_live_frame_without_history_keeps_finalization(master: Master) -> None:
    """A client that comes back and goes on without a history keeps the finalized state."""
    sid = "s-fin-no-history"
    client, (edge,), _turn = await mid_turn(master, sid, edges=1)
    await drop(client)
    await finalization_frames(edge, client.participant_id)
    back = await reattach_client(master, sid, client)
    await back.send("agent.state", {"state": "thinking"})
    await back.send("tool.invoke.result", {"call_id": "c1", "status": "ok"})
    assert (await next_frame(back))["payload"]["error_code"] == "tool_pairing"
    turn2 = new_turn_id()
    start = await back.send("session.turn.start", {"turn_id": turn2, "turn_index": 1})
    frames = await edge.recv_until(lambda f: f.get("message_id") == start["message_id"])
    assert [f["type"] for f in frames if not is_presence(f)] == [
        "agent.state",
        "session.turn.start",
    ]


async def test_client_detach_during_history_wait_finalizes_again(master: Master) -> None:
    """A client that drops again after reattaching mid-turn is finalized again."""
    sid = "s-fin-twice"
    client, (edge,), _turn = await mid_turn(master, sid, edges=1)
    await drop(client)
    await finalization_frames(edge, client.participant_id)
    back = await reattach_client(master, sid, client)
    await back.send(
        "session.history",
        history(sid, [envelope(sid, "agent.text.delta", {"block_id": "b1", "delta": "x"})]),
    )
    await edge.recv_until(lambda f: f["type"] == "session.history")
    await wait_until(lambda: "c1" in master.hub.sessions[sid].state.open_calls)
    await drop(back)
    frames = await finalization_frames(edge, client.participant_id)
    got = [(f["type"], f["payload"].get("block_id") or f["payload"].get("call_id")) for f in frames]
    assert got == SYNTHETIC_ORDER
