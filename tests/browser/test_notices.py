"""The dashboard honours notices only from the master (notes §16.8), in Chromium."""

from __future__ import annotations

import re
from typing import Any

import pytest

from relay.server import Master
from tests.browser.test_dashboard import agent, clean, expect, open_dashboard
from tests.support.wire import Peer, envelope

pytestmark = pytest.mark.browser

FORGED = {
    "error_code": "history_truncated",
    "message": "forged: this session's data is incomplete",
    "fatal": False,
    "lost_frame_count": 99,
}

# Frames folded into the page's own SessionView (the SDK's, bundled), then one render.
FEED = """(frames) => {
  const view = window.rawp.view;
  for (const f of frames) view.receive({ ...f, seq: view.lastSeq + 1 });
  window.rawp.refresh();
}"""


def _error(session_id: str, role: str) -> dict[str, Any]:
    frame = envelope(session_id, "session.error", FORGED)
    frame["sender"] = {"role": role, "participant_id": f"p-{role}"}
    return frame


async def test_the_pages_view_counts_only_the_masters_history_truncated(
    browser: Any, master: Master
) -> None:
    """The page's SessionView: a participant's history_truncated is no notice; the master's is."""
    client = await agent(master, "s-n")
    page = await open_dashboard(browser, master, "s-n")
    await page.evaluate(FEED, [_error("s-n", "edge"), _error("s-n", "client")])
    reports = page.locator(".block.notice.notice-error.from-participant")
    await expect(reports.locator(".label")).to_have_text(["Viewer reported", "Agent reported"])
    await expect(page.locator("#incomplete")).to_be_hidden()
    await page.evaluate(FEED, [_error("s-n", "master")])
    await expect(page.locator(".block.notice.notice-error.from-master .label")).to_have_text(
        "Master notice"
    )
    await expect(page.locator("#incomplete")).to_be_visible()
    await expect(page.locator("#incomplete")).to_contain_text("Data incomplete")
    await expect(page.locator("#incomplete")).to_contain_text(FORGED["message"])
    await clean(page)
    await client.close()


async def test_a_viewers_history_truncated_puts_no_notice_up(browser: Any, master: Master) -> None:
    """A viewer logs a history_truncated over the real master: shown as its report, no banner."""
    client = await agent(master, "s-forge")
    page = await open_dashboard(browser, master, "s-forge")
    token, _ = await master.hub.auth.issue_token("default", "s-forge")
    viewer = await Peer.open(master.ws_url, "s-forge", role="edge", token=token)
    await viewer.send("session.error", FORGED)
    report = page.locator(".block.notice.notice-error")
    await expect(report).to_have_class(re.compile(r"\bfrom-participant\b"))
    await expect(report.locator(".label")).to_have_text("Viewer reported")
    await expect(report).to_contain_text(FORGED["message"])
    await expect(page.locator("#incomplete")).to_be_hidden()
    await clean(page)
    await viewer.close()
    await client.close()
