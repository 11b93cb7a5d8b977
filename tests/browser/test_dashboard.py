"""The dashboard in a real browser: a live session driven by a scripted agent over RAWP."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from relay.server import Master
from relay.store.memory import MemoryStore
from tests.e2e.conftest import API_KEY
from tests.e2e.conftest import test_settings as settings_for_test
from tests.support.wire import Peer, envelope, new_turn_id, usage_payload

pytestmark = pytest.mark.browser

Shoot = Callable[[Any, str], Awaitable[Path]]

# Every script-running attempt the page's CSP blocked (none may happen: nothing should try).
WATCH_CSP = """
window.__violations = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.__violations.push(
    `${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber} ${e.sample}`));
"""


def expect(target: Any) -> Any:
    """Playwright's auto-waiting assertions."""
    from playwright.async_api import expect as pw_expect

    return pw_expect(target)


async def new_page(browser: Any) -> Any:
    """A page that records its errors and CSP violations."""
    page = await browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.errors = errors
    await page.add_init_script(WATCH_CSP)
    return page


async def open_dashboard(
    browser: Any, master: Master, session_id: str, token: str = API_KEY
) -> Any:
    """A page showing ``session_id``, attached live over the WebSocket."""
    page = await new_page(browser)
    await page.goto(f"{master.http_url}/?token={token}#/s/{session_id}")
    await expect(page.locator("#conn-status")).to_have_attribute("data-state", "live")
    assert "token=" not in page.url  # the credential left the address bar for sessionStorage
    return page


async def clean(page: Any) -> None:
    """No page error and no CSP violation happened."""
    assert page.errors == []
    assert await page.evaluate("window.__violations") == []


async def agent(master: Master, session_id: str, name: str = "Scripted agent") -> Peer:
    """The scripted agent: a RAWP client that creates the session."""
    return await Peer.open(master.ws_url, session_id, token=API_KEY, create={"name": name})


def edge_of(master: Master, session_id: str) -> Any:
    """The page's edge participant on the master."""
    session = master.hub.sessions[session_id]
    edges = [p for p in session.participants.values() if p.role == "edge"]
    assert len(edges) == 1
    return edges[0]


