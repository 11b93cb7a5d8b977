"""Wakes: time from a revisit's due time to its ``session.wake`` at the attached client.

notes §17.5: a client asks to be woken at ``at`` (``session.revisit.request``); when it comes
due the master logs ``session.wake`` and sends it to the attached client. Here 10,000 clients
(``--quick``: 1,000; ``--sessions N``), one session each, attached to ``rawp serve``, each ask
for one wake, the due times spread evenly over one minute that starts 5 s after all attached
("10,000 wakes due in the same minute"). A load process (:mod:`bench._loadgen` ``wake``)
records the wall-clock time each wake arrives; the lag is that minus its ``at`` (same
machine, same clock). Aim: p99 ≤ 1 s. Stores: memory, SQLite (``rawp serve``'s default) and
Redis on a redis-server of our own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

from ._procs import (
    UNTHROTTLED,
    percentiles,
    redis_available,
    redis_server,
    start_master,
    start_worker,
)
from ._report import environment, figure, figures_table, markdown_footer, now_iso, table

__all__ = ["DESCRIPTION", "NAME", "markdown", "run"]

NAME: Final = "wake_due"
DESCRIPTION: Final = "lag from due to session.wake: 10,000 wakes due in the same minute"

SPREAD_S: Final = 60.0
AIM_S: Final = 1.0


@contextlib.asynccontextmanager
async def _store(kind: str, directory: Path) -> AsyncIterator[list[str]]:
    if kind == "memory":
        yield ["--store", "memory"]
    elif kind == "sqlite":
        yield ["--store", f"sqlite:{directory / 'rawp.db'}"]
    else:
        async with redis_server(directory / "redis") as handle:
            yield ["--store", handle.url]


async def _measure(kind: str, n: int, workdir: Path) -> dict[str, Any]:
    directory = workdir / kind
    directory.mkdir()
    async with _store(kind, directory) as flags:
        server = await start_master(
            [*UNTHROTTLED, *flags], rawp_serve=True, stderr_path=directory / "log"
        )
        try:
            cfg = {
                "host": server.host,
                "port": server.port,
                "prefix": f"wk-{kind}",
                "count": n,
                "spread_ms": int(SPREAD_S * 1000),
                "max_seconds": 1800,
            }
            worker = await start_worker("wake", cfg)
            try:
                ready = await worker.expect("ready", timeout=600)
                first_ms = int((time.time() + 5) * 1000)  # the minute starts 5 s from now
                await worker.send(cmd="go", first_ms=first_ms)
                await worker.expect("requested", timeout=120)
                wait = first_ms / 1000 - time.time() + SPREAD_S + 120
                try:
                    result = await worker.expect("result", timeout=wait)
                except TimeoutError:
                    await worker.send(cmd="stop")
                    result = await worker.expect("result", timeout=60)
            finally:
                await worker.finish(timeout=30)
        finally:
            await server.stop()
    lags = result["lags_ms"]
    return {
        "store": kind,
        "wakes": n,
        "attached": ready["attached"],
        "attach_failures": ready["failure_examples"],
        "woken": result["woken"],
        "lag_ms": {k: round(v, 1) for k, v in percentiles(lags).items()},
    }


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    n = getattr(args, "sessions", None) or (1000 if args.quick else 10_000)
    env = environment()
    kinds = ["memory", "sqlite"]
    skipped = redis_available()
    if skipped is None:
        kinds.append("redis")
    rows = []
    with tempfile.TemporaryDirectory(prefix="rawp-bench-wake-") as tmp:
        for kind in kinds:
            rows.append(await _measure(kind, n, Path(tmp)))
    figures = [
        figure(
            f"wake lag p99, {n:,} wakes due in one minute, {r['store']} store",
            r["lag_ms"]["p99"] / 1000,
            "s",
            baseline=r["lag_ms"]["p50"] / 1000,
            baseline_label="p50, same run",
            aim=f"≤ {AIM_S:g} s, all woken",
            met=r["woken"] == n and r["lag_ms"]["p99"] <= AIM_S * 1000,
        )
        for r in rows
    ]
    words = ["wake_due"] + ([f"--sessions {n}"] if getattr(args, "sessions", None) else [])
    if args.quick and not getattr(args, "sessions", None):
        words.append("--quick")
    return {
        "benchmark": NAME,
        "command": "make bench ARGS=" + (f'"{" ".join(words)}"' if len(words) > 1 else NAME),
        "wakes": n,
        "rows": rows,
        "figures": figures,
        "redis_skipped": skipped,
        "environment": env,
        "generated_at": now_iso(),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure every store (see the module docstring)."""
    return asyncio.run(_run(args))


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# Wakes: {result['wakes']:,} due in the same minute",
        "",
        figures_table(result["figures"]),
        table(
            ["store", "clients attached", "woken", "lag p50 ms", "p99 ms", "max ms"],
            [
                [
                    r["store"],
                    r["attached"],
                    r["woken"],
                    r["lag_ms"]["p50"],
                    r["lag_ms"]["p99"],
                    r["lag_ms"]["max"],
                ]
                for r in result["rows"]
            ],
        ),
        "One session per client, each client attached to `rawp serve` and asking for one "
        f"wake; due times spread evenly over {SPREAD_S:g} s. Lag = when the client read "
        "its `session.wake` − the `at` it asked for (one machine, one clock).",
        "",
    ]
    return "\n".join(lines + markdown_footer(result))
