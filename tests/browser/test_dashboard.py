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
  (e) => window.__violations.push(e.violatedDirective + " " + e.blockedURI));
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
    await expect(head.locator("time.turn-start")).to_have_text(re.compile(r"^\d\d:\d\d:\d\d\.\d{3}$"))
    await expect(head.locator(".turn-duration")).to_have_text(re.compile(r"^\d+(\.\d+)? (ms|s)$"))
    await expect(head.locator(".turn-state")).to_have_text("end turn")
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