def _frame(session_id: str, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
    return envelope(session_id, type_, payload)


async def test_live_session_shows_a_scripted_turn(
    browser: Any, master: Master, shoot: Shoot
) -> None:
    """Timeline times, Markdown, folded thinking, tool detail, interactions, chart, totals."""
    client = await agent(master, "s-live", "Refactor the parser")
    page = await open_dashboard(browser, master, "s-live")
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send("agent.state", {"state": "thinking"})
    await client.send("agent.thinking.delta", {"block_id": "th1", "delta": "The parser "})
    await client.send("agent.thinking.delta", {"block_id": "th1", "delta": "needs a lexer."})
    await client.send("agent.thinking.done", {"block_id": "th1"})
    await client.send("agent.text.delta", {"block_id": "t1", "delta": "I will **split** "})
    text = page.locator(".block.text").first
    await expect(text.locator(".md")).to_have_text("I will split")
    await expect(text).to_have_class(re.compile(r"\bstreaming\b"))
    await client.send("agent.text.delta", {"block_id": "t1", "delta": "the parser:\n\n- lexer\n"})
    await client.send("agent.text.delta", {"block_id": "t1", "delta": "- parser\n\n`ast.py`"})
    await client.send("agent.text.done", {"block_id": "t1"})
    await client.send(
        "tool.invoke.request",
        {"call_id": "c1", "tool_name": "read_file", "input": {"path": "parser.py", "lines": 40}},
    )
    tool = page.locator(".block.tool_call")
    await expect(tool.locator(".tool-status")).to_have_text("pending")
    await expect(tool.locator(".tool-output")).to_have_count(0)
    await client.send(
        "tool.invoke.result",
        {"call_id": "c1", "status": "ok", "output": {"text": "def parse(): ...", "size": 17}},
    )
    await client.send(
        "agent.interaction.request",
        {"interaction_id": "i1", "kind": "choice", "prompt": "Which style?", "options": ["A", "B"]},
    )
    await expect(page.locator("#session-status")).to_have_text("requires action")
    await page.locator(".block.interaction button", has_text="B").click()
    answer = await client.recv_type("control.interaction.response")
    assert answer["payload"] == {"interaction_id": "i1", "response": "B"}
    assert answer["sender"]["role"] == "edge"
    await client.send(
        "session.turn.end", {"turn_id": turn, "stop_reason": "end_turn", "tool_invocation_count": 1}
    )
    await client.send("session.usage", usage_payload(turn))
    await client.send(
        "session.compacted",
        {
            "summary": "Kept the lexer plan; dropped **old** tool output.",
            "previous_token_count": 9000,
            "current_token_count": 1200,
            "trigger": "auto",
            "preserved_elements": {"files_modified": ["parser.py"]},
        },
    )
    # Markdown rendered (bold, a list, inline code), as elements, not text.
    await expect(page.locator(".block.compaction")).to_contain_text("dropped old tool output")
    await expect(page.locator(".block.compaction strong")).to_have_text("old")
    await expect(text).not_to_have_class(re.compile(r"\bstreaming\b"))
    await expect(text.locator(".md strong")).to_have_text("split")
    await expect(text.locator(".md li")).to_have_text(["lexer", "parser"])
    await expect(text.locator(".md code")).to_have_text("ast.py")
    # The turn on the timeline: start time, duration, stop reason, a link to its seq.
    head = page.locator(".block.turn .turn-head")
    await expect(head.locator(".turn-title")).to_have_text("Turn 1")
    await expect(head.locator("time.turn-start")).to_have_text(
        re.compile(r"^\d\d:\d\d:\d\d\.\d{3}$")
    )
    await expect(head.locator(".turn-duration")).to_have_text(re.compile(r"^\d+(\.\d+)? (ms|s)$"))
    await expect(head.locator(".turn-state")).to_have_text("end turn")
    await expect(head.locator(".turn-usage")).to_have_text("10 in / 20 out · 0.01 USD")
    await expect(head.locator(".seq-link")).to_have_attribute("href", re.compile(r"/events/\d+$"))
    # Thinking folded until opened.
    thinking = page.locator("details.block.thinking")
    await expect(thinking).not_to_have_attribute("open", "")
    await expect(thinking.locator(".thinking-body")).to_be_hidden()
    await thinking.locator("summary").click()
    await expect(thinking.locator(".thinking-body")).to_have_text("The parser needs a lexer.")
    # The tool call: labelled input and output, status, duration, a collapsible JSON viewer.
    await expect(tool).to_have_count(1)
    await expect(tool.locator(".tool-name")).to_have_text("read_file")
    await expect(tool.locator(".tool-status")).to_have_text("ok")
    await expect(tool.locator(".tool-duration")).to_have_text(re.compile(r"\d+(\.\d+)? (ms|s)$"))
    await expect(tool.locator(".tool-input h4")).to_have_text("Input")
    await expect(tool.locator(".tool-output h4")).to_have_text("Output")
    await expect(tool.locator(".tool-input .json-string")).to_have_text('"parser.py"')
    await expect(tool.locator(".tool-input .json-number")).to_have_text("40")
    output = tool.locator(".tool-output details.json-node").first
    await expect(output).to_have_attribute("open", "")
    await expect(tool.locator(".tool-output .json-key").first).to_have_text("text: ")
    await output.locator("summary").first.click()  # collapse
    await expect(output).not_to_have_attribute("open", "")
    await expect(page.locator(".block.interaction .ask-answer")).to_have_text("answered: B")
    # Usage per turn as a chart, plus totals.
    await expect(page.locator("#usage-chart canvas")).to_have_count(1)
    await expect(page.locator("#usage-chart .u-legend")).to_contain_text("output tokens")
    await expect(page.locator("#usage")).to_contain_text("10 in / 20 out tokens")
    await expect(page.locator("#usage")).to_contain_text("cost 0.01 USD")
    await expect(page.locator("#usage")).to_contain_text("1 tool call")
    await expect(page.locator("#session-status")).to_have_text("idle")
    await expect(page.locator(".session-item[data-id='s-live'] .name")).to_have_text(
        "Refactor the parser"
    )
    await page.fill("#message-input", "Thanks, *go ahead*.")
    await page.click("#send-button")
    message = await client.recv_type("user.message")
    assert message["payload"]["text"] == "Thanks, *go ahead*."
    await expect(page.locator(".block.user_message .md")).to_have_text("Thanks, go ahead.")
    await expect(page.locator(".block.user_message .md em")).to_have_text("go ahead")
    await shoot(page, "timeline")
    await clean(page)
    await client.close()


async def test_agent_drop_marks_synthetic_blocks_until_its_history(
    browser: Any, master: Master, shoot: Shoot
) -> None:
    """The master's synthetic blocks are marked, then taken back by the agent's history."""
    client = await agent(master, "s-drop")
    page = await open_dashboard(browser, master, "s-drop")
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send("agent.text.delta", {"block_id": "t1", "delta": "Half"})
    await client.send("tool.invoke.request", {"call_id": "c1", "tool_name": "grep", "input": {}})
    tool = page.locator(".block.tool_call")
    await expect(tool.locator(".tool-status")).to_have_text("pending")
    pid = client.participant_id
    await client.close()
    await expect(tool.locator(".tool-status")).to_have_text("cancelled")
    await expect(tool).to_have_class(re.compile(r"\bsynthetic\b"))
    await expect(page.locator(".block.turn .turn-state")).to_have_text("disconnected")
    await expect(page.locator(".synthetic-badge")).to_have_count(3)  # text, tool, turn
    await shoot(page, "agent-dropped")
    back = await Peer.open(master.ws_url, "s-drop", token=API_KEY, participant_id=pid)
    buffered = [
        _frame("s-drop", "agent.text.delta", {"block_id": "t1", "delta": " done"}),
        _frame("s-drop", "agent.text.done", {"block_id": "t1"}),
        _frame("s-drop", "tool.invoke.result", {"call_id": "c1", "status": "ok", "output": 3}),
    ]
    await back.send(
        "session.history",
        {
            "frames": buffered,
            "buffer_status": {"policy_applied": "RING", "truncated": False, "lost_frame_count": 0},
            "last_sync_timestamp": buffered[-1]["timestamp"],
            "last_message_id": buffered[-1]["message_id"],
        },
    )
    await expect(tool.locator(".tool-status")).to_have_text("ok")
    await expect(page.locator(".synthetic-badge")).to_have_count(0)
    await expect(page.locator(".block.text .md")).to_have_text("Half done")
    await expect(page.locator(".block.turn .turn-state")).to_have_text("in progress…")
    await expect(page.locator("#incomplete")).to_be_hidden()
    await clean(page)
    await back.close()


async def test_second_page_sees_a_rename(browser: Any, master: Master, shoot: Shoot) -> None:
    """A rename made on one page reaches a second page (signed in with a session token)."""
    client = await agent(master, "s-rename", "Old name")
    first = await open_dashboard(browser, master, "s-rename")
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{master.http_url}/v1/sessions/s-rename/tokens",
            headers={"Authorization": f"Bearer {API_KEY}"},
            json={},
        ) as response,
    ):
        token = (await response.json())["token"]
    second = await new_page(browser)
    await second.goto(master.http_url + "/")
    await expect(second.locator("#signin")).to_be_visible()
    await second.fill("#token-input", token)
    await second.click("#signin-button")
    await expect(second.locator("#conn-status")).to_have_attribute("data-state", "live")
    await expect(second.locator("#sidebar")).to_be_hidden()  # a session token cannot list
    await expect(second.locator("#session-name")).to_have_text("Old name")
    await first.click("#rename-button")
    await first.fill("#rename-input", "New name")
    await first.click("#rename-save")
    await expect(second.locator("#session-name")).to_have_text("New name")
    await expect(first.locator("#session-name")).to_have_text("New name")
    renamed = await client.recv_type("session.renamed")
    assert renamed["payload"]["renamed_by"] == "edge"
    assert await second.evaluate("sessionStorage.getItem('rawp.token')") == token
    await shoot(second, "renamed-second-page")
    await clean(first)
    await clean(second)
    await client.close()


