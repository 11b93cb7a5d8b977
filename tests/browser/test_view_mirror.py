"""``static/view.js`` folds the same frames into the same blocks as ``protocol/view.py``."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from protocol import codec
from protocol.view import SessionView
from relay.server import Master

pytestmark = pytest.mark.browser

SID = "s-mirror"
CLIENT = {"role": "client", "participant_id": "p-client"}
MASTER = {"role": "master", "participant_id": "m-test"}
EDGE = {"role": "edge", "participant_id": "p-edge"}


class Log:
    """Builds stamped log frames (seq + sender) and unstamped ones."""

    def __init__(self) -> None:
        self.seq = 0

    def frame(self, type_: str, payload: dict[str, Any], **extra: Any) -> dict[str, Any]:
        """An envelope without seq or sender."""
        return {
            "type": type_,
            "message_id": str(uuid.uuid4()),
            "session_id": SID,
            "timestamp": "2026-11-29T09:00:00.000Z",
            "payload": payload,
            **extra,
        }

    def entry(
        self, sender: dict[str, str], type_: str, payload: dict[str, Any], **extra: Any
    ) -> dict[str, Any]:
        """The next log entry, as the master delivers it."""
        self.seq += 1
        return {**self.frame(type_, payload, **extra), "seq": self.seq, "sender": sender}


def usage(turn: str) -> dict[str, Any]:
    """A §7.3.1 payload."""
    return {
        "turn_id": turn,
        "token_usage": {"input_tokens": 5, "output_tokens": 7},
        "cost_usage": {"limit": -1, "used": 0.5, "unit": "USD"},
        "message_usage": {"limit": -1, "used": 1, "unit": "COUNT"},
        "time_to_reset": "PT1H",
    }


def scenarios() -> Iterator[tuple[str, list[Any]]]:
    """Steps: ("receive", frame) or ("lost",)."""
    log = Log()
    t1, t2 = str(uuid.uuid4()), str(uuid.uuid4())
    synthetic = {"metadata": {"synthetic": True}}
    steps: list[Any] = [
        ("receive", log.entry(CLIENT, "session.turn.start", {"turn_id": t1, "turn_index": 0})),
        ("receive", log.entry(CLIENT, "agent.thinking.delta", {"block_id": "h", "delta": "hm"})),
        ("receive", log.entry(CLIENT, "agent.text.delta", {"block_id": "a", "delta": "Hel"})),
        (
            "receive",
            log.entry(
                CLIENT, "tool.invoke.request", {"call_id": "c", "tool_name": "ls", "input": {}}
            ),
        ),
        (
            "receive",
            log.entry(
                CLIENT,
                "agent.interaction.request",
                {"interaction_id": "i", "kind": "confirmation", "prompt": "ok?"},
            ),
        ),
        # The client drops: the master finalizes (logged synthetic frames).
        ("receive", log.entry(MASTER, "agent.thinking.done", {"block_id": "h"}, **synthetic)),
        ("receive", log.entry(MASTER, "agent.text.done", {"block_id": "a"}, **synthetic)),
        (
            "receive",
            log.entry(
                MASTER,
                "tool.invoke.result",
                {"call_id": "c", "status": "cancelled", "output": "Connection lost"},
                **synthetic,
            ),
        ),
        (
            "receive",
            log.entry(
                MASTER,
                "session.turn.end",
                {"turn_id": t1, "stop_reason": "disconnected"},
                **synthetic,
            ),
        ),
        ("receive", log.entry(MASTER, "agent.state", {"state": "idle"}, **synthetic)),
        ("receive", log.entry(EDGE, "user.message", {"text": "are you there?"})),
    ]
    inner = [
        log.frame("agent.text.delta", {"block_id": "a", "delta": "lo"}),
        log.frame("agent.text.done", {"block_id": "a"}),
        log.frame("tool.invoke.result", {"call_id": "c", "status": "ok", "output": 1}),
    ]
    steps += [
        (
            "receive",
            log.entry(
                CLIENT,
                "session.history",
                {
                    "frames": inner,
                    "buffer_status": {
                        "policy_applied": "RING",
                        "truncated": False,
                        "lost_frame_count": 0,
                    },
                    "last_sync_timestamp": "2026-11-29T09:00:00.000Z",
                    "last_message_id": inner[-1]["message_id"],
                },
            ),
        ),
        (
            "receive",
            log.entry(
                EDGE, "control.interaction.response", {"interaction_id": "i", "response": True}
            ),
        ),
        (
            "receive",
            log.entry(CLIENT, "session.turn.end", {"turn_id": t1, "stop_reason": "end_turn"}),
        ),
        ("receive", log.entry(CLIENT, "session.usage", usage(t1))),
        ("receive", log.entry(CLIENT, "session.turn.start", {"turn_id": t2, "turn_index": 1})),
        ("receive", log.entry(CLIENT, "agent.text.delta", {"block_id": "b", "delta": "Second"})),
        (
            "receive",
            log.entry(
                CLIENT,
                "tool.invoke.request",
                {"call_id": "d", "tool_name": "cat", "input": {"f": 1}},
            ),
        ),
    ]
    yield "log-level finalization retracted by the client's history", steps
    # This view's own socket drops, then a complete backlog arrives: unfinalized.
    backlog = [
        log.entry(CLIENT, "agent.text.delta", {"block_id": "b", "delta": " turn"}),
        log.entry(
            CLIENT, "tool.invoke.result", {"call_id": "d", "status": "error", "output": "no"}
        ),
        log.entry(CLIENT, "agent.text.done", {"block_id": "b"}),
    ]
    complete = {"policy_applied": "RING", "truncated": False, "lost_frame_count": 0}
    history = {
        "type": "session.history",
        "message_id": "h-1",
        "session_id": SID,
        "timestamp": "2026-11-29T09:00:00.000Z",
        "sender": MASTER,
        "payload": {
            "frames": backlog,
            "buffer_status": complete,
            "last_sync_timestamp": "2026-11-29T09:00:00.000Z",
            "last_message_id": "",
        },
    }
    yield "local finalization undone by the backlog", [*steps, ("lost",), ("receive", history)]
    truncated = json.loads(json.dumps(history))
    truncated["payload"]["buffer_status"] = {
        "policy_applied": "DROP",
        "truncated": True,
        "lost_frame_count": 2,
    }
    truncated["payload"]["frames"] = backlog[:1]
    yield (
        "local finalization kept after a truncated backlog",
        [*steps, ("lost",), ("receive", truncated)],
    )


_KINDS = {"tool_call": "tool", "interaction": "ask", "user_message": "user"}


def python_blocks(steps: list[Any]) -> dict[str, Any]:
    """Fold the steps with protocol.view.SessionView; a comparable summary."""
    view = SessionView(SID)
    for step in steps:
        if step[0] == "lost":
            view.connection_lost()
        else:
            view.receive(codec.decode(json.dumps(step[1])))
    blocks = []
    for b in view.blocks:
        kind = _KINDS.get(type(b).__struct_config__.tag, type(b).__struct_config__.tag)
        blocks.append(
            {
                "kind": kind,
                "text": getattr(b, "text", None) if kind in ("text", "thinking", "user") else None,
                "status": getattr(b, "status", None) if kind in ("tool", "ask") else None,
                "ended": getattr(b, "stop_reason", None) if kind == "turn" else None,
                "synthetic": bool(getattr(b, "synthetic", False)),
                "notice": getattr(b, "notice", None),
            }
        )
    return {
        "blocks": blocks,
        "status": view.status,
        "last_seq": view.last_seq,
        "notices": [n.kind for n in view.notices],
    }


JS = """async (steps) => {
  const { SessionView } = await import("/static/view.js");
  const view = new SessionView("s-mirror");
  for (const step of steps) {
    if (step[0] === "lost") view.connectionLost(); else view.receive(step[1]);
  }
  const pick = (b, k, keys) => (keys.includes(b.kind) ? b[k] ?? null : null);
  return {
    blocks: view.blocks.map((b) => ({
      kind: b.kind,
      text: pick(b, "text", ["text", "thinking", "user"]),
      status: pick(b, "status", ["tool", "ask"]),
      ended: b.kind === "turn" ? (b.ended ? b.stopReason : null) : null,
      synthetic: Boolean(b.synthetic),
      notice: b.kind === "notice" ? b.notice : null,
    })),
    status: view.status, last_seq: view.lastSeq, notices: view.notices.map((n) => n.kind),
  };
}"""


@pytest.mark.parametrize(("name", "steps"), list(scenarios()), ids=[n for n, _ in scenarios()])
async def test_js_view_matches_protocol_view(
    browser: Any, master: Master, name: str, steps: list[Any]
) -> None:
    """Blocks, synthetic marks, status, cursor and notices agree after every scenario."""
    page = await browser.new_page()
    await page.goto(master.http_url + "/config.json")
    expected = python_blocks(steps)
    got = await page.evaluate(JS, steps)
    assert got == expected, name
