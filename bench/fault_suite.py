"""The Jepsen-style fault suite, long run: 500 seeded trials (``--quick``: 25).

Every trial (:func:`tests.faults.harness.run_trial`) is a new session on two real
``rawp serve`` nodes sharing one real redis-server, each node behind a TCP fault proxy. While
the client streams turns and two edges watch, a seeded plan injects one to three faults:
SIGSTOP/SIGCONT of a node (past ``--node-dead-after``, so it is declared dead and must be
fenced, or briefly), kill -9 and restart of a node, SIGSTOP/SIGCONT (also past the nodes'
Redis timeout) and kill -9 of redis-server, and through the proxy: cut connections, delayed
replies, replies lost after the script ran; plus client and edge drops. The checker then
proves on the log as Redis holds it: every frame the client produced logged exactly once in
production order (until producer acks exist, "acknowledged" = an edge received it / a reader
sees it in the log), no client frame after a finalization before the client's history, every
view equal to a replay of the log, every ``welcome.received`` right. Aim: 0 failures.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Final

from ._procs import redis_available
from ._report import environment, figure, figures_table, now_iso, table

__all__ = ["DESCRIPTION", "NAME", "markdown", "run"]

NAME: Final = "fault_suite"
DESCRIPTION: Final = "500 seeded Jepsen-style trials: real nodes, Redis, a fault proxy"

_SEED_BASE: Final = 10_000  # apart from the seeds of the make-test slice


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    from tests.faults.harness import FAULTS, FaultCluster, run_trial

    logging.getLogger("redis").setLevel(logging.ERROR)
    trials = 25 if args.quick else 500
    faults: Counter[str] = Counter()
    failures: list[dict[str, Any]] = []
    frames = entries = welcomes = noted = 0
    durations: list[float] = []
    skipped = redis_available()
    started = time.perf_counter()
    if skipped is None:
        with tempfile.TemporaryDirectory(prefix="rawp-faults-") as directory:
            cluster = FaultCluster(Path(directory))
            await cluster.start()
            try:
                for i in range(trials):
                    seed = _SEED_BASE + i
                    count = random.Random(seed).randint(1, 3)
                    began = time.perf_counter()
                    result = await run_trial(cluster, seed, fault_count=count)
                    durations.append(time.perf_counter() - began)
                    faults.update(result.faults)
                    frames += result.frames
                    entries += result.log_entries
                    welcomes += result.welcomes
                    noted += bool(result.notes)
                    if not result.ok:
                        failures.append(
                            {
                                "seed": seed,
                                "faults": dict(result.faults),
                                "problems": result.problems[:3],
                            }
                        )
            finally:
                await cluster.stop()
        trials_run = trials
    else:
        trials_run = 0
    seconds = time.perf_counter() - started
    never = [f for f in FAULTS if not faults[f]]
    return {
        "benchmark": NAME,
        "command": "make bench ARGS=" + ('"fault_suite --quick"' if args.quick else "fault_suite"),
        "trials": trials_run,
        "skipped": skipped,
        "failed": len(failures),
        "failures": failures[:10],
        "faults": dict(faults.most_common()),
        "faults_never_drawn": never,
        "client_frames": frames,
        "log_entries": entries,
        "reattach_welcomes_checked": welcomes,
        "trials_with_client_refusals": noted,
        "trial_seconds_max": round(max(durations, default=0.0), 1),
        "seconds": round(seconds, 1),
        "figures": [
            figure(
                f"fault-suite trials ({trials_run:,})",
                trials_run - len(failures),
                f"of {trials_run:,} passed",
                aim="all pass",
                met=not failures and trials_run > 0,
                note=", ".join(f"{k} {v:,}" for k, v in faults.most_common()),
            )
        ],
        "environment": environment(),
        "generated_at": now_iso(),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the trials (see the module docstring)."""
    return asyncio.run(_run(args))


def markdown(result: dict[str, Any]) -> str:
    """The results page."""
    r = result
    if r.get("skipped"):
        return f"# Fault suite\n\nSkipped: {r['skipped']}.\n"
    lines = [
        f"# Fault suite: {r['trials']:,} seeded trials on real nodes and Redis",
        "",
        figures_table(r["figures"]),
        table(
            ["what", "value"],
            [
                ["trials passed / failed", f"{r['trials'] - r['failed']:,} / {r['failed']}"],
                ["faults injected", ", ".join(f"{k} {v:,}" for k, v in r["faults"].items())],
                ["faults never drawn", ", ".join(r["faults_never_drawn"]) or "none"],
                ["client frames streamed", f"{r['client_frames']:,}"],
                ["log entries checked", f"{r['log_entries']:,}"],
                ["reattach welcomes checked", f"{r['reattach_welcomes_checked']:,}"],
                [
                    "trials where the client got a refusal (reported, not a failure)",
                    f"{r['trials_with_client_refusals']:,}",
                ],
                ["longest trial", f"{r['trial_seconds_max']} s"],
                ["duration", f"{r['seconds']} s"],
            ],
            "lr",
        ),
        "Checks per trial (tests/faults/harness.py): every client frame logged exactly once, "
        "in production order; no client frame after a finalization until the client's "
        "history; every edge's view and a new edge's backlog view equal the replay of the "
        "log; every `welcome.received` names the last client frame the log held. A failing "
        "seed reproduces with `run_trial(cluster, seed, fault_count=n)`.",
        "",
    ]
    if r["failures"]:
        lines += ["Failures:", ""] + [
            f"- seed {f['seed']} {f['faults']}: {f['problems']}" for f in r["failures"]
        ]
        lines.append("")
    lines += [f"Run {r['generated_at']}. Reproduce: `{r['command']}`.", ""]
    return "\n".join(lines)
