"""What presence costs an attach (issue 16): the master with and without it, beside the minimal
server, in one run.

``bench.storm`` measures the master's attach rate against a minimal websockets server (a
hello answered with a welcome, nothing else). This benchmark shows where the difference goes:
the same alternating attach rounds (``bench.storm``'s generator, at most 100 handshakes in
flight, 1,000 edges a round) against three servers — the master; the same master started with
``--experiment-no-presence`` (it logs and delivers no presence change: no longer RAWP, as
nobody learns who is attached, a measurement only); the minimal server — for sessions of 1,
10, 100 and 1,000 edges, on the loop ``--loop`` picks and then on the other one.

An attach's presence is the ``session.presence`` its arrival logs and delivers to the
session's other participants: one logged frame and one socket write per recipient below 8
participants, a coalesced frame per step above (docs/protocol.md §5 item 11). Its price is
the master's CPU per attach minus the master-without-presence's; the ratio without presence
is the attach rate the rest of the attach path reaches against the minimal server.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Any, Final

from ._procs import start_baseline, start_master
from ._report import environment, figure, figures_table, markdown_footer, now_iso, table
from .storm import RATE_WINDOW_S, Contender, alternating_rounds, other_loop, rate_master_flags

__all__ = ["DESCRIPTION", "NAME", "markdown", "run"]

NAME: Final = "presence_price"
DESCRIPTION: Final = "what presence costs an attach: the master with and without it vs minimal"

EDGES: Final = 1000  # attaches per round
SERVERS: Final = ("master", "no_presence", "minimal")


async def _measure(loop: str, rounds: int) -> list[dict[str, Any]]:
    """Per audience: each server's median rate and CPU per attach over alternating rounds."""
    flags = rate_master_flags()
    servers = {
        "master": Contender(await start_master(flags, control=True, loop=loop), False),
        "no_presence": Contender(
            await start_master(flags, control=True, loop=loop, no_presence=True), False
        ),
        "minimal": Contender(await start_baseline(loop=loop), True),
    }
    try:
        rows = []
        for eps, got in (await alternating_rounds(servers, EDGES, rounds)).items():
            row: dict[str, Any] = {"edges_per_session": eps, "rounds": rounds}
            for name in SERVERS:
                row[name] = round(statistics.median(r for r, _ in got[name]))
                row[f"{name}_cpu_ms"] = round(statistics.median(c for _, c in got[name]), 3)
            row["price_cpu_ms"] = round(row["master_cpu_ms"] - row["no_presence_cpu_ms"], 3)
            row["ratio"] = round(row["master"] / row["minimal"], 2)
            row["ratio_without_presence"] = round(row["no_presence"] / row["minimal"], 2)
            rows.append(row)
        return rows
    finally:
        for contender in servers.values():
            await contender.proc.stop()


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    env = environment()
    loop = getattr(args, "loop", "asyncio")
    rounds = 2 if getattr(args, "quick", False) else max(1, min(int(args.rounds), 5))
    by_loop = {loop: await _measure(loop, rounds)}
    other = other_loop(loop)
    if other is not None:
        by_loop[other] = await _measure(other, rounds)
    figures = [
        figure(
            f"presence's CPU per attach, sessions of {_edges(r['edges_per_session'])} ({name})",
            r["price_cpu_ms"],
            "ms",
            baseline=r["minimal_cpu_ms"],
            baseline_label="the minimal server's whole attach",
            note=f"{r['ratio']}× the minimal server's rate; {r['ratio_without_presence']}× "
            "without presence",
        )
        for name, rows in by_loop.items()
        for r in rows
    ]
    return {
        "benchmark": NAME,
        "command": "make bench ARGS="
        + ('"presence_price --quick"' if getattr(args, "quick", False) else NAME),
        "loop": loop,
        "edges_per_round": EDGES,
        "by_loop": by_loop,
        "figures": figures,
        "environment": env,
        "generated_at": now_iso(),
    }


def _edges(n: int) -> str:
    return f"{n:,} edge" + ("" if n == 1 else "s")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the benchmark (see the module docstring)."""
    return asyncio.run(_run(args))


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# What presence costs an attach (issue 16)",
        "",
        f"`{result['command']}` — {result['edges_per_round']:,} edges attach per round, at most "
        "100 handshakes in flight; rounds alternate between the master, the same master "
        "without presence (`--experiment-no-presence`: a measurement, not RAWP) and the "
        "minimal websockets server, each once every server is idle after the last round's "
        f"edges expired (reattach window {RATE_WINDOW_S:g} s); medians quoted. *Price* = the "
        "master's CPU per attach minus the master-without-presence's.",
        "",
        figures_table(result["figures"]),
    ]
    for loop, rows in result["by_loop"].items():
        lines += [
            f"## {loop}",
            "",
            table(
                [
                    "edges per session",
                    "attaches/s: master / without presence / minimal",
                    "CPU ms per attach: master / without presence / minimal",
                    "presence's CPU ms per attach",
                    "ratio to minimal: master / without presence",
                ],
                [
                    [
                        f"{r['edges_per_session']:,}",
                        f"{r['master']:,} / {r['no_presence']:,} / {r['minimal']:,}",
                        f"{r['master_cpu_ms']} / {r['no_presence_cpu_ms']} / {r['minimal_cpu_ms']}",
                        r["price_cpu_ms"],
                        f"{r['ratio']}× / {r['ratio_without_presence']}×",
                    ]
                    for r in rows
                ],
                "rllrl",
            ),
        ]
    lines += markdown_footer(result)
    return "\n".join(lines)
