"""``rawp conformance``: flags, exit codes, expected failures and the three report formats."""

from __future__ import annotations

import datetime as dt
import io
import json
import xml.etree.ElementTree as ET
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from conformance.case import all_cases
from conformance.cli import main_async, select
from rawp.cli import build_parser, main
from relay.server import Master
from tests.conformance.conftest import API_KEY, HELLO_TIMEOUT_S, conformance_settings
from tests.conformance.kills import KILLS

StartMaster = Callable[[], Awaitable[Master]]


async def _run(master: Master | None, *flags: str) -> tuple[int, str, str]:
    argv = ["conformance", *flags]
    if master is not None:
        argv += ["--ws-url", master.ws_url, "--http-url", master.http_url, "--api-key", API_KEY]
        argv += ["--hello-timeout", str(HELLO_TIMEOUT_S), "--timeout", "3"]
    args = build_parser().parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    code = await main_async(args, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


async def test_passing_run_writes_json_and_junit(start_master: StartMaster, tmp_path: Path) -> None:
    """A clean run exits 0 and writes both reports with one entry per selected case."""
    master = await start_master()
    report, junit = tmp_path / "report.json", tmp_path / "report.xml"
    code, out, _ = await _run(
        master,
        "--only",
        "notes-5/44*",
        "--skip",
        "*4408*",
        "--json",
        str(report),
        "--junit",
        str(junit),
    )
    assert code == 0
    assert "PASS" in out
    assert "OK: every MUST passed" in out
    data = json.loads(report.read_text())
    ids = [c["id"] for c in data["cases"]]
    assert ids == [c.id for c in select(all_cases(), ["notes-5/44*"], ["*4408*"])]
    assert data["exit_code"] == 0
    assert data["summary"]["PASS"] == len(ids)
    first = data["cases"][0]
    assert set(first) >= {"id", "level", "status", "spec", "details", "duration_s"}
    assert first["spec"] == "rawp-notes §5"
    suite = ET.parse(junit).getroot()
    assert suite.tag == "testsuite"
    assert suite.get("tests") == str(len(ids))
    assert suite.get("failures") == "0"
    assert [t.get("name") for t in suite.iter("testcase")] == ids


async def test_must_failure_exits_1(
    start_master: StartMaster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A failing MUST exits 1 and is a JUnit failure."""
    KILLS["notes-5/4401-bad-credential"](monkeypatch)
    master = await start_master()
    junit, page = tmp_path / "report.xml", tmp_path / "report.html"
    code, out, _ = await _run(
        master, "--only", "notes-5/4401-*", "--junit", str(junit), "--html", str(page)
    )
    assert code == 1
    html = page.read_text(encoding="utf-8")
    assert 'id="case-notes-5-4401-bad-credential"' in html
    assert "Wire transcript" in html
    assert "FAIL" in out
    assert "closed with 4403, not 4401" in out
    suite = ET.parse(junit).getroot()
    assert suite.get("failures") == "1"
    assert suite.find("testcase/failure") is not None
    transcript = suite.findtext("testcase/system-out") or ""
    assert "close [4403]" in transcript
    assert "send" in transcript


async def test_expected_failure_exits_0_and_stale_is_reported(
    start_master: StartMaster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A listed failure no longer fails the run; a listed case that passes is reported stale."""
    KILLS["notes-5/4401-bad-credential"](monkeypatch)
    master = await start_master()
    listed = tmp_path / "expected.txt"
    listed.write_text(
        "# known problems of this master\n"
        "notes-5/4401-bad-credential   # closes 4403\n"
        "\n"
        "notes-5/4404-unknown-session\n"
        "no-such/case\n"
    )
    report = tmp_path / "report.json"
    code, out, _ = await _run(
        master,
        "--only",
        "notes-5/4401-*",
        "--only",
        "notes-5/4404-*",
        "--expected-failures",
        str(listed),
        "--json",
        str(report),
    )
    assert code == 0
    data = json.loads(report.read_text())
    by_id = {c["id"]: c for c in data["cases"]}
    assert by_id["notes-5/4401-bad-credential"]["status"] == "FAIL"
    assert by_id["notes-5/4401-bad-credential"]["expected_failure"] is True
    assert data["stale_expected_failures"] == ["notes-5/4404-unknown-session"]
    assert data["unknown_expected_failures"] == ["no-such/case"]
    assert "Stale expected failures" in out


async def test_should_failure_warns_and_exits_0(
    start_master: StartMaster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A failing SHOULD is a WARN: reported, not a failure of the run."""
    KILLS["7.6.1/rename-in-welcome"](monkeypatch)
    master = await start_master()
    report = tmp_path / "report.json"
    code, out, _ = await _run(master, "--only", "7.6.1/rename-in-welcome", "--json", str(report))
    assert code == 0
    assert "WARN" in out
    assert json.loads(report.read_text())["cases"][0]["status"] == "WARN"


async def test_list_and_usage_errors() -> None:
    """--list prints the cases; no match, missing flags and an unreachable master exit 2."""
    code, out, _ = await _run(None, "--list", "--only", "7.5.3/*")
    assert code == 0
    assert "7.5.3/cleanup-order-delete" in out
    code, out, _ = await _run(None, "--list", "--only", "notes-5/4403-*")
    assert "[needs session-tokens; uses presence, rest-sessions]" in out
    code, _, err = await _run(None, "--only", "nothing-matches")
    assert (code, "no case matches" in err) == (2, True)
    code, _, err = await _run(None)
    assert (code, "needs --ws-url (or $RAWP_WS_URL)" in err) == (2, True)
    code, _, err = await _run(
        None,
        "--ws-url",
        "ws://127.0.0.1:9/v1/ws",
        "--http-url",
        "http://127.0.0.1:9",
        "--api-key",
        "k",
    )
    assert (code, "cannot reach" in err) == (2, True)


def test_rawp_dispatcher_lists_conformance(capsys: pytest.CaptureFixture[str]) -> None:
    """``rawp conformance --help`` is wired through the rawp dispatcher."""
    with pytest.raises(SystemExit) as exit_info:
        main(["conformance", "--help"])
    assert exit_info.value.code == 0
    assert "--expected-failures" in capsys.readouterr().out


async def test_skipped_musts_are_counted_not_called_passed(tmp_path: Path) -> None:
    """Against a master with the default reattach window the expiry MUST is skipped: the
    summary counts it, does not say every MUST passed, and says how to make it run."""
    master = Master(conformance_settings(reattach_window_s=120.0))
    await master.start()
    try:
        report = tmp_path / "report.json"
        code, out, _ = await _run(
            master, "--only", "7.5.3/cleanup-order-expiry", "--json", str(report)
        )
    finally:
        await master.stop()
    assert code == 0  # a skip is not a failure
    assert "every MUST passed" not in out
    assert "OK, but 1 MUST case(s) SKIPPED" in out
    skipped = out.split("Skipped (not checked):")[1].splitlines()[1]
    assert skipped.startswith("  MUST   7.5.3/cleanup-order-expiry: the master's reattach")
    assert "give --timeout 1" in skipped  # 120 s window: --timeout 12x or more
    assert "rawp serve --reattach-window" in skipped
    assert json.loads(report.read_text())["summary"]["must_skipped"] == 1


async def test_what_a_case_quotes_from_the_master_is_inert_in_every_report(
    start_master: StartMaster, tmp_path: Path
) -> None:
    """A failure's details that quote the master's text (terminal escapes, CR/LF, a NUL) reach
    the terminal, the summary and the JUnit file escaped: no fake line, valid XML."""
    import aiohttp

    from conformance.case import Case, CaseFailed
    from conformance.report import Progress, Report
    from conformance.runner import Context, Target, run_case

    hostile = "\x1b[2J\x1b[1;32m[1/1] PASS\x00\r\nall 117 cases passed"

    async def quotes_the_master(ctx: Context) -> None:
        raise CaseFailed(f"the master said {hostile}")

    case = Case(
        id="notes-5/hostile-details",
        level="MUST",
        description="quotes the master",
        kill="-",
        body=quotes_the_master,
        spec="rawp-notes §5",
    )
    master = await start_master()
    target = Target(ws_url=master.ws_url, http_url=master.http_url, api_key=API_KEY)
    async with aiohttp.ClientSession() as http:
        result = await run_case(case, target, http, timeout=3.0)
    assert result.status == "FAIL"
    out = io.StringIO()
    Progress(out)(1, 1, result)
    report = Report(
        target=target, results=[result], started_at=dt.datetime.now(dt.UTC), duration_s=0.1
    )
    text = out.getvalue() + report.summary()
    assert not any(ch in text for ch in "\x1b\x00\r"), text
    assert "all 117 cases passed" in text
    assert "\nall 117" not in text
    junit = tmp_path / "report.xml"
    report.write_junit(junit)
    ET.parse(junit)  # well-formed: no raw control character
