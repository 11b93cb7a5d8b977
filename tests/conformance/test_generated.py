"""Generated conformance (``--generate N``): deterministic by seed, passes on our master, finds
deliberately broken masters, shrinks what it finds and reports it like the other cases."""

from __future__ import annotations

import io
import json
from pathlib import Path

import aiohttp
import pytest

from conformance.cli import main_async
from conformance.generated.drive import DISAGREEMENT, play
from conformance.generated.generator import generate
from conformance.generated.run import Generated, normalized, run_generated
from conformance.generated.steps import SESSION_PLACEHOLDER, Step
from conformance.runner import Result, Target
from rawp.cli import build_parser
from relay.server import Master
from tests.conformance.conftest import API_KEY, conformance_settings, target_of
from tests.conformance.kill_master import killed_master

# Kills the generator finds within the first sessions of seed 1, and how many it takes (these
# change with the generator: a new kind of step draws other sessions). The
# other kills' tests use two more (notes-7/ring-exact, 7.5.2/usage-after-turn-end); the bench
# runs every kill with --generate 500 (bench/conformance_generate.py).
FOUND_EARLY = {
    "notes-6/turn-state": 17,
    "7.3.1/usage-with-text-done": 9,
}
RING_EXACT_FOUND_BY = 12


def test_a_seed_draws_the_same_sessions_every_time() -> None:
    """generate(seed, index) is a pure function of its arguments."""
    assert [generate(5, i) for i in range(20)] == [generate(5, i) for i in range(20)]
    assert [generate(5, i) for i in range(5)] != [generate(6, i) for i in range(5)]


async def _run(target: Target, seed: int, count: int) -> list[tuple[str, list[str]]]:
    seen: list[tuple[str, list[str]]] = []

    def keep(index: int, total: int, g: Generated, result: Result) -> None:
        seen.append((result.status, normalized(g.played.transcript, g.session_id, target)))

    await run_generated(target, count=count, seed=seed, timeout=10.0, on_result=keep)
    return seen


async def test_two_runs_with_one_seed_give_the_same_verdicts_and_transcripts() -> None:
    """Against our master, every session passes and both runs print the same wire text."""
    master = Master(conformance_settings(reattach_window_s=30.0))
    await master.start()
    try:
        first = await _run(target_of(master), 11, 16)
        second = await _run(target_of(master), 11, 16)
    finally:
        await master.stop()
    assert [status for status, _ in first] == ["PASS"] * 16
    assert first == second


@pytest.mark.parametrize("case_id", sorted(FOUND_EARLY))
async def test_the_generator_finds_a_broken_master(case_id: str) -> None:
    """With the hand-written case's kill applied, a short generated run disagrees."""
    async with killed_master(case_id) as (ws_url, http_url):
        target = Target(ws_url=ws_url, http_url=http_url, api_key=API_KEY)
        results = await run_generated(
            target,
            count=FOUND_EARLY[case_id],
            seed=1,
            timeout=5.0,
            read_timeout=1.0,
            shrink_failures=False,
            stop_on_failure=True,
        )
    assert results[-1].status == "FAIL", f"{case_id}: not found in {len(results)} sessions"
    assert DISAGREEMENT in results[-1].transcript.to_text()


async def test_a_failure_is_shrunk_and_printed_with_its_seed_and_marked_transcript() -> None:
    """The minimal session still fails, is shorter, and its transcript marks the spot."""
    failing: list[Generated] = []

    def keep(index: int, total: int, g: Generated, result: Result) -> None:
        if result.status == "FAIL":
            failing.append(g)

    async with killed_master("notes-7/ring-exact") as (ws_url, http_url):
        target = Target(ws_url=ws_url, http_url=http_url, api_key=API_KEY)
        await run_generated(
            target,
            count=RING_EXACT_FOUND_BY,
            seed=1,
            timeout=5.0,
            read_timeout=1.0,
            max_shrink_runs=40,
            stop_on_failure=True,
            on_result=keep,
        )
    (g,) = failing
    assert g.minimal_played is not None
    assert g.minimal_played.status == "FAIL"
    assert 0 < len(g.minimal) < len(g.steps)
    text = g.report(target)
    assert "--seed 1" in text
    assert f"--generate {g.index + 1}" in text
    marked = [line for line in text.splitlines() if line.startswith("  >>> ")]
    assert len(marked) == 1
    assert DISAGREEMENT in marked[0]


