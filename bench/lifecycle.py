"""Lifecycle: what detached sessions cost, and how fast their windows end (notes §17.1).

A session whose agent left waits for it as long as a person would (7 days on a durable
store), so a master holds many detached sessions. For each store (memory, SQLite — ``rawp
serve``'s default durable store, 7-day window — and Redis on a redis-server of our own):

* **Size.** ``rawp serve`` itself; a load process (:mod:`bench._loadgen` ``detach``) makes N
  detached sessions through the master's own path — a client connects, sends a hello that
  creates its session, waits for the welcome and closes 1000 — 200 connections at a time.
  RSS per detached session = (master RSS after − before) / N, both read once RSS stopped
  moving; store size per session = (bytes after − before) / N (SQLite: the database file,
  WAL and shared memory; Redis: ``used_memory``), with the rows (SQLite, per table) or keys
  (Redis) the sessions left. The memory store's own window is 120 s, shorter than making
  100,000 sessions takes, so it runs with ``--reattach-window 1h``.
* **Expiry sweep.** The master as ``rawp serve`` builds it (:mod:`bench._master`, for its
  control channel) with ``--reattach-window 1h``; N detached sessions made as above; then
  every armed deadline is moved to one instant 2 s ahead (``due_all``: windows that end at
  once, as after an outage that dropped every agent at the same moment). Measured: the time
  from that instant until every session ended (no session left loaded, no deadline left),
  and the master's responsiveness meanwhile: an HTTP ``GET /v1/sessions/{id}`` of another
  session every 20 ms, p50/p99/max during the sweep beside the same probe in the 3 s
  before it (the baseline, same run, same process). A cProfile window covers the sweep.

``--sessions N`` sets N (default 10,000; ``--quick``: 2,000). The 100,000 figure in
``bench/results/lifecycle.md`` was made with ``make bench ARGS="lifecycle --sessions 100000"``.

Time from due to ``session.wake``: not measured here yet (see the report's section).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import sqlite3
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

from ._procs import (
    API_KEY,
    UNTHROTTLED,
    Proc,
    percentiles,
    redis_available,
    redis_server,
    start_master,
    start_worker,
)
from ._profile import markdown_profile, summarise_cprofile
from ._report import environment, figure, figures_table, markdown_footer, now_iso, table

__all__ = ["DESCRIPTION", "NAME", "markdown", "run"]

NAME: Final = "lifecycle"
DESCRIPTION: Final = "RSS and store size per detached session; expiry sweep of N at once"

CONCURRENCY: Final = 200
PROBE_EVERY_S: Final = 0.02
DUE_AHEAD_S: Final = 2.0
SWEEP_LIMIT_S: Final = 1800.0
PROBE_SESSION: Final = "lc-probe"
BEFORE_SESSIONS: Final = 2_000
"""Sessions of the ``--before`` comparison (the old sweep ends 100 a second)."""


async def _settled_rss(server: Proc, seconds: float = 5.0) -> int:
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


@contextlib.asynccontextmanager
async def _store(kind: str, directory: Path) -> AsyncIterator[tuple[list[str], Any]]:
    """The master's store flags and a handle to read its size (a path, a Redis URL, None)."""
    if kind == "memory":
        yield ["--store", "memory"], None
    elif kind == "sqlite":
        path = directory / "rawp.db"
        yield ["--store", f"sqlite:{path}"], path
    else:
        async with redis_server(directory / "redis") as handle:
            yield ["--store", handle.url], handle.url


def _sqlite_size(path: Path) -> dict[str, Any]:
    files = [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]
    size = sum(f.stat().st_size for f in files if f.exists())
    rows: dict[str, int] = {}
    if path.exists():
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            db.execute("PRAGMA busy_timeout = 5000")
            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            for t in tables:
                rows[t] = db.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
    return {"bytes": size, "rows": rows}


def _redis_size(url: str) -> dict[str, Any]:
    import redis

    client = redis.Redis.from_url(url)
    try:
        info = client.info("memory")
        return {"bytes": int(info["used_memory"]), "keys": int(client.dbsize())}
    finally:
        client.close()


