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
from tests.support.wire import Peer, new_turn_id, usage_payload

pytestmark = pytest.mark.browser

Shoot = Callable[[Any, str], Awaitable[Path]]


def expect(target: Any) -> Any:
    """Playwright's auto-waiting assertions."""
    from playwright.async_api import expect as pw_expect

    return pw_expect(target)


async def open_dashboard(
    browser: Any, master: Master, session_id: str, token: str = API_KEY
) -> Any:
    """A page showing ``session_id``, attached live over the WebSocket."""
    page = await browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.errors = errors
    await page.goto(f"{master.http_url}/?token={token}#/s/{session_id}")
    await expect(page.locator("#conn-status")).to_have_attribute("data-state", "live")
    assert "token=" not in page.url  # the credential left the address bar for sessionStorage
    return page


async def agent(master: Master, session_id: str, name: str = "Scripted agent") -> Peer:
    """The scripted agent: a RAWP client that creates the session."""
    return await Peer.open(master.ws_url, session_id, token=API_KEY, create={"name": name})


def edge_of(master: Master, session_id: str) -> Any:
    """The page's edge participant on the master."""
    session = master.hub.sessions[session_id]
    edges = [p for p in session.participants.values() if p.role == "edge"]
    assert len(edges) == 1
    return edges[0]


async def test_live_session_shows_a_scripted_turn(
    browser: Any, master: Master, shoot: Shoot
) -> None:
    """Streamed text, folded thinking, paired tool calls, a clickable interaction, usage."""
    client = await agent(master, "s-live", "Refactor the parser")
    page = await open_dashboard(browser, master, "s-live")
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send("agent.state", {"state": "thinking"})
    await client.send("agent.thinking.delta", {"block_id": "th1", "delta": "The parser "})
    await client.send("agent.thinking.delta", {"block_id": "th1", "delta": "needs a lexer."})
    await client.send("agent.thinking.done", {"block_id": "th1"})
    await client.send("agent.text.delta", {"block_id": "t1", "delta": "I will split "})
    text = page.locator(".block.text").first
    await expect(text).to_have_text("I will split")
    await expect(text).to_have_class(re.compile(r"\bstreaming\b"))
    await client.send("agent.text.delta", {"block_id": "t1", "delta": "the parser in two."})
    await client.send("agent.text.done", {"block_id": "t1"})
    await client.send(
        "tool.invoke.request",
        {"call_id": "c1", "tool_name": "read_file", "input": {"path": "parser.py"}},
    )
    tool = page.locator(".block.tool")
    await expect(tool.locator(".tool-status")).to_have_text("pending")
    await client.send(
        "tool.invoke.result", {"call_id": "c1", "status": "ok", "output": "def parse(): ..."}
    )
    await client.send(
        "agent.interaction.request",
        {"interaction_id": "i1", "kind": "choice", "prompt": "Which style?", "options": ["A", "B"]},
    )
    await expect(page.locator("#session-status")).to_have_text("requires action")
    await page.locator(".block.ask button", has_text="B").click()
    answer = await client.recv_type("control.interaction.response")
    assert answer["payload"] == {"interaction_id": "i1", "response": "B"}
    assert answer["sender"]["role"] == "edge"
    await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    await client.send("session.usage", usage_payload(turn))
    await client.send(
        "session.compacted",
        {
            "summary": "Kept the lexer plan; dropped old tool output.",
            "previous_token_count": 9000,
            "current_token_count": 1200,
            "trigger": "auto",
            "preserved_elements": {"files_modified": ["parser.py"]},
        },
    )
    await expect(page.locator(".block.compaction")).to_contain_text("dropped old tool output")
    await expect(text).to_have_text("I will split the parser in two.")
    await expect(text).not_to_have_class(re.compile(r"\bstreaming\b"))
    thinking = page.locator("details.block.thinking")
    await expect(thinking).not_to_have_attribute("open", "")
    await expect(thinking.locator(".thinking-body")).to_have_text("The parser needs a lexer.")
    await expect(tool).to_have_count(1)
    await expect(tool.locator(".tool-status")).to_have_text("ok")
    await expect(tool.locator(".tool-output")).to_have_text("def parse(): ...")
    await expect(page.locator(".block.ask .ask-answer")).to_have_text("answered: B")
    await expect(page.locator(".block.turn .turn-state")).to_have_text("end turn")
    await expect(page.locator("#usage")).to_contain_text("10 in / 20 out tokens")
    await expect(page.locator("#usage")).to_contain_text("cost 0.01 USD")
    await expect(page.locator("#session-status")).to_have_text("idle")
    await expect(page.locator(".session-item[data-id='s-live'] .name")).to_have_text(
        "Refactor the parser"
    )
    await page.fill("#message-input", "Thanks, go ahead.")
    await page.click("#send-button")
    message = await client.recv_type("user.message")
    assert message["payload"]["text"] == "Thanks, go ahead."
    await expect(page.locator(".block.user")).to_have_text("userThanks, go ahead.")
    await shoot(page, "live-session")
    assert page.errors == []
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
    await expect(page.locator(".block.tool .tool-status")).to_have_text("pending")
    pid = client.participant_id
    await client.close()
    await expect(page.locator(".block.tool .tool-status")).to_have_text("cancelled")
    await expect(page.locator(".block.tool")).to_have_class(re.compile(r"\bsynthetic\b"))
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
    await expect(page.locator(".block.tool .tool-status")).to_have_text("ok")
    await expect(page.locator(".synthetic-badge")).to_have_count(0)
    await expect(page.locator(".block.text")).to_have_text("Half done")
    await expect(page.locator(".block.turn .turn-state")).to_have_text("in progress…")
    await expect(page.locator("#incomplete")).to_be_hidden()
    assert page.errors == []
    await back.close()


