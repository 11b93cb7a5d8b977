"""``rawp serve --store sqlite:…`` killed with SIGKILL mid-turn, restarted on the same file.

The trial (tests/reliability/kill_trials.py): every frame an edge received is in the log with
the same seq, nothing is half-written, the interrupted turn is finalized exactly once across
restarts, the client's reattach unfinalizes it, and a second ``rawp serve`` on the file is
refused in one line. ``make bench ARGS=durable`` runs it at 200 seeded kill points.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from relay.cli import announced_urls
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


def test_rawp_serve_keeps_its_data_in_rawp_data_by_default(tmp_path: Path) -> None:
    """Without --store, rawp serve creates ./rawp-data/rawp.db (notes §16.2) and says sqlite."""
    rawp = Path(sys.executable).with_name("rawp")
    argv = [str(rawp), "serve", "--ws-port", "0", "--http-port", "0", "--log-format", "json"]
    env = {k: v for k, v in os.environ.items() if k != "RAWP_STORE"}
    with subprocess.Popen(
        argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    ) as proc:
        try:
            assert proc.stdout is not None
            ready, _, _ = select.select([proc.stdout], [], [], 30)
            assert ready, "rawp serve did not start"
            assert announced_urls(proc.stdout.readline().decode()) is not None
            assert (tmp_path / "rawp-data" / "rawp.db").is_file()
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
    assert b'"store": "sqlite"' in err