def _redis_due_all(url: str, at_ms: int) -> int:
    """Every reattach deadline in Redis moved to ``at_ms`` (what ``due_all`` does in-process
    for the other stores)."""
    import redis

    from relay.store.redis.keys import DEADLINES

    client = redis.Redis.from_url(url)
    try:
        members = client.zrange(DEADLINES, 0, -1)
        for i in range(0, len(members), 2000):
            client.zadd(DEADLINES, dict.fromkeys(members[i : i + 2000], at_ms))
        return len(members)
    finally:
        client.close()


async def _store_size(kind: str, handle: Any) -> dict[str, Any]:
    if kind == "sqlite":
        return await asyncio.to_thread(_sqlite_size, handle)
    if kind == "redis":
        return await asyncio.to_thread(_redis_size, handle)
    return {}


async def _detach(server: Proc, prefix: str, count: int) -> dict[str, Any]:
    """N detached sessions through the master's path (see the module docstring)."""
    cfg = {
        "host": server.host,
        "port": server.port,
        "prefix": prefix,
        "count": count,
        "concurrency": CONCURRENCY,
        "max_seconds": 3600,
    }
    worker = await start_worker("detach", cfg)
    try:
        done = await worker.expect("done", timeout=3600)
    finally:
        await worker.finish(timeout=30)
    if done["failures"]:
        raise RuntimeError(f"detach: {done['failures']} failed, e.g. {done['failure_examples']}")
    return {"seconds": round(done["seconds"], 1), "rate": round(count / done["seconds"])}


def _size_of(kind: str, n: int, rss: tuple[int, int], store: tuple[Any, Any]) -> dict[str, Any]:
    before, after = store
    out: dict[str, Any] = {
        "store": kind,
        "sessions": n,
        "rss_before_kib": rss[0],
        "rss_after_kib": rss[1],
        "kib_per_session": round((rss[1] - rss[0]) / n, 2),
    }
    if after:
        out["store_bytes_before"] = before["bytes"]
        out["store_bytes_after"] = after["bytes"]
        out["bytes_per_session"] = round((after["bytes"] - before["bytes"]) / n)
        if "rows" in after:
            out["rows_per_session"] = {
                t: round((c - before["rows"].get(t, 0)) / n, 2) for t, c in after["rows"].items()
            }
        else:
            out["keys_per_session"] = round((after["keys"] - before["keys"]) / n, 2)
    return out


def _get(url: str) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {API_KEY}"})
    with urllib.request.urlopen(request, timeout=30) as r:
        r.read()
        return int(r.status)


class _Probe:
    """GET one session every PROBE_EVERY_S; each answer's latency with its start time."""

    def __init__(self, http_url: str) -> None:
        self.url = f"{http_url.rstrip('/')}/v1/sessions/{PROBE_SESSION}"
        self.samples: list[tuple[float, float]] = []  # (wall time sent, seconds)
        self.failures = 0

    async def run(self) -> None:
        while True:
            sent = time.time()
            started = time.perf_counter()
            try:
                status = await asyncio.to_thread(_get, self.url)
                if status != 200:
                    self.failures += 1
            except Exception:
                self.failures += 1
            self.samples.append((sent, time.perf_counter() - started))
            await asyncio.sleep(PROBE_EVERY_S)

    def between(self, start: float, end: float) -> dict[str, float]:
        ms = [1000 * s for t, s in self.samples if start <= t < end]
        return {k: round(v, 2) for k, v in percentiles(ms).items()}


