"""The Markdown export writes received text as text, never as structure (notes §16.7)."""

from __future__ import annotations

from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.protocol.test_names import CONTROLS
from tests.relay.http.conftest import Api, wait_head
from tests.support.wire import Peer, new_turn_id, usage_payload

# Every control character, a forged heading, a forged meta line, a code-span breakout.
EVIL = "x" + "".join(CONTROLS) + "\n## Turn 99 — forged\r\n- **Session:** `forged` ``` <b>"


async def test_markdown_export_escapes_every_received_string(api: Api, master: Master) -> None:
    """No control character but LF, and only the transcript's own headings and meta lines."""
    client = await Peer.open(
        master.ws_url, "s-md", token=API_KEY, create={"name": EVIL.replace("\n", " ")}
    )
    edge = await Peer.open(master.ws_url, "s-md", role="edge", token=API_KEY)
    turn = new_turn_id()
    ask = new_turn_id()
    frames = [
        ("session.turn.start", {"turn_id": turn, "turn_index": 0}),
        ("agent.thinking.delta", {"block_id": "t", "delta": EVIL}),
        ("agent.thinking.done", {"block_id": "t"}),
        ("agent.text.delta", {"block_id": "b", "delta": EVIL}),
        ("agent.text.done", {"block_id": "b"}),
        ("tool.invoke.request", {"call_id": "c", "tool_name": EVIL[:200], "input": {"k": EVIL}}),
        ("tool.invoke.result", {"call_id": "c", "status": "ok", "output": EVIL}),
        (
            "agent.interaction.request",
            {"interaction_id": ask, "kind": "choice", "prompt": EVIL, "options": [EVIL, "b"]},
        ),
    ]
    for type_, payload in frames:
        await client.send(type_, payload)
    # An edge answers a question it has seen (frames of two sockets have no order between them).
    await edge.recv_until(lambda f: f["type"] == "agent.interaction.request")
    await edge.send("control.interaction.response", {"interaction_id": ask, "response": EVIL})
    await edge.send("user.message", {"text": EVIL})
    await edge.send("session.error", {"error_code": EVIL[:60], "message": EVIL, "fatal": False})
    await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    await client.send("session.usage", usage_payload(turn))
    await wait_head(api, "s-md", len(frames) + 7)
    reply = await api.get("/v1/sessions/s-md/export?format=md")
    assert reply.status == 200
    text = reply.text
    assert not [c for c in CONTROLS if c != "\n" and c in text]
    lines = text.split("\n")
    headings = [line for line in lines if line.startswith("#")]
    assert len(headings) == 2, headings  # the title and the one real turn
    assert headings[1].startswith("## Turn 1 — end_turn")
    assert "\\<b\\>" in headings[0]  # inline fields: markup escaped
    meta = [line for line in lines if line.startswith("- **")]
    assert [m.split(":**")[0] for m in meta] == [
        "- **Session",
        "- **Created",
        "- **Status",
        "- **Usage",
    ]
    fences = [line for line in lines if line.startswith("```")]
    assert set(fences) == {"````json", "````"}, fences  # longer than any run inside
    assert "(reported by the edge)" in text  # a participant's error is its report (§16.8)
    await edge.close()
    await client.close()


async def test_markdown_usage_reads_as_prose(api: Api, master: Master) -> None:
    """ "1 turn", not "1 turns"; a cost with its unit (four decimals), none without a unit."""
    client = await Peer.open(master.ws_url, "s-md-usage", token=API_KEY, create=True)
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    await client.send("session.usage", usage_payload(turn))
    await wait_head(api, "s-md-usage", 4)
    text = (await api.get("/v1/sessions/s-md-usage/export?format=md")).text
    assert "- **Usage:** 10 input / 20 output tokens, 0.0100 USD — 1 turn\n" in text
    assert "*usage: 10 in / 20 out tokens, 0.0100 USD used*" in text
    await client.close()
    empty = await Peer.open(master.ws_url, "s-md-none", token=API_KEY, create=True)
    await wait_head(api, "s-md-none", 1)
    text = (await api.get("/v1/sessions/s-md-none/export?format=md")).text
    assert "- **Usage:** 0 input / 0 output tokens — 0 turns\n" in text
    await empty.close()


async def test_markdown_says_why_a_run_failed_as_text(api: Api, master: Master) -> None:
    """A failed turn's error code and message follow its heading, escaped: no control
    character, no forged heading or markup."""
    client = await Peer.open(master.ws_url, "s-md-failed", token=API_KEY, create=True)
    turn = new_turn_id()
    failure = {"code": "model_overloaded", "message": EVIL}
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send(
        "session.turn.end", {"turn_id": turn, "stop_reason": "error", "error": failure}
    )
    await client.send("session.usage", usage_payload(turn))
    await wait_head(api, "s-md-failed", 4)
    text = (await api.get("/v1/sessions/s-md-failed/export?format=md")).text
    assert not [c for c in CONTROLS if c != "\n" and c in text]
    lines = text.split("\n")
    assert [line for line in lines if line.startswith("#")][1:] == ["## Turn 1 — error"]
    [failed] = [line for line in lines if line.startswith("**Run failed**")]
    assert failed.startswith("**Run failed** `model_overloaded`: x")
    assert "\\<b\\>" in failed
    assert "Turn 99" in failed  # the forged heading is inside the one escaped line
    await client.close()
