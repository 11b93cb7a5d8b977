"""The suite's verdicts do not depend on how fast our master handles one connection vs another.

Random delays are injected into our master's connection handling (bench/conformance_determinism:
before each frame is handed to its session, each attach, each detach); every case must give
the same verdict in every run — PASS, against our master. ``make bench`` runs it 20 times
(``python -m bench conformance_determinism``); ``make test`` runs three seeds.
"""

from __future__ import annotations

import dataclasses
import functools

import pytest

import bench.conformance_determinism as determinism
from conformance.runner import Target
from relay.config import Settings
from tests.conformance.conftest import OTHER_WORKSPACE_KEY


def run_suite_with_delays(seed: int) -> dict[str, str]:
    """The bench's run, its master given a second workspace (notes-11/other-workspace-absent)."""
    settings = determinism._settings

    def with_other() -> Settings:
        base = settings()
        keys = (*base.api_keys, f"other:{OTHER_WORKSPACE_KEY}")
        return dataclasses.replace(base, api_keys=keys)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(determinism, "_settings", with_other)
        mp.setattr(
            determinism, "Target", functools.partial(Target, other_api_key=OTHER_WORKSPACE_KEY)
        )
        return determinism.run_suite_with_delays(seed)


SEEDS = (101, 202, 303)


@pytest.fixture(scope="module")
def baseline() -> dict[str, str]:
    """The verdicts of one run with delays (seed 0)."""
    return run_suite_with_delays(0)


@pytest.mark.parametrize("seed", SEEDS)
def test_same_verdicts_with_random_delays(seed: int, baseline: dict[str, str]) -> None:
    """A run with other random delays gives every case the same verdict, and all pass."""
    verdicts = run_suite_with_delays(seed)
    changed = {c: (baseline[c], v) for c, v in verdicts.items() if baseline.get(c) != v}
    assert not changed
    failing = {c: v for c, v in verdicts.items() if v != "PASS"}
    assert not failing