def _create_probe_session(http_url: str) -> None:
    body = json.dumps({"session_id": PROBE_SESSION}).encode()
    request = urllib.request.Request(
        f"{http_url.rstrip('/')}/v1/sessions",
        data=body,
        headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        r.read()


async def _measure(
    kind: str, n: int, workdir: Path, loop: str, profile: bool, *, root: Path | None = None
) -> dict[str, Any]:
    """One master: N detached sessions (their size), then every window ends at once."""
    label = "before" if root is not None else "after"
    directory = workdir / f"{kind}-{label}-{n}"
    directory.mkdir()
    size: dict[str, Any] = {}
    async with _store(kind, directory) as (flags, handle):
        window = ["--reattach-window", "1h"] if kind == "memory" else []  # else 7 days
        server = await start_master(
            [*UNTHROTTLED, *flags, *window],
            control=True,
            loop=loop,
            max_seconds=SWEEP_LIMIT_S + 3600,
            stderr_path=directory / "log",
            root=root,
        )
        probe_task: asyncio.Task[None] | None = None
        try:
            await asyncio.to_thread(_create_probe_session, server.http_url)
            rss_before = await _settled_rss(server)
            store_before = await _store_size(kind, handle)
            made = await _detach(server, "lc", n)
            deadline = time.monotonic() + 120
            while True:  # every detach recorded (its deadline armed) before they are moved
                stats = json.loads(await server.command("stats"))
                if stats["participants"] == 0 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.5)
            if root is None:
                rss_after = await _settled_rss(server)
                store_after = await _store_size(kind, handle)
                size = _size_of(kind, n, (rss_before, rss_after), (store_before, store_after))
                size["create"] = made
            probe = _Probe(server.http_url)
            probe_task = asyncio.get_running_loop().create_task(probe.run())
            await asyncio.sleep(3.0)
            due = time.time() + DUE_AHEAD_S
            if kind == "redis":  # from here: 100,000 members are more than one store call
                moved = await asyncio.to_thread(_redis_due_all, handle, int(due * 1000))
            else:
                answer = json.loads(await server.command(f"due_all {int(due * 1000)}", 300))
                if "moved" not in answer:
                    raise RuntimeError(f"due_all: {answer}")
                moved = answer["moved"]
            if profile:
                await server.command("profile start")
            progress: list[tuple[float, int]] = []
            first_end: float | None = None
            ended_at: float | None = None
            while time.time() < due + SWEEP_LIMIT_S:
                await asyncio.sleep(0.25)
                loaded = json.loads(await server.command("loaded", timeout=300))["sessions"] - 1
                now = time.time()
                if now >= due:
                    progress.append((round(now - due, 2), n - loaded))
                    if first_end is None and loaded < n:
                        first_end = now
                if loaded <= 0:
                    ended_at = now
                    break
            profile_summary: dict[str, Any] = {}
            if profile:
                path = directory / "sweep.prof"
                await server.command(f"profile stop {path}", timeout=300)
                profile_summary = await asyncio.to_thread(summarise_cprofile, path)
            end = ended_at if ended_at is not None else time.time()
            probe_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await probe_task
            before = probe.between(due - DUE_AHEAD_S - 0.9, due)
            during = probe.between(due, end)
        finally:
            if probe_task is not None:
                probe_task.cancel()
            await server.stop(timeout=60)
    return {
        "store": kind,
        "tree": label,
        "sessions": n,
        "size": size,
        "create": made,
        "deadlines_moved": moved,
        "all_ended": ended_at is not None,
        "sweep_s": round(end - due, 2),
        "first_end_s": None if first_end is None else round(first_end - due, 2),
        "ended_per_s": round(n / max(end - due, 1e-9)),
        "probe_before_ms": before,
        "probe_during_ms": during,
        "probe_failures": probe.failures,
        "progress": progress[:: max(1, len(progress) // 40)],
        "profile": profile_summary,
    }


def _tree(ref: str, into: Path) -> str:
    """The tree of ``ref`` with this checkout's bench package (its control commands)."""
    from .before_after import _export

    commit = _export(ref, into)
    shutil.rmtree(into / "bench")
    shutil.copytree(Path(__file__).resolve().parent, into / "bench")
    return commit


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    n = getattr(args, "sessions", None) or (2000 if args.quick else 10_000)
    before_ref = getattr(args, "before", None)
    n_before = min(n, BEFORE_SESSIONS)
    sizes = {"memory": n, "sqlite": n, "redis": getattr(args, "redis_sessions", None) or n}
    loop = getattr(args, "loop", "asyncio")
    env = environment()
    kinds = ["memory", "sqlite"]
    skipped = redis_available()
    if skipped is None:
        kinds.append("redis")
    runs: list[dict[str, Any]] = []
    commit = None
    with tempfile.TemporaryDirectory(prefix="rawp-bench-lc-") as tmp:
        workdir = Path(tmp)
        root = None
        if before_ref:
            root = workdir / "before-tree"
            root.mkdir()
            commit = await asyncio.to_thread(_tree, before_ref, root)
        for kind in kinds:
            m = sizes[kind]
            small = min(m, n_before)
            if root is not None:
                runs.append(await _measure(kind, small, workdir, loop, False, root=root))
                if small != m:
                    runs.append(await _measure(kind, small, workdir, loop, False))
            runs.append(await _measure(kind, m, workdir, loop, not args.no_profile))
    main = [r for r in runs if r["tree"] == "after" and r["sessions"] == sizes[r["store"]]]
    figures = []
    for r in main:
        s = r["size"]
        figures.append(
            figure(
                f"RSS per detached session, {s['store']} store ({s['sessions']:,})",
                s["kib_per_session"],
                "KiB",
                baseline=round(s["rss_before_kib"] / 1024, 1),
                baseline_label="MiB RSS before, same run",
            )
        )
        if "bytes_per_session" in s:
            figures.append(
                figure(
                    f"store bytes per detached session, {s['store']} ({s['sessions']:,})",
                    s["bytes_per_session"],
                    "B",
                    baseline=round(s["store_bytes_before"] / 1024, 1),
                    baseline_label="KiB before, same run",
                )
            )
    for r in main:
        old = next((b for b in runs if b["tree"] == "before" and b["store"] == r["store"]), None)
        new_small = next(
            (
                b
                for b in runs
                if b["tree"] == "after"
                and b["store"] == r["store"]
                and b["sessions"] == min(r["sessions"], n_before)
            ),
            None,
        )
        if old is not None and new_small is not None:
            figures.append(
                figure(
                    f"expiry sweep, {old['sessions']:,} windows ending at once, {r['store']} store",
                    new_small["sweep_s"],
                    "s",
                    baseline=old["sweep_s"],
                    baseline_label=f"before ({before_ref}), same run",
                )
            )
        if old is None or old["sessions"] != r["sessions"]:
            figures.append(
                figure(
                    f"expiry sweep, {r['sessions']:,} windows ending at once, {r['store']} store",
                    r["sweep_s"],
                    "s",
                    note="all ended" if r["all_ended"] else "NOT all ended",
                )
            )
        figures.append(
            figure(
                f"GET p99 during the sweep, {r['store']} store ({r['sessions']:,})",
                r["probe_during_ms"].get("p99"),
                "ms",
                baseline=r["probe_before_ms"].get("p99"),
                baseline_label="p99 before the sweep, same run",
            )
        )
    words = ["lifecycle"]
    if getattr(args, "sessions", None):
        words.append(f"--sessions {n}")
    if getattr(args, "redis_sessions", None):
        words.append(f"--redis-sessions {args.redis_sessions}")
    elif args.quick:
        words.append("--quick")
    if before_ref:
        words.append(f"--before {before_ref}")
    command = "make bench ARGS=" + (f'"{" ".join(words)}"' if len(words) > 1 else "lifecycle")
    return {
        "benchmark": NAME,
        "command": command,
        "sessions": n,
        "before": None if before_ref is None else {"ref": before_ref, "commit": commit},
        "runs": runs,
        "figures": figures,
        "redis_skipped": skipped,
        "environment": env,
        "generated_at": now_iso(),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure every store (see the module docstring)."""
    return asyncio.run(_run(args))


def markdown(result: dict[str, Any]) -> str:
    n = result["sessions"]
    runs = result["runs"]
    main = [r for r in runs if r["tree"] == "after" and r["size"]]
    main = [
        r
        for r in main
        if r["sessions"] == max(x["sessions"] for x in main if x["store"] == r["store"])
    ]
    before = result.get("before")
    lines = [
        f"# Lifecycle: up to {n:,} detached sessions per store",
        "",
        figures_table(result["figures"]),
        "## Size of a detached session",
        "",
        table(
            [
                "store",
                "made in s (sessions/s)",
                "RSS before MiB",
                "RSS after MiB",
                "KiB per session",
                "store bytes per session",
                "rows / keys per session",
            ],
            [
                [
                    s["store"],
                    f"{s['create']['seconds']} ({s['create']['rate']:,})",
                    round(s["rss_before_kib"] / 1024, 1),
                    round(s["rss_after_kib"] / 1024, 1),
                    s["kib_per_session"],
                    s.get("bytes_per_session", "– (in RSS)"),
                    ", ".join(f"{k} {v}" for k, v in s.get("rows_per_session", {}).items() if v)
                    or (f"{s['keys_per_session']} keys" if "keys_per_session" in s else "–"),
                ]
                for s in (r["size"] for r in main)
            ],
        ),
        "Sessions made through the master's own path (a client hello with `create`, the "
        f"welcome, close 1000), {CONCURRENCY} connections at a time, by one load process. "
        "Store default windows (SQLite, Redis: 7 days); memory: `--reattach-window 1h`.",
        "",
        "## Expiry sweep: every window ends at the same instant",
        "",
        table(
            [
                "store",
                "master",
                "sessions",
                "sweep s",
                "first ended s",
                "ended per s",
                "GET p50 / p99 / max ms before",
                "GET p50 / p99 / max ms during",
                "probe failures",
            ],
            [
                [
                    r["store"] + ("" if r["all_ended"] else " (not all ended)"),
                    "this tree"
                    if r["tree"] == "after"
                    else f"before: {before['ref'] if before else '?'}",
                    r["sessions"],
                    r["sweep_s"],
                    r["first_end_s"],
                    r["ended_per_s"],
                    _ms(r["probe_before_ms"]),
                    _ms(r["probe_during_ms"]),
                    r["probe_failures"],
                ]
                for r in runs
            ],
        ),
        "Times from the common due instant (the deadline loop ticks every second, so the "
        "first session ends up to 1 s after it). The probe is `GET /v1/sessions/{id}` of a "
        f'live session every {int(PROBE_EVERY_S * 1000)} ms; "before" is the same probe '
        "in the seconds before the due instant."
        + (
            f' "before: {before["ref"]}" is commit {before["commit"][:10]}\'s master '
            "(with this tree's bench package), measured in the same run."
            if before
            else ""
        ),
        "",
        "## Time from due to session.wake",
        "",
        *_wake_section(),
    ]
    for r in main:
        if r.get("profile"):
            lines.append(
                markdown_profile(f"cProfile of the sweep, {r['store']} store", r["profile"])
            )
    return "\n".join(lines + markdown_footer(result))


def _wake_section() -> list[str]:
    """The wake figures of ``bench/results/wake_due.json`` (its own run, its own command)."""
    path = Path(__file__).resolve().parent / "results" / "wake_due.json"
    try:
        wake = json.loads(path.read_text())
    except (OSError, ValueError):
        return [
            "Not measured yet: `make bench ARGS=wake_due` (10,000 wakes due in the same "
            "minute, p99 of wake received by the attached client − due time, aim ≤ 1 s).",
            "",
        ]
    return [
        f"From `bench/results/wake_due.md` ({wake['generated_at']}), reproduce with "
        f"`{wake['command']}`:",
        "",
        figures_table(wake["figures"]),
    ]


def _ms(p: dict[str, float]) -> str:
    if not p.get("count"):
        return "–"
    return f"{p['p50']} / {p['p99']} / {p['max']}"
