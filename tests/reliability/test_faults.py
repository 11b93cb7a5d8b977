"""Seeded fault trials, a short slice (``make bench ARGS=faults`` runs 1,000).

Each trial drops the client and the edges mid-turn, duplicates and delays frames, then
checks that every acknowledged frame survived, every client frame is logged once in
production order, and every edge's view (and the master's) equals a replay of the log.
A failing seed reproduces with ``run_trial(target, seed)`` (tests/reliability/faults.py).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.reliability.faults import FAULTS, InProcessTarget, run_trial

_SETTINGS = {"reattach_window_s": 60.0, "rate_frames_per_s": 1e6, "rate_bytes_per_s": 1e10}


async def test_seeded_fault_trials(make_master: Any) -> None:
    """12 trials at the default fault rates, seeds 0–11."""
    master: Master = await make_master(**_SETTINGS)
    target = InProcessTarget(master, API_KEY)
    seen: Counter[str] = Counter()
    for seed in range(12):
        result = await run_trial(target, seed)
        assert result.ok, f"seed {seed}: {result.problems}"
        seen.update(result.faults)
    assert seen["drop_client"]
    assert seen["drop_edge"]
    assert seen["duplicate"]


async def test_seeded_fault_trials_under_heavy_drops(make_master: Any) -> None:
    """6 trials where the client drops on ~15 % of its frames."""
    master: Master = await make_master(**_SETTINGS)
    target = InProcessTarget(master, API_KEY)
    rates = {"drop_client": 0.15, "drop_edge": 0.1, "duplicate": 0.1}
    for seed in range(1000, 1006):
        result = await run_trial(target, seed, rates=rates)
        assert result.ok, f"seed {seed}: {result.problems}"
        assert result.faults["drop_client"] > 0


@pytest.mark.parametrize("fault", ["store_restart", "node_kill"])
def test_multi_node_faults_are_hooks_for_now(fault: str) -> None:
    """The in-process target cannot restart Redis or kill -9 a node: plans skip them."""
    assert fault in FAULTS
    assert fault not in InProcessTarget.faults
