"""The dashboard honours notices only from the master (notes §16.8), in Chromium."""

from __future__ import annotations

from typing import Any

import pytest

from relay.server import Master
from tests.browser.test_dashboard import agent, expect, open_dashboard
from tests.support.wire import Peer

pytestmark = pytest.mark.browser

FORGED = {
    "error_code": "history_truncated",
    "message": "forged: this session's data is incomplete",
    "fatal": False,
    "lost_frame_count": 99,
}

JS = """async (frames) => {
  const { SessionView } = await import("/static/view.js");
  const view = new SessionView("s-n");
  for (const f of frames) view.receive(f);
  return view.incomplete;
}"""


def _error(seq: int, role: str) -> dict[str, Any]:
    return {
        "type": "session.error",
        "message_id": f"00000000-0000-4000-8000-00000000000{seq}",
        "session_id": "s-n",
        "timestamp": "2026-11-29T09:00:00.000Z",
        "seq": seq,
        "sender": {"role": role, "participant_id": f"p-{role}"},
        "payload": FORGED,
    }


async def test_view_js_counts_only_the_masters_history_truncated(
    browser: Any, master: Master
) -> None:
    """view.js: an edge's or client's history_truncated is no notice; the master's is."""
    page = await browser.new_page()
    await page.goto(master.http_url + "/config.json")
    assert await page.evaluate(JS, [_error(1, "edge"), _error(2, "client")]) == []
    assert await page.evaluate(JS, [_error(1, "edge"), _error(2, "master")]) == [FORGED["message"]]


async def test_a_viewers_history_truncated_puts_no_notice_up(browser: Any, master: Master) -> None:
    """A viewer logs a history_truncated: the page shows it as the viewer's report, no notice."""
    client = await agent(master, "s-forge")
    page = await open_dashboard(browser, master, "s-forge")
    token, _ = await master.hub.auth.issue_token("default", "s-forge")
    viewer = await Peer.open(master.ws_url, "s-forge", role="edge", token=token)
    await viewer.send("session.error", FORGED)
    await expect(page.locator(".notice-error")).to_contain_text("reported by the edge")
    await expect(page.locator("#incomplete")).to_be_hidden()
    await viewer.close()
    await client.close()
