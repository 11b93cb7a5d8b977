"""The dashboard shows a revisit and its wake (notes §17.5), hostile reasons as text."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from relay.server import Master
from tests.browser.test_dashboard import agent, clean, expect, open_dashboard

pytestmark = pytest.mark.browser

HOSTILE = '<img src=x onerror="window.__owned=1"><script>window.__owned=2</script>'


async def test_revisit_and_wake_lines_with_a_hostile_reason(browser: Any, master: Master) -> None:
    """The badge and the list filter say rescheduling while the revisit waits; the Revisit and
    Woken lines show the reason as text: no element, no script."""
    client = await agent(master, "s-dash-wake")
    page = await open_dashboard(browser, master, "s-dash-wake")
    at = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=3)).isoformat().replace("+00:00", "Z")
    await client.send("session.revisit.request", {"revisit_id": "r1", "at": at, "reason": HOSTILE})
    await expect(page.locator("#session-status")).to_have_text("rescheduling")
    await expect(page.locator("#session-status")).to_have_attribute(
        "title", f"asked to be woken at {at[:10]} {at[11:19]} UTC ({HOSTILE})"
    )
    await page.select_option("#filter-status", "rescheduling")
    await expect(page.locator(".session-item .sid")).to_have_text(["s-dash-wake"])
    await page.select_option("#filter-status", "all")
    revisit = page.locator(".block.notice.notice-revisit")
    await expect(revisit.locator(".label")).to_have_text("Revisit")
    await expect(revisit.locator(".notice-text")).to_contain_text(HOSTILE)
    woken = page.locator(".block.notice.notice-wake")
    await expect(woken.locator(".label")).to_have_text("Woken")
    await expect(woken.locator(".notice-text")).to_have_text(
        f"woken: {HOSTILE} (asked for {at[:10]} {at[11:19]} UTC)"
    )
    await expect(page.locator("#session-status")).to_have_text("idle")
    assert await page.locator(".transcript img, .transcript script").count() == 0
    assert await page.evaluate("window.__owned") is None
    await clean(page)
    await client.close()
