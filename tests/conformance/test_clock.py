"""No case passes or fails by the clock: timing comes from the welcome, and the summary says
what a skipped case would need (per level counts, the settings that would run it)."""

from __future__ import annotations

import io
from collections.abc import Awaitable, Callable

from conformance.case import CASES, all_cases
from conformance.cli import main_async
from conformance.runner import run_cases
from rawp.cli import build_parser
from relay.server import Master
from tests.conformance.conftest import API_KEY, conformance_settings, target_of


async def test_a_window_too_short_for_the_late_edge_skips_saying_which_window_would_do() -> None:
    """finalize-interaction-discarded: a late edge past the window is a SKIP, never a FAIL
    (one that still finds the session, before the master's sweep ended it, may pass)."""
    all_cases()
    master = Master(conformance_settings(reattach_window_s=0.001))
    await master.start()
    try:
        case = CASES["7.8.1/finalize-interaction-discarded"]
        (result,) = await run_cases(target_of(master), [case], timeout=3.0)
    finally:
        await master.stop()
    assert result.status in ("SKIP", "PASS"), result.details
    if result.status == "SKIP":
        assert "reattach window" in result.details
        assert result.setting.startswith("a reattach window of at least")


async def test_the_summary_counts_each_level_and_names_the_settings_for_the_skips(
    start_master: Callable[[], Awaitable[Master]],
) -> None:
    """A skipped MUST is counted as skipped, not as passed, with the setting that runs it."""
    master = await start_master()
    argv = ["conformance", "--ws-url", master.ws_url, "--http-url", master.http_url]
    argv += ["--api-key", API_KEY, "--timeout", "3", "--hello-timeout", "10"]
    argv += ["--only", "notes-5/4408-hello-timeout", "--only", "notes-5/4404-unknown-session"]
    out = io.StringIO()
    code = await main_async(build_parser().parse_args(argv), out=out, err=io.StringIO())
    text = out.getvalue()
    assert code == 0
    assert "MUST       2 cases: 1 PASS, 0 FAIL, 1 SKIP" in text
    assert "--timeout of at least 11s (or a shorter hello timeout): notes-5/4408" in text
    assert "OK, but 1 MUST case(s) SKIPPED" in text
    assert "every MUST passed (or" not in text
