"""A bridged ACP agent's permission request answered in the dashboard while an ACP editor
watches: the scripted agent (``agent-client-protocol``) behind ``rawp bridge acp``, the editor
(its client side) driving ``rawp acp attach``, the page in headless Chromium."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from acp import text_block

from relay.server import Master
from tests.browser.test_dashboard import clean, expect, open_dashboard
from tests.interop.acp_support import (
    Edge,
    Editor,
    agent_command,
    attached,
    library_bridge,
    payloads,
    records,
    validate_sequence,
)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

Shoot = Callable[[Any, str], Awaitable[Path]]


async def test_permission_answered_in_the_dashboard_reaches_the_watching_editor(
    browser: Any, master: Master, shoot: Shoot, tmp_path: Path
) -> None:
    """The editor prompts; the agent asks permission of everyone; the dashboard's click
    answers it: the editor's own question is withdrawn, it sees the tool call completed with
    the chosen option, and its prompt ends end_turn."""
    async with (
        library_bridge(master, "acp-dash", agent_command(tmp_path)),
        Edge(master, "acp-dash") as edge,
    ):
        editor = Editor()  # never answers: it waits until the question is settled elsewhere
        async with attached(master, "acp-dash", editor) as (conn, _):
            await conn.load_session(cwd=str(tmp_path), session_id="acp-dash", mcp_servers=[])
            page = await open_dashboard(browser, master, "acp-dash")
            prompt = asyncio.create_task(
                conn.prompt(session_id="acp-dash", prompt=[text_block("permission")])
            )
            ask = page.locator(".block.interaction")
            await expect(ask.locator(".ask-prompt")).to_have_text("Allow Run rm -rf build?")
            await expect(ask.locator("button")).to_have_text(["Allow once", "Reject"])
            await asyncio.wait_for(editor.asking.wait(), 30)
            await shoot(page, "acp-permission-asked")
            await ask.locator("button", has_text="Allow once").click()
            response = await asyncio.wait_for(prompt, 30)
            assert response.stop_reason == "end_turn"
            await editor.wait(lambda e: e.withdrawn)
            await editor.wait(lambda e: "selected allow" in e.texts())
            await expect(ask.locator(".ask-answer")).to_have_text("answered: allow")
            await shoot(page, "acp-permission-answered")
            await clean(page)
        await edge.wait_type("session.usage")
    # The editor was asked the agent's own question, and told it was settled elsewhere.
    ((tool_call, options),) = editor.asked
    assert tool_call.tool_call_id == "call-p"
    assert [o.option_id for o in options] == ["allow", "reject"]
    assert len(editor.withdrawn) == 1
    done = [
        u
        for u in editor.updates
        if u.session_update == "tool_call_update" and u.tool_call_id == "call-p" and u.status
    ]
    assert (done[-1].status, done[-1].raw_output) == ("completed", "selected allow")
    # The dashboard's answer was the one: the agent got the option the page clicked.
    (answer,) = payloads(edge, "control.interaction.response")
    assert answer["response"] == "allow"
    assert records(tmp_path, "permission_answer")[0]["params"]["outcome"] == "selected allow"
    await validate_sequence(edge.frames, tmp_path)
