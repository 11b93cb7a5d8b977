"""The dashboard on sessions people come back to (notes §17.1–17.4): an ended session says
why and offers Continue; a message to a busy agent is refused with a clear message and stays
in the box; a failed run says why."""

from __future__ import annotations

import asyncio
from typing import Any

from relay.server import Master
from relay.store.sqlite import SqliteStore
from tests.browser.test_dashboard import agent, clean, expect, new_page, open_dashboard
from tests.e2e.conftest import API_KEY
from tests.e2e.conftest import test_settings as settings_for
from tests.support.wire import Peer, new_turn_id, usage_payload

__all__: list[str] = []


async def test_an_ended_session_says_why_and_continues(browser: Any, tmp_path: Any) -> None:
    """An expired session reads "ended: the agent did not come back within …"; its Continue
    button opens a new live session holding the conversation."""
    master = Master(settings_for(reattach_window_s=1.0), store=SqliteStore(tmp_path / "r.db"))
    await master.start()
    try:
        client = await agent(master, "s-away", "Away for a while")
        turn = new_turn_id()
        await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
        await client.send("agent.text.delta", {"block_id": "b", "delta": "remember me"})
        await client.send("agent.text.done", {"block_id": "b"})
        await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
        await client.send("session.usage", usage_payload(turn))
        await asyncio.sleep(0.3)
        await client.close()
        async with asyncio.timeout(20):
            while (await master.store.get_session("s-away")).ended_at is None:  # type: ignore[union-attr]
                await asyncio.sleep(0.1)
        page = await new_page(browser)
        await page.goto(f"{master.http_url}/?token={API_KEY}#/s/s-away")
        ended = page.locator("#ended")
        await expect(ended).to_contain_text("ended: the agent did not come back within 1 second")
        await expect(ended).not_to_contain_text("deleted")
        await page.click("#continue-button")
        await expect(page.locator("#lineage")).to_contain_text("s-away")
        await expect(page.locator("#session-status")).to_have_text("idle")
        await expect(page.locator("#transcript")).to_contain_text("remember me")
        assert "s-away" not in page.url
        await clean(page)
    finally:
        await master.stop()


async def test_a_busy_agent_refuses_and_the_text_stays(browser: Any, master: Master) -> None:
    """A message sent while the agent runs past the wait is refused: the page says the agent
    is busy and the text is still in the box."""
    client = await agent(master, "s-busy-ui")
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    page = await open_dashboard(browser, master, "s-busy-ui")
    await page.fill("#message-input", "are you there?")
    await page.click("#send-button")
    await expect(page.locator("#action-error")).to_contain_text("The agent is busy")
    await expect(page.locator("#message-input")).to_have_value("are you there?")
    await clean(page)
    await client.close()


_MARKUP = '<img src=x onerror="window.__xss=1"><b>bold</b>'


async def test_a_failed_run_says_why(browser: Any, master: Master) -> None:
    """A run that ended in error shows its code and message, in the session's header and
    under the turn's own header, as text: markup in the message stays literal."""
    client: Peer = await agent(master, "s-failed")
    page = await open_dashboard(browser, master, "s-failed")
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    failure = {"code": "model_overloaded", "message": f"the model is overloaded {_MARKUP}"}
    await client.send(
        "session.turn.end", {"turn_id": turn, "stop_reason": "error", "error": failure}
    )
    await client.send("session.usage", usage_payload(turn))
    failed = page.locator("#run-failed")
    await expect(failed).to_contain_text("model_overloaded")
    await expect(failed).to_contain_text(f"the model is overloaded {_MARKUP}")
    in_turn = page.locator("#transcript .turn-error")
    await expect(in_turn).to_have_count(1)
    await expect(in_turn).to_contain_text("Run failed")
    await expect(in_turn.locator("code")).to_have_text("model_overloaded")
    await expect(in_turn).to_contain_text(_MARKUP)
    assert await page.locator("#transcript img, #run-failed img, #transcript b").count() == 0
    assert await page.evaluate("window.__xss") is None
    await clean(page)
    await client.close()