async def test_page_reattaches_after_its_socket_is_cut(
    browser: Any, master: Master, shoot: Shoot
) -> None:
    """A dropped page reattaches as the same participant with no missing or doubled block."""
    client = await agent(master, "s-cut")
    page = await open_dashboard(browser, master, "s-cut")
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send("agent.text.delta", {"block_id": "t1", "delta": "one "})
    await client.send("tool.invoke.request", {"call_id": "c1", "tool_name": "ls", "input": {}})
    await expect(page.locator(".block.tool_call .tool-status")).to_have_text("pending")
    edge = edge_of(master, "s-cut")
    pid = edge.id
    assert pid == await page.evaluate("window.rawp.client.participantId")
    edge.sink.abort()  # type: ignore[attr-defined]  # the page's TCP connection dies (close 1006)
    for word in ("two ", "three"):
        await client.send("agent.text.delta", {"block_id": "t1", "delta": word})
    await client.send("agent.text.done", {"block_id": "t1"})
    await client.send("tool.invoke.result", {"call_id": "c1", "status": "ok", "output": "a b"})
    await client.send("tool.invoke.request", {"call_id": "c2", "tool_name": "cat", "input": {}})
    await client.send("tool.invoke.result", {"call_id": "c2", "status": "ok", "output": "x"})
    await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    await client.send("session.usage", usage_payload(turn))
    await expect(page.locator(".block.usage")).to_have_count(1)
    await expect(page.locator("#conn-status")).to_have_attribute("data-state", "live")
    await expect(page.locator(".block.text")).to_have_count(1)
    await expect(page.locator(".block.text .md")).to_have_text("one two three")
    await expect(page.locator(".block.tool_call")).to_have_count(2)
    await expect(page.locator(".block.tool_call .tool-status")).to_have_text(["ok", "ok"])
    await expect(page.locator(".block.turn")).to_have_count(1)
    await expect(page.locator(".synthetic-badge")).to_have_count(0)
    assert await page.evaluate("window.rawp.client.participantId") == pid
    assert await page.evaluate("window.rawp.current.attaches") >= 2
    kinds = await page.evaluate("window.rawp.view.notices.map((n) => n.kind)")
    assert "connection_lost" in kinds  # it finalized locally, then the backlog undid it
    entries = await master.store.read("s-cut")
    delivered = [e.seq for e in entries if e.delivered_to(pid, "edge")]
    assert await page.evaluate("window.rawp.view.lastSeq") == delivered[-1]
    # Every logged frame exactly once in the inspector's log: none missing, none doubled.
    seqs = await page.evaluate(
        "window.rawp.current.frames.filter((f) => f.seq != null).map((f) => f.seq)"
    )
    assert seqs == sorted(set(seqs))  # none doubled
    assert set(delivered) <= set(seqs)  # none missing
    assert edge_of(master, "s-cut").id == pid
    await clean(page)
    await shoot(page, "reattached")
    await client.close()


