"""Latency client send → edge receive at a steady 5,000 frames/s: p50 / p99 / p99.9.

Three processes besides the relay: a client (``bench._loadgen pace``) that sends the
:class:`bench._workload.AgentStream` at 5,000 frames/s in ~1 ms ticks, stamping each frame
with the monotonic clock just before writing it (an extra envelope key, relayed untouched),
and one process with 3 edges (``bench._loadgen latency``) that subtract that stamp from the
clock when the message is parsed. Linux's CLOCK_MONOTONIC is shared by all processes, so
the difference is the one-way latency through the relay (both TCP hops included).
The first 0.5 s is not recorded (warm-up).

Relays: the baseline (:mod:`bench.baseline_relay`), the master with the memory store, with
the SQLite store (WAL, ``synchronous=FULL``: each batch is fsynced before delivery) and,
when available, with the Redis store (AOF fsync always: the write-ahead append is durable
before delivery, so its latency includes an fsync) and with the same store on a Redis whose
AOF is fsynced once a second (the trade-off operators choose: a Redis crash may lose the
last second of acknowledged frames). Aims: p50 ≤ 1 ms, p99 ≤ 5 ms.
The master's per-connection rate limit (default 2,000 frames/s) is raised for the run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from ._plot import percentile_curves
from ._procs import (
    UNTHROTTLED,
    Proc,
    redis_available,
    redis_server,
    start_baseline,
    start_master,
    start_worker,
)
from ._profile import pyspy_path, pyspy_record, summarise_collapsed
from ._report import (
    environment,
    figure,
    figures_table,
    markdown_footer,
    now_iso,
    relay_label,
    table,
)

__all__ = ["DESCRIPTION", "NAME", "markdown", "plot", "run"]

NAME: Final = "latency"
DESCRIPTION: Final = "client send → edge receive at 5,000 frames/s: p50/p99/p999"

RATE: Final = 5000
# The Redis store as the master wants it (AOF fsync on every write: an acknowledged frame
# survives a Redis crash) and, beside it, with the AOF fsynced once a second (what a Redis
# used by Centrifugo or AnyCable typically runs with: a crash can lose the last second).
EVERYSEC: Final = "redis-everysec"
AIM_P50_MS: Final = 1.0
AIM_P99_MS: Final = 5.0


async def _measure(
    variant: str,
    args: argparse.Namespace,
    workdir: Path,
    *,
    profile: Path | None = None,
    root: Path | None = None,
) -> dict[str, Any]:
    loop = getattr(args, "loop", "asyncio")
    duration = 3.0 if args.quick else 10.0
    redis_ctx = None
    if variant == "baseline":
        server: Proc = await start_baseline(loop=loop)
    elif variant == "memory":
        server = await start_master(UNTHROTTLED, loop=loop, root=root)
    elif variant == "sqlite":
        # a fresh file per round (notes §16.2: WAL, synchronous=FULL, the rawp serve default)
        db = workdir / f"sqlite-{time.monotonic_ns()}" / "rawp.db"
        server = await start_master([*UNTHROTTLED, "--store", f"sqlite:{db}"], loop=loop, root=root)
    else:
        fsync = "everysec" if variant == EVERYSEC else "always"
        redis_ctx = redis_server(workdir / f"redis-{time.monotonic_ns()}", fsync)
        handle = await redis_ctx.__aenter__()
        server = await start_master([*UNTHROTTLED, "--store", handle.url], loop=loop, root=root)
    sid = f"s-lat-{time.monotonic_ns()}"
    common = {"host": server.host, "port": server.port, "session_id": sid, "max_seconds": 120}
    try:
        client = await start_worker("pace", {**common, "rate": RATE, "duration_s": duration})
        await client.expect("ready", timeout=30)
        edges = await start_worker("latency", {**common, "edges": 3})
        await edges.expect("ready", timeout=30)
        await client.send(cmd="go")
        c0, t0 = server.cpu_seconds(), time.monotonic()
        await asyncio.sleep(0.5)
        await edges.send(cmd="record")
        sampler = None
        if profile is not None:
            sampler = asyncio.get_running_loop().create_task(
                pyspy_record(server.pid, duration - 1.0, profile)
            )
        done = await client.expect("done", timeout=duration + 60)
        c1, t1 = server.cpu_seconds(), time.monotonic()
        await asyncio.sleep(0.3)
        await edges.send(cmd="stop")
        result = await edges.expect("result", timeout=30)
        if sampler is not None:
            await sampler
        await client.send(cmd="close")
        await client.finish()
        await edges.finish()
        metrics = await server.metrics()
    finally:
        await server.stop()
        if redis_ctx is not None:
            await redis_ctx.__aexit__(None, None, None)
    lat = result["latency_us"]
    return {
        "variant": variant,
        "sent": done["sent"],
        "send_rate": round(done["sent"] / done["seconds"]),
        "client_errors": done["error_count"],
        "samples": int(lat["count"]),
        "per_edge": result["per_edge"],
        "p50_ms": lat["p50"] / 1000,
        "p99_ms": lat["p99"] / 1000,
        "p999_ms": lat["p999"] / 1000,
        "max_ms": lat["max"] / 1000,
        "mean_ms": lat["mean"] / 1000,
        "curve_ms": [[q, us / 1000] for q, us in result.get("curve_us", [])],
        "relay_cpu": round((c1 - c0) / (t1 - t0), 2),
        # where a Redis frame's time goes: its batch's append, from hand-off to durable reply
        **_append_figures(metrics),
    }


def _append_figures(metrics: dict[str, float]) -> dict[str, float]:
    appends = metrics.get("rawp_store_append_seconds_count", 0.0)
    if not appends:
        return {}
    return {
        "append_mean_ms": 1000 * metrics["rawp_store_append_seconds_sum"] / appends,
        "frames_per_append": metrics.get("rawp_frames_in_total", 0.0) / appends,
    }


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    variants = ["baseline", "memory", "sqlite"]
    redis_missing = redis_available()
    if redis_missing is None:
        variants += ["redis", EVERYSEC]
    env = environment()
    rounds = 1 if args.quick else 3
    per: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    profiles: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="rawp-bench-") as tmp:
        workdir = Path(tmp)
        for _ in range(rounds):  # alternating, so load from elsewhere hits every relay alike
            for variant in variants:
                per[variant].append(await _measure(variant, args, workdir))
        rows = [_median_row(per[v]) for v in variants]
        if not args.no_profile and pyspy_path() is not None:
            for row in rows[1:]:
                if row["p50_ms"] > AIM_P50_MS or row["p99_ms"] > AIM_P99_MS:
                    out = workdir / f"profile-{row['variant']}.txt"
                    await _measure(row["variant"], args, workdir, profile=out)
                    if out.exists():
                        profiles[row["variant"]] = summarise_collapsed(out, 25)
    base = rows[0]
    figures = []
    for row in rows[1:]:
        label = _label(row["variant"]).replace("master, ", "master (", 1) + ")"
        complete = row["client_errors"] == 0 and row["samples"] > 0
        for key, name, aim in (
            ("p50_ms", "p50", AIM_P50_MS),
            ("p99_ms", "p99", AIM_P99_MS),
            ("p999_ms", "p99.9", None),
        ):
            figures.append(
                figure(
                    f"latency {name}, {label}",
                    round(row[key], 3),
                    "ms",
                    baseline=round(base[key], 3),
                    baseline_label="minimal relay",
                    aim="" if aim is None else f"≤ {aim} ms",
                    met=None if aim is None else complete and row[key] <= aim,
                )
            )
    return {
        "benchmark": NAME,
        "command": "make bench ARGS=" + ('"latency --quick"' if args.quick else "latency"),
        "rate": RATE,
        "rounds": rounds,
        "rows": rows,
        "redis_skipped": redis_missing,
        "profiles": profiles,
        "figures": figures,
        "environment": env,
        "generated_at": now_iso(),
    }


def plot(result: dict[str, Any], directory: Path) -> dict[str, str]:
    """The latency percentile curve of each relay (the median round's), with the aims."""
    name = f"{NAME}.png"
    percentile_curves(
        directory / name,
        f"Latency client → edge at {result['rate']:,} frames/s (3 edges)",
        {_label(r["variant"]): r.get("curve_ms", []) for r in result["rows"]},
        aims=[(50, AIM_P50_MS, "aim p50"), (99, AIM_P99_MS, "aim p99")],
    )
    return {name: "latency percentiles per relay"}


def _label(variant: str) -> str:
    if variant == EVERYSEC:
        return "master, redis store, AOF fsync everysec"
    return relay_label(variant)


def _median_row(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One relay's rounds: the median of each figure, and each round's p99."""
    row = dict(rounds[len(rounds) // 2])
    for key in ("p50_ms", "p99_ms", "p999_ms", "max_ms", "mean_ms", "relay_cpu"):
        row[key] = statistics.median(r[key] for r in rounds)
    for key in ("append_mean_ms", "frames_per_append"):
        if all(key in r for r in rounds):
            row[key] = statistics.median(r[key] for r in rounds)
    row["samples"] = sum(r["samples"] for r in rounds)
    row["client_errors"] = sum(r["client_errors"] for r in rounds)
    row["rounds_p99_ms"] = [round(r["p99_ms"], 2) for r in rounds]
    row["rounds_p50_ms"] = [round(r["p50_ms"], 3) for r in rounds]
    return row


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure every relay (see the module docstring)."""
    return asyncio.run(_run(args))


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# Latency client → edge at {result['rate']:,} frames/s",
        "",
        figures_table(result["figures"]),
        table(
            [
                "relay",
                "sent/s",
                "samples",
                "p50 ms",
                "p99 ms",
                "p99.9 ms",
                "max ms",
                "p50 / p99 of each round",
                "relay CPU",
                "store append mean ms (frames per append)",
            ],
            [
                [
                    r["variant"] if r["variant"] == "baseline" else _label(r["variant"]),
                    r["send_rate"],
                    r["samples"],
                    round(r["p50_ms"], 3),
                    round(r["p99_ms"], 3),
                    round(r["p999_ms"], 3),
                    round(r["max_ms"], 2),
                    " · ".join(
                        f"{a} / {b}"
                        for a, b in zip(r["rounds_p50_ms"], r["rounds_p99_ms"], strict=True)
                    ),
                    f"{100 * r['relay_cpu']:.0f} %",
                    f"{r['append_mean_ms']:.2f} ({r['frames_per_append']:.1f})"
                    if "append_mean_ms" in r
                    else "–",
                ]
                for r in result["rows"]
            ],
        ),
        f"Samples are frames × 3 edges over {result.get('rounds', 1)} alternating round(s); "
        "each figure is the median over the rounds. One-way: the client stamps CLOCK_MONOTONIC "
        "just before the write, the edge reads it when the message is parsed (separate "
        "processes). The tail is sensitive to other load on this shared 2-core machine: the "
        "baseline's own p99 shows how much.",
        "",
    ]
    return "\n".join(lines + markdown_footer(result))
