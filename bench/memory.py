"""Memory: RSS per idle attached edge at 10,000 edges on one master process.

The master runs as ``rawp serve`` itself (memory store, default flags). A client process
creates 100 sessions and stays attached to each; the master's RSS is read from
/proc/PID/status (VmRSS) after a pause. Then two edge processes attach 10,000 edges,
100 per session (spread over sessions so presence — broadcast to every participant of a
session — stays 100²/2 deliveries per session rather than 10,000²/2), every edge reading
whatever it is sent; after a pause the RSS is read again. RSS per edge = the difference /
10,000. It covers everything an attached edge costs the process: the connection (picows'
protocol, transport and read buffer, the asyncio transport, relay/ws.py's ``Connection``),
the participant, its outbox, its record in the store, and the ``session.presence`` entry its
attach appended to the log. Kernel socket buffers are not in RSS.

Baseline: :mod:`bench.baseline_relay` with the same 100 clients and 10,000 edges (a
websockets connection, a handler coroutine and a set entry each). Aim: ≤ 20 KiB per edge.
``--quick``: 2,000 edges.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any, Final

from ._procs import Proc, start_baseline, start_master, start_worker
from ._report import environment, figure, figures_table, markdown_footer, now_iso, table

__all__ = ["DESCRIPTION", "NAME", "markdown", "run"]

NAME: Final = "memory"
DESCRIPTION: Final = "RSS per idle attached edge at 10,000 edges on one master process"

SESSIONS: Final = 100
AIM_KIB: Final = 20.0


async def _settled_rss(server: Proc, seconds: float = 3.0) -> int:
    """RSS after it stopped moving (or after ``seconds``)."""
    await asyncio.sleep(1.0)
    last = server.rss_kib()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        now = server.rss_kib()
        if abs(now - last) < 64:
            return now
        last = now
    return last


async def _measure(variant: str, edges: int, loop: str) -> dict[str, Any]:
    traced = variant == "traced"
    if variant == "baseline":
        server: Proc = await start_baseline(loop=loop)
    elif traced:
        server = await start_master(
            ["--max-edges-per-session", "1000"], control=True, tracemalloc=True
        )
    else:
        server = await start_master(["--max-edges-per-session", "1000"], rawp_serve=True)
    diff: dict[str, Any] = {}
    run_id = time.monotonic_ns()
    sessions = [f"s-mem-{run_id}-{i}" for i in range(SESSIONS)]
    common = {"host": server.host, "port": server.port, "max_seconds": 600}
    workers = []
    try:
        rss_start = server.rss_kib()
        clients = await start_worker(
            "idle", {**common, "sessions": sessions, "edges_per_session": 1, "role": "client"}
        )
        workers.append(clients)
        ready = await clients.expect("ready", timeout=120)
        if ready["attached"] != SESSIONS:
            raise RuntimeError(f"clients: {ready}")
        before = await _settled_rss(server)
        if traced:
            await server.command("snapshot before")
        per_session = edges // SESSIONS
        half = SESSIONS // 2
        started = time.monotonic()
        edge_workers = [
            await start_worker(
                "idle",
                {**common, "sessions": part, "edges_per_session": per_session, "concurrency": 100},
            )
            for part in (sessions[:half], sessions[half:])
        ]
        workers += edge_workers
        attached = 0
        failures: list[str] = []
        for w in edge_workers:
            got = await w.expect("ready", timeout=600)
            attached += got["attached"]
            failures += got["failure_examples"]
        attach_s = time.monotonic() - started
        after = await _settled_rss(server)
        if traced:
            await server.command("snapshot after")
            diff = json.loads(await server.command("diff before after 15"))
        still_open = 0
        for w in edge_workers:
            await w.send(cmd="stop")
            still_open += (await w.expect("result", timeout=60))["still_open"]
        await clients.send(cmd="stop")
    finally:
        for w in workers:
            await w.finish(timeout=20)
        await server.stop()
    return {
        "variant": variant,
        "edges": attached,
        "still_open_at_end": still_open,
        "failure_examples": failures[:3],
        "attach_s": round(attach_s, 1),
        "rss_start_kib": rss_start,
        "rss_before_kib": before,
        "rss_after_kib": after,
        "kib_per_edge": round((after - before) / max(attached, 1), 2),
        "tracemalloc": diff,
    }


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    edges = 2000 if args.quick else 10_000
    loop = getattr(args, "loop", "asyncio")
    env = environment()
    rows = [await _measure("baseline", edges, loop), await _measure("master", edges, loop)]
    base, master = rows
    if not args.no_profile and master["kib_per_edge"] > AIM_KIB:
        rows.append(await _measure("traced", edges, loop))
    complete = master["edges"] == edges and master["still_open_at_end"] == edges
    figures = [
        figure(
            f"RSS per idle attached edge ({edges:,} edges)",
            master["kib_per_edge"],
            "KiB",
            baseline=base["kib_per_edge"],
            baseline_label="minimal relay, per connection",
            aim=f"≤ {AIM_KIB:.0f} KiB",
            met=complete and master["kib_per_edge"] <= AIM_KIB,
        )
    ]
    return {
        "benchmark": NAME,
        "command": "make bench ARGS=" + ('"memory --quick"' if args.quick else "memory"),
        "sessions": SESSIONS,
        "rows": rows,
        "figures": figures,
        "environment": env,
        "generated_at": now_iso(),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure both relays (see the module docstring)."""
    return asyncio.run(_run(args))


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Memory per idle attached edge",
        "",
        figures_table(result["figures"]),
        table(
            [
                "relay",
                "edges attached",
                "open at the end",
                "attach time s",
                "RSS at start MiB",
                "with clients MiB",
                "with edges MiB",
                "KiB per edge",
            ],
            [
                [
                    "master (`rawp serve`, memory store)"
                    if r["variant"] == "master"
                    else "baseline",
                    r["edges"],
                    r["still_open_at_end"],
                    r["attach_s"],
                    round(r["rss_start_kib"] / 1024, 1),
                    round(r["rss_before_kib"] / 1024, 1),
                    round(r["rss_after_kib"] / 1024, 1),
                    r["kib_per_edge"],
                ]
                for r in result["rows"]
                if r["variant"] != "traced"
            ],
        ),
        f"{result['sessions']} sessions, each with its client attached, edges spread evenly. "
        "RSS from /proc/PID/status after it stopped moving.",
        "",
    ]
    return "\n".join(lines + markdown_footer(result))
