"""The conformance runner's HTML report of a run with failures, opened in headless Chromium.

The run is real: our master with presence switched off and one kill applied, a hostile string
in every frame the master makes (its node id is the ``sender.participant_id`` it stamps). The
report must show the verdict, the missing prerequisite, a per-section table, the failing case's
spec text and transcript — and keep every hostile string as text (no script runs).
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from conformance.case import all_cases
from conformance.html_report import anchor
from conformance.report import Report
from conformance.runner import Prerequisite, run_cases
from relay.server import Master
from tests.browser.conftest import SCREENSHOTS
from tests.conformance.conftest import conformance_settings, target_of
from tests.conformance.kills import KILLS
from tests.conformance.switches import SWITCHES

SCRIPT = "<script>window.__pwned=2</script>"
HOSTILE = f'm-<img src=x onerror="window.__pwned=1">{SCRIPT}'
FAILING = "7.5.3/cleanup-order-delete"
CASES = {
    FAILING,
    "notes-5/presence",
    "notes-15.4/no-own-presence",
    "notes-5/reattach-by-participant-id",
    "notes-15.6/new-client-replaces-detached",
    "7.7.1/deleted-payload-delete",
    "notes-3/unknown-type-rejected",
}


async def test_html_report_of_a_failing_run_in_chromium(
    browser: Any,
    shoot: Callable[[Any, str], Awaitable[Path]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The report shows verdict, missing prerequisite, sections, spec text and transcript."""
    from playwright.async_api import expect

    SWITCHES["presence"](monkeypatch)
    KILLS[FAILING](monkeypatch)
    master = Master(conformance_settings(node_id=HOSTILE))
    await master.start()
    found: dict[str, Prerequisite] = {}
    started_at, started = dt.datetime.now(dt.UTC), time.perf_counter()
    try:
        cases = [c for c in all_cases() if c.id in CASES]
        results = await run_cases(target_of(master), cases, timeout=2.0, features=found)
    finally:
        await master.stop()
    report = Report(
        target=target_of(master),
        results=results,
        started_at=started_at,
        duration_s=time.perf_counter() - started,
        registered=frozenset(c.id for c in all_cases()),
        prerequisites=found,
    )
    report.write_json(tmp_path / "report.json")
    data = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    failing = next(c for c in data["cases"] if c["id"] == FAILING)
    assert failing["status"] == "FAIL"
    assert any(e["kind"] == "recv" and SCRIPT in e["text"] for e in failing["transcript"])
    assert data["missing_prerequisites"] == ["presence"]
    html_path = tmp_path / "report.html"
    report.write_html(html_path)
    assert SCRIPT not in html_path.read_text(encoding="utf-8")

    page = await browser.new_page()
    SCREENSHOTS.mkdir(exist_ok=True)
    await page.goto(html_path.as_uri())
    await expect(page.locator("h1")).to_have_text("RAWP conformance report")
    await expect(page.locator(".verdict")).to_contain_text("FAILED: 2 MUST case(s) failed")
    await expect(page.get_by_text("session.presence is broadcast").first).to_be_visible()
    section = page.locator(f"#{anchor(FAILING)}")
    await expect(section).to_be_visible()
    await expect(section.locator("blockquote")).to_contain_text("7.5.3 Handling in-progress")
    await expect(section.locator("table.t tr.recv").first).to_be_visible()
    await expect(section.get_by_text(SCRIPT).first).to_be_attached()
    await page.screenshot(path=str(SCREENSHOTS / "conformance-report-summary.png"))
    await page.locator(f'a[href="#{anchor(FAILING)}"]').first.click()
    await page.screenshot(path=str(SCREENSHOTS / "conformance-report-case.png"))
    assert await page.evaluate("typeof window.__pwned") == "undefined"
    await shoot(page, "conformance-report")
