"""One feature of our master switched off: only that feature's own cases fail (issue 20).

Each test switches features off in-process (tests/conformance/switches.py), runs every case
against the master and checks the runner's isolation: the feature's own cases (``checks``)
FAIL (WARN for a SHOULD), no other case fails, the cases that ``need`` it SKIP naming it, the
cases that ``use`` it PASS by their fallback or SKIP naming it, and the run's probes report it
missing (and only it) when some case relies on it (a feature only its own cases name, such as
``archived-sessions``, is never probed: its cases judge it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from conformance.case import all_cases
from conformance.runner import Prerequisite, run_cases
from relay.server import Master
from tests.conformance.conftest import target_of
from tests.conformance.switches import SWITCHES

# A case left waiting for a frame the switched-off feature would send waits this long.
TIMEOUT_S = 2.0

SWITCHED_OFF = [
    ("presence",),
    ("session-tokens",),
    ("rename-over-http",),
    ("rest-sessions",),
    ("archived-sessions",),
    ("presence", "rest-sessions"),
]


@pytest.mark.parametrize("features", SWITCHED_OFF, ids="+".join)
async def test_a_missing_feature_fails_only_its_own_cases(
    features: tuple[str, ...],
    monkeypatch: pytest.MonkeyPatch,
    start_master: Callable[[], Awaitable[Master]],
) -> None:
    """Its own cases fail; its dependents pass by fallback or skip naming it; nothing else fails."""
    for name in features:
        SWITCHES[name](monkeypatch)
    master = await start_master()
    found: dict[str, Prerequisite] = {}
    results = await run_cases(target_of(master), all_cases(), timeout=TIMEOUT_S, features=found)
    relied = {n for c in all_cases() for n in c.prerequisites}  # only these are probed
    assert {n for n, p in found.items() if not p.present} == set(features) & relied
    unexpected: list[str] = []
    for r in results:
        off = [n for n in r.case.prerequisites if n in features]
        if r.case.checks in features:
            if r.status not in ("FAIL", "WARN"):
                unexpected.append(f"{r.case.id} checks {r.case.checks} but is {r.status}")
        elif r.status in ("FAIL", "WARN"):
            unexpected.append(f"{r.case.id} failed: {r.details}")
        elif any(n in r.case.needs for n in off):
            if r.status != "SKIP" or not all(n in r.details for n in off if n in r.case.needs):
                unexpected.append(f"{r.case.id} needs {off}: {r.status} {r.details}")
        elif off and r.status == "SKIP" and not any(n in r.details for n in off):
            unexpected.append(f"{r.case.id} skipped without naming {off}: {r.details}")
        elif not off and r.status != "PASS":
            unexpected.append(f"{r.case.id} does not rely on {features}: {r.status} {r.details}")
    assert not unexpected, "\n".join(unexpected)
    own = [r for r in results if r.case.checks in features]
    assert own, f"no case checks {features}"


def test_every_feature_has_a_switch_a_probe_and_an_own_case() -> None:
    """Each runner feature can be switched off here, is probed, and some case checks it."""
    from conformance.case import FEATURES
    from conformance.probes import PROBES

    assert set(SWITCHES) == set(FEATURES) == set(PROBES)
    checked = {c.checks for c in all_cases()}
    assert set(FEATURES) <= checked
