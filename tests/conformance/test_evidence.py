"""Every non-PASS case carries its wire transcript; the summary lists missing prerequisites."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from conformance.case import CASES, all_cases
from conformance.report import Report
from conformance.runner import Prerequisite, run_cases
from relay.server import Master
from tests.conformance.conftest import target_of
from tests.conformance.kills import KILLS
from tests.conformance.switches import SWITCHES

FAILING = "notes-9/close-1000-after-delete"
OTHERS = ("notes-15.4/no-own-presence", "notes-6/direction")


async def test_report_holds_transcripts_and_missing_prerequisites(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    start_master: Callable[[], Awaitable[Master]],
) -> None:
    """A failed case's JSON has sends, receives, close codes and HTTP statuses; PASS has none."""
    all_cases()
    KILLS[FAILING](monkeypatch)
    SWITCHES["presence"](monkeypatch)
    master = await start_master()
    found: dict[str, Prerequisite] = {}
    cases = [CASES[FAILING], *(CASES[c] for c in OTHERS)]
    results = await run_cases(target_of(master), cases, timeout=2.0, features=found)
    report = Report(
        target=target_of(master),
        results=results,
        started_at=dt.datetime.now(dt.UTC),
        duration_s=1.0,
        prerequisites=found,
    )
    report.write_json(tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    by_id = {c["id"]: c for c in data["cases"]}
    failed = by_id[FAILING]
    assert failed["status"] == "FAIL"
    kinds = {e["kind"] for e in failed["transcript"]}
    assert {"open", "send", "recv", "close", "http"} <= kinds
    assert any(e.get("close_code") == 1001 for e in failed["transcript"])
    assert any(e.get("http_status") == 200 for e in failed["transcript"])
    assert all({"t_ms", "at", "who", "text"} <= set(e) for e in failed["transcript"])
    assert "transcript" not in by_id["notes-6/direction"]
    skipped = by_id["notes-15.4/no-own-presence"]
    assert skipped["status"] == "SKIP"
    assert skipped["missing_prerequisites"] == ["presence"]
    assert "transcript" in skipped
    assert data["missing_prerequisites"] == ["presence"]
    (presence,) = [p for p in data["prerequisites"] if p["feature"] == "presence"]
    assert presence["relied_on_by"] == ["notes-15.4/no-own-presence"]
    assert presence["transcript"]
    summary = report.summary()
    assert "Missing prerequisites" in summary
    assert "presence (rawp-notes §5" in summary


def test_html_escapes_what_the_master_sent(tmp_path: Path) -> None:
    """Transcript texts, details and ids are escaped in the HTML report."""
    from conformance.runner import Result, Target
    from conformance.transcript import Transcript

    transcript = Transcript()
    transcript.add("client", "recv", '{"name":"<script>alert(1)</script>"}')
    result = Result(
        case=CASES[FAILING],
        status="FAIL",
        details="got <img src=x onerror=alert(2)>",
        duration_s=0.1,
        transcript=transcript,
    )
    report = Report(
        target=Target("ws://127.0.0.1:1/v1/ws", "http://127.0.0.1:2", "k"),
        results=[result],
        started_at=dt.datetime.now(dt.UTC),
        duration_s=0.1,
    )
    report.write_html(tmp_path / "r.html")
    text = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "<script>alert" not in text
    assert "<img src=x" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "<script" not in text.lower()
