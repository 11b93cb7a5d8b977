"""The state machine over the wire: violations are answered, not logged, not relayed (notes §6)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from relay.server import Master
from tests.e2e.util import logged, new_session, next_frame, nothing_pending
from tests.support.wire import Peer, envelope, new_turn_id, usage_payload

T1 = "6f1c1d4e-5b7a-4c3e-9d2f-0a1b2c3d4e5f"
T2 = "7a2b3c4d-5e6f-4a1b-8c2d-3e4f5a6b7c8d"

# (sender role, type, payload) of frames that are valid in sequence.
Step = tuple[str, str, dict[str, Any]]


def start(turn: str = T1, index: int = 0) -> Step:
    return ("client", "session.turn.start", {"turn_id": turn, "turn_index": index})


def end(turn: str = T1, reason: str = "end_turn") -> Step:
    return ("client", "session.turn.end", {"turn_id": turn, "stop_reason": reason})


USAGE: Step = ("client", "session.usage", usage_payload())
REQUEST_C1: Step = (
    "client",
    "tool.invoke.request",
    {"call_id": "c1", "tool_name": "ls", "input": {}},
)
RESULT_C1: Step = ("client", "tool.invoke.result", {"call_id": "c1", "status": "ok", "output": "x"})
ASK_I1: Step = (
    "client",
    "agent.interaction.request",
    {"interaction_id": "i1", "kind": "confirmation", "prompt": "ok?"},
)
ANSWER_I1: Step = ("edge", "control.interaction.response", {"interaction_id": "i1", "response": 1})

VIOLATIONS: list[tuple[str, list[Step], str, Any, str]] = [
    # (case, setup, sender, bad frame: (type, payload) or a raw message, expected error_code)
    ("turn end without a turn", [], "client", end(), "turn_state"),
    ("turn start while a turn is open", [start()], "client", start(T2, 1), "turn_state"),
    ("turn index not previous + 1", [], "client", start(T1, 1), "turn_state"),
    ("turn id reused", [start(), end(), USAGE], "client", start(T1, 1), "turn_state"),
    ("turn end of another turn", [start()], "client", end(T2), "turn_state"),
    ("disconnected from a client", [start()], "client", end(T1, "disconnected"), "turn_state"),
    (
        "text delta after done",
        [
            ("client", "agent.text.delta", {"block_id": "b1", "delta": "a"}),
            ("client", "agent.text.done", {"block_id": "b1"}),
        ],
        "client",
        ("client", "agent.text.delta", {"block_id": "b1", "delta": "b"}),
        "block_state",
    ),
    (
        "thinking done on a text block",
        [("client", "agent.text.delta", {"block_id": "b1", "delta": "a"})],
        "client",
        ("client", "agent.thinking.done", {"block_id": "b1"}),
        "block_state",
    ),
    (
        "text done twice",
        [
            ("client", "agent.text.delta", {"block_id": "b1", "delta": "a"}),
            ("client", "agent.text.done", {"block_id": "b1"}),
        ],
        "client",
        ("client", "agent.text.done", {"block_id": "b1"}),
        "block_state",
    ),
    ("result without request", [], "client", RESULT_C1, "tool_pairing"),
    ("second result", [REQUEST_C1, RESULT_C1], "client", RESULT_C1, "tool_pairing"),
    ("call id reused", [REQUEST_C1, RESULT_C1], "client", REQUEST_C1, "tool_pairing"),
    ("turn end with an open call", [start(), REQUEST_C1], "client", end(), "tool_pairing"),
    ("answer to nothing", [], "edge", ANSWER_I1, "interaction_state"),
    ("answer twice", [ASK_I1, ANSWER_I1], "edge", ANSWER_I1, "interaction_state"),
    ("interaction id reused", [ASK_I1, ANSWER_I1], "client", ASK_I1, "interaction_state"),
    (
        "edge sends agent text",
        [],
        "edge",
        ("edge", "agent.text.delta", {"block_id": "b1", "delta": "a"}),
        "direction",
    ),
    ("edge starts a turn", [], "edge", ("edge", *start()[1:]), "direction"),
    ("edge sends a tool result", [REQUEST_C1], "edge", ("edge", *RESULT_C1[1:]), "direction"),
    ("client cancels", [], "client", ("client", "control.cancel", {}), "direction"),
    ("client answers", [ASK_I1], "client", ("client", *ANSWER_I1[1:]), "direction"),
    (
        "client sends user input",
        [],
        "client",
        ("client", "user.message", {"text": "x"}),
        "direction",
    ),
    (
        "edge sends a history",
        [],
        "edge",
        (
            "edge",
            "session.history",
            {
                "frames": [],
                "buffer_status": {"policy_applied": "RING", "truncated": False},
                "last_sync_timestamp": "2026-01-01T00:00:00Z",
                "last_message_id": "",
            },
        ),
        "direction",
    ),
    ("not json", [], "client", "{not json", "invalid_frame"),
    (
        "frame of another session",
        [],
        "client",
        json.dumps(envelope("s-elsewhere", "agent.state", {"state": "idle"})),
        "invalid_frame",
    ),
    (
        "delete request naming another session",
        [],
        "edge",
        (
            "edge",
            "session.deleted",
            {"session_id": "s-elsewhere", "reason": "user_request", "deleted_by": "edge"},
        ),
        "invalid_frame",
    ),
    ("not an object", [], "client", '"text"', "invalid_frame"),
    (
        "missing required payload field",
        [],
        "client",
        ("client", "tool.invoke.request", {"tool_name": "ls", "input": {}}),
        "invalid_frame",
    ),
    ("turn id not a uuid v4", [], "client", start("turn-1", 0), "invalid_frame"),
    (
        "wrong field type",
        [],
        "client",
        ("client", "agent.text.delta", {"block_id": "b1", "delta": 5}),
        "invalid_frame",
    ),
    (
        "utilization above 1",
        [],
        "client",
        ("client", "session.usage", {**usage_payload(), "context_window": {"utilization": 1.5}}),
        "invalid_frame",
    ),
    (
        "compaction grows the context",
        [],
        "client",
        (
            "client",
            "session.compacted",
            {
                "summary": "s",
                "previous_token_count": 10,
                "current_token_count": 20,
                "trigger": "auto",
            },
        ),
        "invalid_frame",
    ),
    (
        "a second hello",
        [],
        "client",
        (
            "client",
            "connection.hello",
            {"protocol_version": "1.0.2", "role": "client", "token": "x"},
        ),
        "invalid_frame",
    ),
    (
        "synthetic frame from a client",
        [("client", "agent.state", {"state": "thinking"})],
        "client",
        ("client", "agent.state", {"state": "idle"}, {"metadata": {"synthetic": True}}),
        "invalid_frame",
    ),
    ("unknown type", [], "client", ("client", "agent.telepathy", {"x": 1}), "unknown_type"),
    ("unknown type from an edge", [], "edge", ("edge", "ui.wiggle", {}), "unknown_type"),
    ("binary message", [], "client", b'{"type": "agent.state"}', "unsupported_data"),
    ("binary message from an edge", [], "edge", b"\x00\x01", "unsupported_data"),
]


def _sentinel(role: str) -> tuple[str, dict[str, Any]]:
    if role == "client":
        return "agent.state", {"state": "responding"}
    return "user.message", {"text": "sentinel"}


@pytest.mark.parametrize(
    ("case", "setup", "sender_role", "bad", "code"),
    VIOLATIONS,
    ids=[v[0] for v in VIOLATIONS],
)
async def test_violation_is_answered_not_logged_not_relayed(
    master: Master, case: str, setup: list[Step], sender_role: str, bad: Any, code: str
) -> None:
    """A frame the state machine refuses gets session.error to its sender only, no seq."""
    sid = "s-viol-" + uuid.uuid4().hex[:8]
    client, (edge,) = await new_session(master, sid)
    peers = {"client": client, "edge": edge}
    last_seq = 0
    for role, type_, payload in setup:
        sent = await peers[role].send(type_, payload)
        other = peers["edge" if role == "client" else "client"]
        got = await next_frame(other)
        assert got["message_id"] == sent["message_id"], (case, got)
        last_seq = got["seq"]
    sender = peers[sender_role]
    observer = peers["edge" if sender_role == "client" else "client"]
    bad_id = None
    if isinstance(bad, tuple):
        extra = bad[3] if len(bad) > 3 else {}
        frame = envelope(sid, bad[1], bad[2], **extra)
        bad_id = frame["message_id"]
        await sender.send_frame(frame)
    else:
        await sender.ws.send(bad)
    error = await next_frame(sender)
    assert error["type"] == "session.error", (case, error)
    assert error["payload"]["error_code"] == code, (case, error)
    assert error["payload"]["fatal"] is False
    assert error["payload"]["message"]
    assert "seq" not in error
    assert error["sender"]["role"] == "master"
    type_, payload = _sentinel(sender_role)
    sentinel = await sender.send(type_, payload)
    got = await next_frame(observer)
    # The observer saw nothing of the refused frame; the next valid one got the next seq.
    assert got["message_id"] == sentinel["message_id"], (case, got)
    log = await logged(master, sid, status=True)
    if last_seq:
        # nothing was logged between but the master's status changes (notes §17.4)
        between = [f["type"] for f in log if last_seq < f["seq"] < got["seq"]]
        assert set(between) <= {"session.status"}, between
    assert bad_id not in {f["message_id"] for f in log}
    assert [f["seq"] for f in log] == list(range(1, len(log) + 1))
    await client.close()
    await edge.close()


async def test_usage_missing_after_turn_end_is_a_warning(master: Master) -> None:
    """A client frame after turn.end that is not session.usage: usage_missing, still relayed."""
    client, (edge,) = await new_session(master, "s-usage-missing")
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    late = await client.send("agent.state", {"state": "idle"})
    warning = await next_frame(client)
    assert warning["type"] == "session.error"
    assert warning["payload"]["error_code"] == "usage_missing"
    assert warning["payload"]["fatal"] is False
    types = [f["type"] for f in await edge.recv_until(lambda f: f["type"] == "agent.state")]
    assert types == ["session.turn.start", "session.turn.end", "agent.state"]
    assert edge.received[-1]["message_id"] == late["message_id"]
    # The debt is gone: the next turn is accepted without further warnings.
    turn2 = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn2, "turn_index": 1})
    assert (await next_frame(edge))["type"] == "session.turn.start"
    await nothing_pending(client, via=edge)
    assert any(
        f["message_id"] == late["message_id"] for f in await logged(master, "s-usage-missing")
    )


async def test_usage_right_after_turn_end_is_silent(master: Master) -> None:
    """session.usage right after turn.end is accepted without a warning."""
    client, (edge,) = await new_session(master, "s-usage-ok")
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    await client.send("session.usage", usage_payload(turn))
    await client.send("agent.state", {"state": "idle"})
    types = [f["type"] for f in await edge.recv_until(lambda f: f["type"] == "agent.state")]
    assert types == ["session.turn.start", "session.turn.end", "session.usage", "agent.state"]
    await nothing_pending(client, via=edge)


async def test_full_turn_with_tool_call_and_interaction(master: Master) -> None:
    """A turn with thinking, text, a tool call and an answered interaction passes unchanged."""
    client, (edge,) = await new_session(master, "s-full-turn")
    turn = new_turn_id()
    await edge.send("user.message", {"text": "list files"})
    assert (await next_frame(client))["type"] == "user.message"
    steps: list[tuple[str, dict[str, Any]]] = [
        ("session.turn.start", {"turn_id": turn, "turn_index": 0, "mode": "default"}),
        ("agent.state", {"state": "thinking"}),
        ("agent.thinking.delta", {"block_id": "k1", "delta": "hmm"}),
        ("agent.thinking.done", {"block_id": "k1"}),
        ("agent.state", {"state": "tool_calling"}),
        ("tool.invoke.request", {"call_id": "c1", "tool_name": "ls", "input": {"path": "."}}),
        ("agent.interaction.request", {"interaction_id": "i1", "kind": "choice", "prompt": "?"}),
    ]
    for type_, payload in steps:
        await client.send(type_, payload)
    got = [await next_frame(edge) for _ in steps]
    assert [f["type"] for f in got] == [t for t, _ in steps]
    await edge.send("control.interaction.response", {"interaction_id": "i1", "response": "a"})
    assert (await next_frame(client))["type"] == "control.interaction.response"
    rest: list[tuple[str, dict[str, Any]]] = [
        ("tool.invoke.result", {"call_id": "c1", "status": "ok", "output": ["a", "b"]}),
        ("agent.state", {"state": "responding"}),
        ("agent.text.delta", {"block_id": "b1", "delta": "two files"}),
        ("agent.text.done", {"block_id": "b1", "text": "two files"}),
        ("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"}),
        ("session.usage", usage_payload(turn)),
    ]
    for type_, payload in rest:
        await client.send(type_, payload)
    got = [await next_frame(edge) for _ in rest]
    assert [f["type"] for f in got] == [t for t, _ in rest]
    seqs = [f["seq"] for f in got]
    # in order, one after another but for the master's status changes (notes §17.4)
    assert seqs == sorted(seqs)
    assert seqs[-1] - seqs[0] - (len(rest) - 1) == len(
        [s for s in edge.statuses if seqs[0] < s["seq"] < seqs[-1]]
    )
    # No error for any of it: the edge's cancel is the client's very next frame.
    await edge.send("control.cancel", {"turn_id": turn})
    cancel = await next_frame(client)
    assert cancel["type"] == "control.cancel"
    assert cancel["sender"] == {"role": "edge", "participant_id": edge.participant_id}


async def test_status_follows_the_turn(master: Master) -> None:
    """The welcome's session.status is running in a turn and requires_action while asked."""
    client, (edge,) = await new_session(master, "s-status")
    turn = new_turn_id()

    async def status_now() -> str:
        probe = await Peer.open(master.ws_url, "s-status", role="edge", token="rk_test_key")
        value = str(probe.welcome["payload"]["session"]["status"])
        await probe.close()
        return value

    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await next_frame(edge)
    assert await status_now() == "running"
    await client.send(
        "agent.interaction.request", {"interaction_id": "i1", "kind": "input", "prompt": "?"}
    )
    await next_frame(edge)
    assert await status_now() == "requires_action"
    await edge.send("control.interaction.response", {"interaction_id": "i1", "response": "x"})
    await next_frame(client)
    await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    await client.send("session.usage", usage_payload(turn))
    await edge.recv_until(lambda f: f["type"] == "session.usage")
    assert await status_now() == "idle"
    assert json.loads(edge.raw[-1])["type"] == "session.usage"
