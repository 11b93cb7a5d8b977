"""Seeded kill -9 trials of ``rawp serve --store sqlite:…``: 200 (``--quick``: 20).

Each trial (:func:`tests.reliability.kill_trials.run_kill_trial`, the one
tests/e2e/test_durable.py runs twice) starts a master on a fresh SQLite file, opens a turn,
streams up to 200 text deltas to two edges and SIGKILLs the master after a seeded number of
them; it then restarts the master on the same file and checks: every frame an edge received
is in the log at the same seq, seqs are dense and every envelope whole, the client's frames
are a prefix of what it sent, the turn was finalized exactly once (a third start adds
nothing), a second ``rawp serve`` on the file is refused in one line, and the client's
reattach with its ``session.history`` unfinalizes the turn. Aim: every trial passes (notes
§16.2, seed 004).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Final

from ._report import environment, figure, figures_table, now_iso, table

__all__ = ["DESCRIPTION", "NAME", "markdown", "run"]

NAME: Final = "durable"
DESCRIPTION: Final = (
    "200 seeded kill -9 trials of rawp serve on SQLite: restart, finalize, reattach"
)


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    from tests.reliability.kill_trials import run_kill_trial

    trials = 20 if args.quick else 200
    failures: list[dict[str, Any]] = []
    sent = received = logged = 0
    started = time.perf_counter()
    for seed in range(trials):
        with tempfile.TemporaryDirectory(prefix="rawp-bench-kill-") as tmp:
            try:
                trial = await asyncio.wait_for(run_kill_trial(Path(tmp), seed), 120)
            except Exception as exc:
                detail = "".join(traceback.format_exception_only(exc)).strip()
                failures.append({"seed": seed, "problem": detail[:300]})
                continue
        sent += trial.sent
        received += trial.received_by_edges
        logged += trial.logged
    seconds = time.perf_counter() - started
    return {
        "benchmark": NAME,
        "command": "make bench ARGS=" + ('"durable --quick"' if args.quick else "durable"),
        "trials": trials,
        "failed": len(failures),
        "failures": failures[:10],
        "client_frames_sent": sent,
        "edge_frames_checked": received,
        "log_entries_after_restart": logged,
        "seconds": round(seconds, 1),
        "figures": [
            figure(
                f"kill -9 trials ({trials:,})",
                trials - len(failures),
                f"of {trials:,} passed",
                aim="all pass",
                met=not failures,
            )
        ],
        "environment": environment(),
        "generated_at": now_iso(),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the trials (see the module docstring)."""
    return asyncio.run(_run(args))


def markdown(result: dict[str, Any]) -> str:
    r = result
    lines = [
        f"# kill -9 trials on the SQLite store ({r['trials']:,})",
        "",
        figures_table(r["figures"]),
        table(
            ["what", "value"],
            [
                ["trials passed / failed", f"{r['trials'] - r['failed']:,} / {r['failed']}"],
                ["client frames sent", f"{r['client_frames_sent']:,}"],
                [
                    "frames edges received (each checked in the log)",
                    f"{r['edge_frames_checked']:,}",
                ],
                ["log entries after the restarts", f"{r['log_entries_after_restart']:,}"],
                ["duration", f"{r['seconds']} s"],
            ],
            "lr",
        ),
        "A failing seed reproduces with `run_kill_trial(directory, seed)` from "
        "tests/reliability/kill_trials.py.",
        "",
    ]
    if r["failures"]:
        lines += ["Failures:", ""] + [f"- seed {f['seed']}: {f['problem']}" for f in r["failures"]]
        lines.append("")
    lines += [f"Run {r['generated_at']}. Reproduce: `{r['command']}`.", ""]
    return "\n".join(lines)
