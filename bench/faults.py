"""Seeded fault trials, long run: 1,000 trials (``--quick``: 100) on an in-process master.

Each trial (:func:`tests.reliability.faults.run_trial`) streams a client's turns to two
edges while a seeded plan drops the client and the edges mid-turn (TCP cut, no closing
handshake; the client resends what ``welcome.received`` says is missing as one
``session.history``), duplicates frames and delays them; then it checks that every
acknowledged frame survived, every client frame is logged once in production order, and
every edge's view and the master's state equal a replay of the log. Half the trials use
the default rates, half a heavy-drop plan (client drops on ~15 % of frames).

Redis restart and kill -9 of a node are hooks (``Target.faults``) for the multi-node work;
this run uses the memory store in one process, so plans never draw them. Aim: 0 failures.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from collections import Counter
from typing import Any, Final

import structlog

from ._report import environment, figure, figures_table, now_iso, table

__all__ = ["DESCRIPTION", "NAME", "markdown", "run"]

NAME: Final = "faults"
DESCRIPTION: Final = "1,000 seeded fault trials: drops mid-turn, duplicates, delays"

HEAVY: Final = {"drop_client": 0.15, "drop_edge": 0.1, "duplicate": 0.1}


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    from relay.config import Settings
    from relay.server import Master
    from tests.reliability.faults import FAULTS, InProcessTarget, run_trial

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    trials = 100 if args.quick else 1000
    key = "rk_bench_faults"
    master = Master(
        Settings(
            host="127.0.0.1",
            ws_port=0,
            http_port=0,
            api_keys=(f"default:{key}",),
            reattach_window_s=120.0,
            rate_frames_per_s=1e6,
            rate_bytes_per_s=1e10,
            node_id="m-faults",
        )
    )
    await master.start()
    target = InProcessTarget(master, key)
    faults: Counter[str] = Counter()
    failures: list[dict[str, Any]] = []
    frames = entries = 0
    started = time.perf_counter()
    try:
        for seed in range(trials):
            heavy = seed % 2 == 1
            result = await run_trial(target, seed, rates=HEAVY if heavy else None)
            faults.update(result.faults)
            frames += result.frames
            entries += result.log_entries
            if not result.ok:
                failures.append({"seed": seed, "heavy": heavy, "problems": result.problems[:3]})
            if seed % 50 == 49:
                # sessions of finished trials: delete them so the store stays small
                for sid in list(master.hub.sessions):
                    await master.hub.delete(sid, reason="master_request", deleted_by="master")
    finally:
        await master.stop()
    seconds = time.perf_counter() - started
    return {
        "benchmark": NAME,
        "command": "make bench ARGS=" + ('"faults --quick"' if args.quick else "faults"),
        "trials": trials,
        "failed": len(failures),
        "failures": failures[:10],
        "faults": dict(faults),
        "hooks_not_run": [f for f in FAULTS if f not in target.faults],
        "client_frames": frames,
        "log_entries": entries,
        "seconds": round(seconds, 1),
        "figures": [
            figure(
                f"fault trials ({trials:,})",
                trials - len(failures),
                f"of {trials:,} passed",
                aim="all pass",
                met=not failures,
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
    r = result
    lines = [
        f"# Seeded fault trials ({r['trials']:,})",
        "",
        figures_table(r["figures"]),
        table(
            ["what", "value"],
            [
                ["trials passed / failed", f"{r['trials'] - r['failed']:,} / {r['failed']}"],
                ["faults injected", ", ".join(f"{k} {v:,}" for k, v in r["faults"].items())],
                ["client frames streamed", f"{r['client_frames']:,}"],
                ["log entries checked", f"{r['log_entries']:,}"],
                ["hooks not run (multi-node work)", ", ".join(r["hooks_not_run"])],
                ["duration", f"{r['seconds']} s"],
            ],
            "lr",
        ),
        "Checks per trial: every acknowledged client frame is in the log; every client frame "
        "is logged exactly once, in production order; both edges' views (live frames and "
        "backlogs folded with `protocol.finalize.fold_entry`) and the master's state equal "
        "the fold of the log from seq 1. A failing seed reproduces with "
        "`run_trial(target, seed)` from tests/reliability/faults.py (odd seeds: heavy plan).",
        "",
    ]
    if r["failures"]:
        lines += ["Failures:", ""] + [
            f"- seed {f['seed']}{' (heavy)' if f['heavy'] else ''}: {f['problems']}"
            for f in r["failures"]
        ]
        lines.append("")
    lines += [f"Run {r['generated_at']}. Reproduce: `{r['command']}`.", ""]
    return "\n".join(lines)