async def test_json_and_html_reports_carry_generated_failures(tmp_path: Path) -> None:
    """A generated failure is a FAIL case in --json (with its transcript) and in --html."""
    report, html = tmp_path / "report.json", tmp_path / "report.html"
    async with killed_master("7.5.2/usage-after-turn-end") as (ws_url, http_url):
        argv = ["conformance", "--ws-url", ws_url, "--http-url", http_url, "--api-key", API_KEY]
        argv += ["--generate", "5", "--seed", "1", "--timeout", "5"]
        argv += ["--json", str(report), "--html", str(html)]
        out = io.StringIO()
        code = await main_async(build_parser().parse_args(argv), out=out, err=io.StringIO())
    assert code == 1
    data = json.loads(report.read_text())
    failed = [c for c in data["cases"] if c["status"] == "FAIL"]
    assert [c["id"] for c in failed] == ["generated/1-4"]
    assert any(DISAGREEMENT in e["text"] for e in failed[0]["transcript"])
    assert "rawp conformance --generate 5 --seed 1" in failed[0]["details"]
    page = html.read_text()
    assert "generated/1-4" in page
    assert DISAGREEMENT in page
    assert "FAILED: 1 MUST case(s) failed" in out.getvalue()


async def test_a_session_that_would_race_the_reattach_window_skips_naming_it() -> None:
    """A participant left detached for half the welcome's window makes the session SKIP."""
    start = json.dumps(
        {
            "type": "session.turn.start",
            "message_id": "0b7c3f1e-8a59-4c6e-9d2b-3f0a8e1c5d77",
            "session_id": SESSION_PLACEHOLDER,
            "timestamp": "2026-01-01T00:00:00.000Z",
            "payload": {"turn_id": "6f1d2c3b-4a5e-4f60-8a71-9b8c7d6e5f40", "turn_index": 0},
        }
    )
    steps = [Step("send", "client", start), Step("drop", "client"), Step("join", "edge1")]
    master = Master(conformance_settings(reattach_window_s=0.001))
    await master.start()
    try:
        async with aiohttp.ClientSession() as http:
            played = await play(
                steps,
                target_of(master),
                http,
                session_id="gen-window-race",
                timeout=5.0,
                read_timeout=2.0,
            )
    finally:
        await master.stop()
    assert played.status == "SKIP", played.details
    assert "reattach window the welcome gives (1 ms)" in played.details


def _frame(type_: str, message_id: str, payload: dict[str, object]) -> str:
    return json.dumps(
        {
            "type": type_,
            "message_id": message_id,
            "session_id": SESSION_PLACEHOLDER,
            "timestamp": "2026-01-01T00:00:00.000Z",
            "payload": payload,
        }
    )


async def _play_on(master: Master, steps: list[Step], session_id: str) -> str:
    await master.start()
    try:
        async with aiohttp.ClientSession() as http:
            played = await play(
                steps,
                target_of(master),
                http,
                session_id=session_id,
                timeout=10.0,
                read_timeout=1.0,
            )
    finally:
        await master.stop()
    assert played.status == "PASS", played.details
    return played.transcript.to_text()


_TURN = "6f1d2c3b-4a5e-4f60-8a71-9b8c7d6e5f40"


async def test_a_message_during_a_turn_is_judged_busy_and_status_changes_are_logged() -> None:
    """The model predicts the logged session.status frames and an edge's user.message
    refused busy after its hold while a turn is open, and one held while a run is about to
    start then relayed (sessions a shrink can make), with a one-second frame wait."""
    start = {"turn_id": _TURN, "turn_index": 0}
    steps = [
        Step(
            "send",
            "observer",
            _frame("user.message", "0b7c3f1e-8a59-4c6e-9d2b-3f0a8e1c5d71", {"text": "a"}),
        ),
        Step(
            "send",
            "observer",
            _frame("user.message", "0b7c3f1e-8a59-4c6e-9d2b-3f0a8e1c5d72", {"text": "b"}),
        ),
        Step(
            "send",
            "client",
            _frame("session.turn.start", "0b7c3f1e-8a59-4c6e-9d2b-3f0a8e1c5d73", start),
        ),
        Step(
            "send",
            "observer",
            _frame("user.message", "0b7c3f1e-8a59-4c6e-9d2b-3f0a8e1c5d74", {"text": "c"}),
        ),
        Step("drop", "client"),
    ]
    text = await _play_on(Master(conformance_settings()), steps, "gen-busy")
    assert '"error_code":"busy"' in text
    assert '"status":"running"' in text
    assert '"status":"idle","stop_reason":"disconnected"' in text


async def test_a_window_of_never_does_not_skip_a_detached_participant() -> None:
    """A welcome's reattach_window_ms of -1 (never) is no window to race: the session runs."""
    start = _frame(
        "session.turn.start",
        "0b7c3f1e-8a59-4c6e-9d2b-3f0a8e1c5d77",
        {"turn_id": _TURN, "turn_index": 0},
    )
    steps = [Step("send", "client", start), Step("drop", "client"), Step("join", "edge1")]
    await _play_on(
        Master(conformance_settings(reattach_window_s=float("inf"))), steps, "gen-window-never"
    )
