"""The whole conformance suite against our master, started in-process with a short window."""

from __future__ import annotations

import asyncio

import pytest

from conformance.case import all_cases
from conformance.runner import Result, run_cases
from relay.server import Master
from tests.conformance.conftest import conformance_settings, target_of

# Cases that fail against our master because of a bug in relay/ (reported to the lead); each
# is an expected failure of the test until the master is fixed.
KNOWN_MASTER_BUGS: dict[str, str] = {}

# Cases our master's test configuration cannot run, with the honest reason; empty because the
# test master runs with a short reattach window and hello timeout.
ALLOWED_SKIPS: dict[str, str] = {}

CASE_TIMEOUT_S = 5.0


async def _run_all() -> dict[str, Result]:
    master = Master(conformance_settings())
    await master.start()
    try:
        results = await run_cases(target_of(master), all_cases(), timeout=CASE_TIMEOUT_S)
    finally:
        await master.stop()
    return {r.case.id: r for r in results}


@pytest.fixture(scope="module")
def results() -> dict[str, Result]:
    """One run of every case against one master, shared by this module's tests."""
    return asyncio.run(_run_all())


def _params() -> list[object]:
    params: list[object] = []
    for case in all_cases():
        marks = []
        if case.id in KNOWN_MASTER_BUGS:
            marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_MASTER_BUGS[case.id]))
        params.append(pytest.param(case.id, marks=marks, id=case.id))
    return params


@pytest.mark.parametrize("case_id", _params())
def test_case_passes_against_our_master(case_id: str, results: dict[str, Result]) -> None:
    """The case passes against our master (or is skipped for an allowed, stated reason)."""
    result = results[case_id]
    if case_id in ALLOWED_SKIPS:
        assert result.status == "SKIP", result.details
        return
    assert result.status == "PASS", f"{result.status}: {result.details}"
