"""``rawp serve --store sqlite:…`` killed with SIGKILL mid-turn, restarted on the same file.

The trial (tests/reliability/kill_trials.py): every frame an edge received is in the log with
the same seq, nothing is half-written, the interrupted turn is finalized exactly once across
restarts, the client's reattach unfinalizes it, and a second ``rawp serve`` on the file is
refused in one line. ``make bench ARGS=durable`` runs it at 200 seeded kill points.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.kill_trials import run_kill_trial

__all__: list[str] = []

pytestmark = pytest.mark.timeout(90)


@pytest.mark.parametrize("seed", [1, 7])
async def test_kill_9_mid_turn_keeps_every_acknowledged_frame(tmp_path: Path, seed: int) -> None:
    """SIGKILL mid-stream: edges' frames are all logged at their seqs, the turn is finalized
    once across restarts, and the client's reattach unfinalizes it."""
    trial = await run_kill_trial(tmp_path, seed)
    assert trial.received_by_edges > 0
    assert trial.logged >= 2
