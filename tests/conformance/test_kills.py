"""Every case fails against our master when its kill is applied (tests/conformance/kills.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from conformance.case import CASES, all_cases
from conformance.runner import run_cases
from relay.server import Master
from tests.conformance.conftest import target_of
from tests.conformance.kills import KILLS

# A case whose kill removes a frame waits for it until this deadline; keep it short.
KILL_TIMEOUT_S = 2.0
# Cases whose rule takes its time on a correct master (a message held for the agent's run for
# 3 s, notes §17.3): a shorter deadline would fail them whatever the kill, proving nothing.
SLOW_CASE_TIMEOUT_S = {
    "notes-17.3/busy-after-hold": 6.0,
    "notes-17.3/first-edge-wins": 6.0,
}


def test_every_case_has_a_kill() -> None:
    """The kill table and the case registry name exactly the same cases."""
    registered = {c.id for c in all_cases()}
    assert registered - set(KILLS) == set(), "cases without a kill"
    assert set(KILLS) - registered == set(), "kills for unknown cases"


@pytest.mark.parametrize("case_id", sorted(KILLS))
async def test_kill_makes_the_case_fail(
    case_id: str,
    monkeypatch: pytest.MonkeyPatch,
    start_master: Callable[[], Awaitable[Master]],
) -> None:
    """The case's kill, applied to our master, makes the runner report the case as failing."""
    all_cases()
    case = CASES[case_id]
    KILLS[case_id](monkeypatch)
    master = await start_master()
    timeout = SLOW_CASE_TIMEOUT_S.get(case_id, KILL_TIMEOUT_S)
    (result,) = await run_cases(target_of(master), [case], timeout=timeout)
    expected = "WARN" if case.level == "SHOULD" else "FAIL"
    assert result.status == expected, f"{case.kill!r} did not fail the case: {result.details}"
