"""Before / after: the master of an earlier commit beside this checkout's, in the same run.

A move that must not change speed (issue 14's relay redesign: "throughput and latency within
noise of before") is judged by measuring both sides under the same load from elsewhere on
the machine. ``--before REF`` (default :data:`BEFORE`, the last commit before the redesign's
session and coordinator steps) is exported with ``git archive`` into a temporary directory,
and its master runs from there with this interpreter and these dependencies; the load
generators are this checkout's, so both masters see exactly the same clients.

Rounds alternate before/after (the order flips every round) for: throughput of the
closed-loop client → 3 edges stream on the memory and the SQLite store (:mod:`bench.throughput`),
and latency at 5,000 frames/s on the memory store (:mod:`bench.latency`). Reported: the
median of each side, the after/before ratio, and the relay's CPU µs per frame, which other
load disturbs much less than frames/s. Aim: every ratio within ±10 % (the spread of repeated
rounds on this 2-core machine).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import Any, Final

from ._procs import ROOT
from ._report import environment, figure, figures_table, now_iso, table
from .latency import _measure as latency_round
from .throughput import _round as throughput_round

__all__ = ["BEFORE", "DESCRIPTION", "NAME", "markdown", "run"]

NAME: Final = "before_after"
DESCRIPTION: Final = "the master before the relay redesign vs now: throughput and latency, same run"

BEFORE: Final = "c895e28"
"""main before issue 14's session package, coordinator and store/redis split."""

TOLERANCE: Final = 0.10


def _export(ref: str, into: Path) -> str:
    """Write the tree of ``ref`` into ``into``; returns the full commit id."""
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit], cwd=ROOT, check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return commit


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    rounds = 2 if args.quick else 5
    env = environment()
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {
        kind: {"before": [], "after": []}
        for kind in ("throughput-memory", "throughput-sqlite", "latency-memory")
    }
    with tempfile.TemporaryDirectory(prefix="rawp-before-") as directory:
        tree = Path(directory) / "tree"
        tree.mkdir()
        commit = await asyncio.to_thread(_export, args.before or BEFORE, tree)
        work = Path(directory) / "work"
        work.mkdir()
        for n in range(rounds):
            sides = [("before", tree), ("after", None)]
            for side, root in sides if n % 2 == 0 else sides[::-1]:
                for store in ("memory", "sqlite"):
                    r = await throughput_round(store, args, work, root=root)
                    samples[f"throughput-{store}"][side].append(r)
                r = await latency_round("memory", args, work, root=root)
                samples["latency-memory"][side].append(r)
    rows: list[dict[str, Any]] = []
    figures = []
    for kind, by_side in samples.items():
        if kind.startswith("throughput"):
            keys = [("frames_per_s", "frames/s", True), ("relay_us_per_frame", "µs/frame", False)]
        else:
            keys = [("p50_ms", "ms", False), ("p99_ms", "ms", False)]
        for key, unit, higher_is_better in keys:
            before = statistics.median(r[key] for r in by_side["before"])
            after = statistics.median(r[key] for r in by_side["after"])
            ratio = after / before if before else 0.0
            rows.append(
                {
                    "measure": f"{kind} {key}",
                    "unit": unit,
                    "before": before,
                    "after": after,
                    "ratio": round(ratio, 3),
                    "before_rounds": [r[key] for r in by_side["before"]],
                    "after_rounds": [r[key] for r in by_side["after"]],
                }
            )
            worse = (1 - ratio) if higher_is_better else (ratio - 1)
            figures.append(
                figure(
                    f"{kind} {key}, after vs before",
                    round(after, 3),
                    unit,
                    baseline=round(before, 3),
                    baseline_label=f"before ({commit[:7]})",
                    aim=f"within {TOLERANCE:.0%} (is {ratio:.3f}×)",
                    met=worse <= TOLERANCE,
                )
            )
    return {
        "benchmark": NAME,
        "command": "make bench ARGS="
        + ('"before_after --quick"' if args.quick else "before_after"),
        "before": commit,
        "rounds": rounds,
        "rows": rows,
        "figures": figures,
        "environment": env,
        "finished": now_iso(),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure both masters (see the module docstring)."""
    return asyncio.run(_run(args))


def _short(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def markdown(r: dict[str, Any]) -> str:
    """The report: medians of both sides, the ratio, every round."""
    lines = [
        f"# Before / after: the master at {r['before'][:7]} vs this checkout",
        "",
        f"`{r['command']}` — {r['rounds']} rounds per side, alternating; medians.",
        "",
        figures_table(r["figures"]),
        "",
        table(
            ["measure", "before", "after", "after/before", "before rounds", "after rounds"],
            [
                [
                    f"{row['measure']} ({row['unit']})",
                    round(row["before"], 3),
                    round(row["after"], 3),
                    row["ratio"],
                    ", ".join(_short(x) for x in row["before_rounds"]),
                    ", ".join(_short(x) for x in row["after_rounds"]),
                ]
                for row in r["rows"]
            ],
        ),
        "",
        "Machine: {cpus} CPUs, Python {python}, load average at start {load}.".format(
            cpus=r["environment"].get("cpus"),
            python=r["environment"].get("python"),
            load=" / ".join(r["environment"].get("loadavg_at_start", [])),
        ),
        "",
    ]
    return "\n".join(lines)