async def test_page_reattaches_after_a_master_restart(browser: Any, shoot: Shoot) -> None:
    """A master restarted on the same ports and store: the page comes back on its own."""
    store = MemoryStore()
    first = Master(settings_for_test(), store=store)
    await first.start()
    ports = {"ws_port": first.ws_port, "http_port": first.http_port}
    second: Master | None = None
    try:
        client = await agent(first, "s-restart")
        page = await open_dashboard(browser, first, "s-restart")
        turn = new_turn_id()
        await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
        await client.send("agent.text.delta", {"block_id": "t1", "delta": "before restart"})
        await client.send("agent.text.done", {"block_id": "t1"})
        await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
        await client.send("session.usage", usage_payload(turn))
        await expect(page.locator(".block.usage")).to_have_count(1)
        pid = await page.evaluate("window.rawp.client.participantId")
        await first.stop()
        await expect(page.locator("#conn-status")).to_have_attribute("data-state", "reconnecting")
        second = Master(settings_for_test(**ports), store=store)
        await second.start()
        await expect(page.locator("#conn-status")).to_have_attribute("data-state", "live")
        back = await Peer.open(
            second.ws_url, "s-restart", token=API_KEY, participant_id=client.participant_id
        )
        turn2 = new_turn_id()
        await back.send("session.turn.start", {"turn_id": turn2, "turn_index": 1})
        await back.send("agent.text.delta", {"block_id": "t2", "delta": "after restart"})
        await back.send("agent.text.done", {"block_id": "t2"})
        await back.send("session.turn.end", {"turn_id": turn2, "stop_reason": "end_turn"})
        await back.send("session.usage", usage_payload(turn2))
        await expect(page.locator(".block.usage")).to_have_count(2)
        await expect(page.locator(".block.text .md")).to_have_text(
            ["before restart", "after restart"]
        )
        await expect(page.locator(".block.turn")).to_have_count(2)
        assert await page.evaluate("window.rawp.client.participantId") == pid
        await clean(page)
        await shoot(page, "after-restart")
        await back.close()
    finally:
        if second is not None:
            await second.stop()
        await first.stop()