def _frame(session_id: str, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
    from tests.support.wire import envelope

    return envelope(session_id, type_, payload)


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
    second = await browser.new_page()
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
    await expect(page.locator(".block.tool .tool-status")).to_have_text("pending")
    edge = edge_of(master, "s-cut")
    pid = edge.id
    assert pid == await page.evaluate("window.rawp.connection.participantId")
    edge.sink.transport.abort()  # the page's TCP connection dies (close 1006)
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
    await expect(page.locator(".block.text")).to_have_text("one two three")
    await expect(page.locator(".block.tool")).to_have_count(2)
    await expect(page.locator(".block.tool .tool-status")).to_have_text(["ok", "ok"])
    await expect(page.locator(".block.turn")).to_have_count(1)
    await expect(page.locator(".synthetic-badge")).to_have_count(0)
    assert await page.evaluate("window.rawp.connection.participantId") == pid
    assert await page.evaluate("window.rawp.connection.attaches") >= 2
    kinds = await page.evaluate("window.rawp.view.notices.map((n) => n.kind)")
    assert "connection_lost" in kinds  # it finalized locally, then the backlog undid it
    entries = await master.store.read("s-cut")
    delivered = [e.seq for e in entries if e.delivered_to(pid, "edge")]
    assert await page.evaluate("window.rawp.view.lastSeq") == delivered[-1]
    assert edge_of(master, "s-cut").id == pid
    assert page.errors == []
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
        pid = await page.evaluate("window.rawp.connection.participantId")
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
        await expect(page.locator(".block.text")).to_have_text(["before restart", "after restart"])
        await expect(page.locator(".block.turn")).to_have_count(2)
        assert await page.evaluate("window.rawp.connection.participantId") == pid
        assert page.errors == []
        await shoot(page, "after-restart")
        await back.close()
    finally:
        if second is not None:
            await second.stop()
        await first.stop()


async def test_truncated_history_shows_the_incomplete_notice(
    browser: Any, master: Master, shoot: Shoot
) -> None:
    """A client history with truncated: true puts a visible "data incomplete" notice up."""
    client = await agent(master, "s-trunc")
    page = await open_dashboard(browser, master, "s-trunc")
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send("agent.text.delta", {"block_id": "t1", "delta": "partial"})
    await expect(page.locator(".block.text")).to_have_text("partial")
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
    await expect(page.locator(".synthetic-badge")).not_to_have_count(0)  # finalization stays
    await shoot(page, "history-truncated")
    await back.close()


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


async def test_archived_session_is_listed_apart_and_opens_read_only(
    browser: Any, master: Master
) -> None:
    """A session ended by a fatal error is listed under "Ended" and opens from its log,
    read-only (no composer, no live connection), its transcript intact (notes §16.1)."""
    client = await agent(master, "s-archived", "Finished work")
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send("agent.text.delta", {"block_id": "t1", "delta": "Kept for later."})
    await client.send("agent.text.done", {"block_id": "t1"})
    await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    await client.send("session.error", {"error_code": "done", "message": "bye", "fatal": True})
    assert await client.closed_with() == 1000
    live = await agent(master, "s-still-live", "Still going")
    page = await browser.new_page()
    await page.goto(f"{master.http_url}/?token={API_KEY}#/s/s-archived")
    await expect(page.locator("#conn-status")).to_have_attribute("data-state", "ended")
    await expect(page.locator(".block.text").first).to_have_text("Kept for later.")
    await expect(page.locator("#composer")).to_be_hidden()
    await expect(page.locator("#archived-title")).to_be_visible()
    ended = page.locator("#archived-sessions .session-item[data-id='s-archived']")
    await expect(ended).to_have_count(1)
    await expect(ended.locator(".presence-summary")).to_contain_text("error")
    await expect(page.locator("#sessions .session-item[data-id='s-still-live']")).to_have_count(1)
    await expect(page.locator("#sessions .session-item[data-id='s-archived']")).to_have_count(0)
    assert "s-archived" not in master.hub.sessions  # nothing attached to it
    await live.close()


async def test_a_withdrawn_question_loses_its_buttons(browser: Any, master: Master) -> None:
    """agent.interaction.cancel removes the prompt's answer buttons and says it was withdrawn."""
    client = await agent(master, "s-withdrawn")
    page = await open_dashboard(browser, master, "s-withdrawn")
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send(
        "agent.interaction.request",
        {"interaction_id": "i1", "kind": "confirmation", "prompt": "Apply the patch?"},
    )
    ask = page.locator(".block.ask")
    await expect(ask.locator("button")).to_have_count(2)
    await expect(page.locator("#session-status")).to_have_text("requires action")
    await client.send(
        "agent.interaction.cancel", {"interaction_id": "i1", "reason": "no answer within 30 s"}
    )
    await expect(ask.locator("button")).to_have_count(0)
    await expect(ask.locator(".ask-answer")).to_have_text(
        "withdrawn by the agent: no answer within 30 s"
    )
    await expect(page.locator("#session-status")).to_have_text("running")
    assert page.errors == []
    await client.close()
