"""``python -m bench._master [rawp serve flags] [--loop L] [--profile P] [--control]``.

The master exactly as ``rawp serve`` builds it (same flags, same :class:`relay.server.Master`),
with what benchmarks need around it:

* ``--loop asyncio|uvloop`` — the event loop (``rawp serve`` uses asyncio's default);
* ``--profile PATH`` — cProfile the whole run, stats written to PATH at exit;
* ``--control`` — line commands on stdin, one answer line each on stdout:
  ``dump SESSION PATH`` (the session log's metadata as JSON lines: seq, type, sender_role,
  exclude, edges_only, message_id), ``gc`` (collect, answer RSS), ``stats`` (sessions,
  participants, slow consumers), ``snapshot NAME`` / ``diff A B TOP`` (with
  ``--tracemalloc``: Python allocations grown between two snapshots, by file:line),
  ``profile start`` / ``profile stop PATH`` (cProfile a window, stats written to PATH),
  ``loaded`` (sessions loaded, nothing else), ``due_all AT_MS`` (every armed reattach
  deadline moved to AT_MS: windows that end at once, :mod:`bench.lifecycle`), ``stop``;
  stdin closing stops the master too;
* ``--max-seconds N`` — stop by itself after N seconds whatever happens;
* ``--experiment-no-presence`` — log no presence at all (attaches, detaches, expiries): not
  RAWP any more (nobody learns who is attached), only to measure what presence costs
  (:mod:`bench.presence_price`).

Prints ``RAWP master: ws URL  http URL`` once listening, like ``rawp serve``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import json
import sys
from pathlib import Path
from typing import Any

from relay import heap
from relay.cli import event_loop_factory
from relay.config import add_serve_arguments, settings_from_args
from relay.logs import configure_logging
from relay.server import Master

from ._procs import raise_nofile, rss_kib

_SNAPSHOTS: dict[str, Any] = {}
_WINDOW_PROFILE: list[cProfile.Profile] = []  # the ``profile start`` window, while one is open


async def _control(master: Master, stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = (await reader.readline()).decode().strip()
        if not line:
            if reader.at_eof():
                stop.set()
                return
            continue
        words = line.split()
        try:
            answer = await _command(master, words, stop)
        except Exception as exc:  # answer the error, keep serving
            answer = {"error": repr(exc)}
        print(json.dumps(answer), flush=True)


async def _command(master: Master, words: list[str], stop: asyncio.Event) -> dict[str, Any]:
    import os

    hub = master.hub
    if words[0] == "dump":
        session_id, path = words[1], words[2]
        entries = await master.store.read(session_id)
        rows = [
            [e.seq, e.type, e.sender_role, e.exclude, e.edges_only, e.message_id] for e in entries
        ]
        text = "".join(json.dumps(row) + "\n" for row in rows)
        await asyncio.to_thread(Path(path).write_text, text)
        return {"ok": "dump", "entries": len(entries)}
    if words[0] == "gc":
        gc.collect()
        return {"ok": "gc", "rss_kib": rss_kib(os.getpid())}
    if words[0] == "stats":
        participants = sum(len(s.participants) for s in hub.sessions.values())
        queued = [
            q.outbox.queued_bytes for s in hub.sessions.values() for q in s.participants.values()
        ]
        return {
            "ok": "stats",
            "sessions": len(hub.sessions),
            "participants": participants,
            "max_queued_bytes": max(queued, default=0),
            "slow_consumers": hub.metrics.slow_consumers._value.get(),
            "rss_kib": rss_kib(os.getpid()),
        }
    if words[0] == "snapshot":
        import tracemalloc

        gc.collect()
        _SNAPSHOTS[words[1]] = tracemalloc.take_snapshot()
        return {"ok": "snapshot", "traced_kib": tracemalloc.get_traced_memory()[0] // 1024}
    if words[0] == "diff":
        a, b, top = _SNAPSHOTS[words[1]], _SNAPSHOTS[words[2]], int(words[3])
        stats = b.compare_to(a, "lineno")
        total = sum(s.size_diff for s in stats)
        rows = [
            [
                f"{_relative(s.traceback[0].filename)}:{s.traceback[0].lineno}",
                s.size_diff,
                s.count_diff,
            ]
            for s in stats[:top]
        ]
        return {"ok": "diff", "total_bytes": total, "top": rows}
    if words[0] == "profile" and words[1] == "start" and not _WINDOW_PROFILE:
        _WINDOW_PROFILE.append(cProfile.Profile())
        _WINDOW_PROFILE[0].enable()
        return {"ok": "profile"}
    if words[0] == "profile" and words[1] == "stop" and _WINDOW_PROFILE:
        profiler = _WINDOW_PROFILE.pop()
        profiler.disable()
        profiler.dump_stats(words[2])
        return {"ok": "profile", "path": words[2]}
    if words[0] == "loaded":  # cheap enough to poll while 100,000 sessions end
        return {"ok": "loaded", "sessions": len(hub.sessions)}
    if words[0] == "due_all":
        return {"ok": "due_all", "moved": await _due_all(master, int(words[1]))}
    if words[0] == "stop":
        stop.set()
        return {"ok": "stop"}
    return {"error": f"unknown command {words[0]!r}"}


async def _main(args: argparse.Namespace) -> None:
    settings = settings_from_args(args)
    configure_logging(settings.log_format, settings.log_level)
    master = Master(settings)
    await master.start()
    heap.settle()  # as `rawp serve` does once started
    print(f"RAWP master: ws {master.ws_url}  http {master.http_url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    import signal

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks = []
    if args.control:
        tasks.append(loop.create_task(_control(master, stop)))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), args.max_seconds)
    for task in tasks:
        task.cancel()
    await master.stop()


async def _due_all(master: Master, at_ms: int) -> int:
    """Move every armed deadline of the store to ``at_ms``; returns how many (bench only: it
    reaches into each backend, as no store API lists deadlines)."""
    from relay.store.base import Deadline
    from relay.store.memory import MemoryStore
    from relay.store.redis.keys import DEADLINES
    from relay.store.redis.store import RedisStore
    from relay.store.sqlite.store import SqliteStore

    store = master.store
    if isinstance(store, MemoryStore):
        armed = list(store._deadlines.values())
        for d in armed:
            moved = Deadline(session_id=d.session_id, participant_id=d.participant_id, due_ms=at_ms)
            await store.set_deadline(moved)
        return len(armed)
    if isinstance(store, SqliteStore):
        moved: int = await store._write(
            lambda db: db.execute("UPDATE deadlines SET due_ms = ?", (at_ms,)).rowcount
        )
        return moved
    if isinstance(store, RedisStore):
        members = await store._client.zrange(DEADLINES, 0, -1)
        for i in range(0, len(members), 5000):
            await store._client.zadd(DEADLINES, {m: at_ms for m in members[i : i + 5000]})
        return len(members)
    raise RuntimeError(f"due_all: unknown store {type(store).__name__}")


_REPO_ROOT = str(Path(__file__).resolve().parent.parent) + "/"


def _silence_presence() -> None:
    """Every presence change is dropped instead of logged and delivered (the experiment)."""
    from relay.session.roster import Roster

    async def announce(self: Roster, record: Any, state: str) -> None:
        return None

    Roster.announce = announce  # type: ignore[method-assign]


def _relative(filename: str) -> str:
    """A traced file's path inside site-packages or this checkout, for short report rows."""
    return filename.split("site-packages/")[-1].removeprefix(_REPO_ROOT)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench._master")
    add_serve_arguments(parser)
    parser.add_argument("--profile", type=Path, default=None)
    parser.add_argument("--control", action="store_true")
    parser.add_argument("--max-seconds", type=float, default=900.0)
    parser.add_argument("--tracemalloc", action="store_true", help="trace Python allocations")
    parser.add_argument("--experiment-no-presence", action="store_true")
    args = parser.parse_args()
    if args.experiment_no_presence:
        _silence_presence()
    if args.tracemalloc:
        import tracemalloc

        tracemalloc.start(1)
    raise_nofile()
    factory = event_loop_factory(args.loop)  # --loop comes with the serve flags
    profiler = cProfile.Profile() if args.profile else None
    if profiler is not None:
        profiler.enable()
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(_main(args))
    finally:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(args.profile)


if __name__ == "__main__":
    main()
