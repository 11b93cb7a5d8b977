"""Every case fails against our master when its kill is applied (tests/conformance/kills.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from conformance.case import CASES, all_cases
from conformance.runner import run_cases
from relay.server import Master
from tests.conformance.conftest import target_of
from tests.conformance.kills import KILLS

# A case whose kill removes a frame waits for it until this deadline; keep it short. (A case
# whose rule holds a message gets that hold on top: ``Case.holds_s``.)
KILL_TIMEOUT_S = 2.0


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
    (result,) = await run_cases(target_of(master), [case], timeout=KILL_TIMEOUT_S)
    expected = "WARN" if case.level == "SHOULD" else "FAIL"
    assert result.status == expected, f"{case.kill!r} did not fail the case: {result.details}"