async def test_truncated_history_shows_the_incomplete_notice(
    browser: Any, master: Master, shoot: Shoot
) -> None:
    """A truncated client history: the master's history_truncated notice puts a banner up."""
    client = await agent(master, "s-trunc")
    page = await open_dashboard(browser, master, "s-trunc")
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send("agent.text.delta", {"block_id": "t1", "delta": "partial"})
    await expect(page.locator(".block.text .md")).to_have_text("partial")
    pid = client.participant_id
    await client.close()
    await expect(page.locator(".block.turn .turn-state")).to_have_text("disconnected")
    back = await Peer.open(master.ws_url, "s-trunc", token=API_KEY, participant_id=pid)
    await back.send(
        "session.history",
        {
            "frames": [],
            "buffer_status": {"policy_applied": "RING", "truncated": True, "lost_frame_count": 7},
            "last_sync_timestamp": "2026-11-29T09:00:00Z",
            "last_message_id": "",
        },
    )
    notice = page.locator("#incomplete")
    await expect(notice).to_be_visible()
    await expect(notice).to_contain_text("Data incomplete")
    await expect(notice).to_contain_text("7 frame")
    await expect(page.locator(".block.notice.notice-error.from-master")).to_contain_text(
        "history_truncated"
    )
    await expect(page.locator(".synthetic-badge")).not_to_have_count(0)  # finalization stays
    await shoot(page, "history-truncated")
    await clean(page)
    await back.close()


async def test_notices_count_only_from_the_master(
    browser: Any, master: Master, shoot: Shoot
) -> None:
    """An agent's own history_truncated error is its report: no banner (notes §16.8)."""
    client = await agent(master, "s-forged")
    page = await open_dashboard(browser, master, "s-forged")
    await client.send(
        "session.error",
        {
            "error_code": "history_truncated",
            "message": "forged: 99 frames lost",
            "fatal": False,
            "lost_frame_count": 99,
        },
    )
    report = page.locator(".block.notice.notice-error")
    await expect(report).to_have_class(re.compile(r"\bfrom-participant\b"))
    await expect(report.locator(".label")).to_have_text("Agent reported")
    await expect(report).to_contain_text("forged: 99 frames lost")
    await expect(page.locator("#incomplete")).to_be_hidden()
    await clean(page)
    await client.close()


async def test_refused_frames_are_shown(browser: Any, master: Master, shoot: Shoot) -> None:
    """A session.error the master addresses to this page (a refused frame) is shown inline."""
    client = await agent(master, "s-refused")
    page = await open_dashboard(browser, master, "s-refused")
    # Nothing is pending: the master refuses this answer with an error to this edge only.
    await page.evaluate(
        "window.rawp.client.interactionResponse('no-such-question', 'yes').catch(() => {})"
    )
    refused = page.locator(".block.refused")
    await expect(refused).to_have_count(1)
    await expect(refused.locator(".label")).to_have_text("Refused")
    await expect(refused.locator(".error-code")).not_to_be_empty()
    await shoot(page, "refused-frame")
    await page.click("#tab-events")
    await expect(page.locator(".event-row.refused .ev-type")).to_have_text("session.error")
    await clean(page)
    await client.close()


async def test_delete_ends_the_view(browser: Any, master: Master, shoot: Shoot) -> None:
    """Deleting from the page ends its view and removes the session everywhere."""
    client = await agent(master, "s-delete", "To be deleted")
    page = await open_dashboard(browser, master, "s-delete")
    await expect(page.locator(".session-item[data-id='s-delete']")).to_have_count(1)
    await page.click("#delete-button")
    await page.click("#delete-yes")
    await expect(page.locator("#ended")).to_be_visible()
    await expect(page.locator("#ended")).to_contain_text("deleted (master_request, by master)")
    await expect(page.locator("#conn-status")).to_have_attribute("data-state", "ended")
    await expect(page.locator("#session-status")).to_have_text("terminated")
    await expect(page.locator("#composer")).to_be_hidden()
    await expect(page.locator(".session-item[data-id='s-delete']")).to_have_count(0)
    deleted = await client.recv_type("session.deleted")
    assert deleted["payload"]["reason"] == "master_request"
    assert await master.store.get_session("s-delete") is None
    await shoot(page, "deleted")
    await clean(page)
