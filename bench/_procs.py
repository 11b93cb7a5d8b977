"""Processes of a benchmark: the master (or the baseline relay), load generators, Redis.

Every process a benchmark starts is its child, dies with it (``PR_SET_PDEATHSIG``), has
its file-descriptor limit raised to the hard limit, and listens on or talks to 127.0.0.1
only. The master runs as ``python -m bench._master`` (``rawp serve``'s flags plus profiling
and a control channel) or as ``rawp serve`` itself; load generators run as
``python -m bench._loadgen ROLE`` and speak JSON lines on stdin/stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import math
import os
import resource
import signal
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from relay.cli import announced_urls

__all__ = [
    "API_KEY",
    "ROOT",
    "Proc",
    "Worker",
    "cpu_seconds",
    "percentile_curve",
    "percentiles",
    "raise_nofile",
    "redis_available",
    "redis_server",
    "rss_kib",
    "start_baseline",
    "start_master",
    "start_worker",
]

ROOT: Final = Path(__file__).resolve().parent.parent
API_KEY: Final = "rk_bench_key"
PYTHON: Final = sys.executable
_CLK_TCK: Final = os.sysconf("SC_CLK_TCK")
# Bench masters must not throttle the load they are asked to carry.
UNTHROTTLED: Final = ("--rate-frames", "100000000", "--rate-bytes", "100000000000")


def raise_nofile() -> int:
    """Raise RLIMIT_NOFILE to the hard limit in this process; returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return hard
    return soft


def _child_setup() -> None:  # runs in the child between fork and exec
    raise_nofile()
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: die with the benchmark


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB (/proc/PID/status VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used by ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def percentiles(values: Sequence[float], qs: Sequence[float] = (50, 99, 99.9)) -> dict[str, float]:
    """Nearest-rank percentiles (``p50``, ``p99``, ``p99.9`` → ``p999``) plus max and count."""
    data = sorted(values)
    out: dict[str, float] = {"count": len(data)}
    for q in qs:
        key = "p" + (f"{q:g}".replace(".", ""))
        if not data:
            out[key] = math.nan
            continue
        rank = max(1, math.ceil(q / 100 * len(data)))
        out[key] = data[rank - 1]
    out["max"] = data[-1] if data else math.nan
    out["mean"] = sum(data) / len(data) if data else math.nan
    return out


def percentile_curve(values: Sequence[float], qs: Sequence[float]) -> list[list[float]]:
    """``[[q, nearest-rank percentile q], ...]`` (empty without values): a curve to plot."""
    data = sorted(values)
    if not data:
        return []
    return [[q, data[max(1, math.ceil(q / 100 * len(data))) - 1]] for q in qs]


@dataclass
class Proc:
    """A server child process and where it listens."""

    process: asyncio.subprocess.Process
    ws_url: str
    http_url: str = ""
    label: str = ""
    stderr_path: Path | None = None
    _stdout_lines: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def host(self) -> str:
        return urlsplit(self.ws_url).hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        return urlsplit(self.ws_url).port or 0

    def rss_kib(self) -> int:
        return rss_kib(self.pid)

    async def metrics(self) -> dict[str, float]:
        """The master's Prometheus samples without labels, by name (empty for the baseline)."""
        if not self.http_url:
            return {}

        def fetch() -> str:
            with urllib.request.urlopen(self.http_url.rstrip("/") + "/metrics", timeout=5) as r:
                return str(r.read().decode())

        samples: dict[str, float] = {}
        for line in (await asyncio.to_thread(fetch)).splitlines():
            name, _, value = line.partition(" ")
            if line and not line.startswith("#") and "{" not in name:
                with contextlib.suppress(ValueError):
                    samples[name] = float(value)
        return samples

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    async def command(self, line: str, timeout: float = 60.0) -> str:
        """Send a control line (``bench._master --control``) and return its answer line."""
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(line.encode() + b"\n")
        await self.process.stdin.drain()
        answer = await asyncio.wait_for(self.process.stdout.readline(), timeout)
        return answer.decode().strip()

    async def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM (ordered shutdown), SIGKILL after ``timeout``."""
        p = self.process
        if p.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(p.wait(), timeout)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                await p.wait()
        return p.returncode


async def _spawn(
    argv: Sequence[str], *, stderr_path: Path | None, root: Path | None = None
) -> asyncio.subprocess.Process:
    stderr: Any = asyncio.subprocess.DEVNULL
    handle = None
    if stderr_path is not None:
        handle = stderr_path.open("wb")
        stderr = handle
    try:
        return await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            cwd=ROOT if root is None else root,
            # ``root``: another tree of the project (bench.before_after); its packages first
            env=None if root is None else {**os.environ, "PYTHONPATH": str(root)},
            preexec_fn=_child_setup,
            limit=1 << 24,
        )
    finally:
        if handle is not None:
            handle.close()


async def _announced(process: asyncio.subprocess.Process, prefix: str, timeout: float) -> list[str]:
    """The words of the first stdout line starting with ``prefix``; for ``RAWP master:``, a
    master's announcement in either log format, as ``[ws_url, http_url]``."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            process.kill()
            raise RuntimeError(f"no '{prefix}' line within {timeout} s")
        line = (await asyncio.wait_for(process.stdout.readline(), left)).decode()
        if not line:
            raise RuntimeError(f"process exited ({await process.wait()}) before '{prefix}'")
        if prefix == "RAWP master:" and (urls := announced_urls(line)) is not None:
            return list(urls)
        if line.startswith(prefix):
            return line.split()


async def start_master(
    extra: Sequence[str] = (),
    *,
    rawp_serve: bool = False,
    loop: str = "asyncio",
    profile: Path | None = None,
    control: bool = False,
    max_seconds: float = 900.0,
    stderr_path: Path | None = None,
    tracemalloc: bool = False,
    root: Path | None = None,
    no_presence: bool = False,
    wrapper: Sequence[str] = (),
) -> Proc:
    """A master on free 127.0.0.1 ports with API key :data:`API_KEY`, log level warning.

    ``root``: run the master of another tree of the project (an exported commit) with this
    interpreter and its dependencies, instead of this checkout's.

    ``rawp_serve`` runs the ``rawp serve`` command itself; otherwise ``bench._master``
    (same flags, plus ``--loop``, ``--profile``, ``--control``, ``--max-seconds``;
    ``no_presence``: ``--experiment-no-presence``, see :mod:`bench._master`).
    ``wrapper``: a command the interpreter runs under (``valgrind …``: :mod:`bench._instructions`).
    """
    common = [
        "--host", "127.0.0.1", "--ws-port", "0", "--http-port", "0",
        "--api-key", f"default:{API_KEY}", "--log-level", "warning", "--log-format", "json",
    ]  # fmt: skip
    if "--store" not in extra:
        common += ["--store", "memory"]  # `rawp serve`'s default is a SQLite file
    if rawp_serve:
        argv = [str(Path(PYTHON).parent / "rawp"), "serve", *common, *extra]
    else:
        argv = [PYTHON, "-m", "bench._master", *common, *extra, "--loop", loop]
        argv += ["--max-seconds", str(max_seconds)]
        if profile is not None:
            argv += ["--profile", str(profile)]
        if control:
            argv.append("--control")
        if tracemalloc:
            argv.append("--tracemalloc")
        if no_presence:
            argv.append("--experiment-no-presence")
    process = await _spawn([*wrapper, *argv], stderr_path=stderr_path, root=root)
    ws_url, http_url = await _announced(process, "RAWP master:", 60.0 if wrapper else 30.0)
    # either "RAWP master: ws URL  http URL" or the JSON listening event
    return Proc(process, ws_url=ws_url, http_url=http_url, label="master")


async def start_baseline(
    extra: Sequence[str] = (),
    *,
    loop: str = "asyncio",
    max_seconds: float = 900.0,
    wrapper: Sequence[str] = (),
    engine: str = "websockets",
) -> Proc:
    """The minimal fan-out relay (:mod:`bench.baseline_relay`) on websockets, or on picows
    (``engine``); ``wrapper`` as :func:`start_master`'s."""
    argv = [PYTHON, "-m", "bench.baseline_relay", "--port", "0", "--loop", loop]
    argv += ["--engine", engine]
    argv += ["--max-seconds", str(max_seconds), *extra]
    process = await _spawn([*wrapper, *argv], stderr_path=None)
    words = await _announced(process, "baseline relay:", 60.0 if wrapper else 30.0)
    return Proc(process, ws_url=words[3], label="baseline" if engine == "websockets" else engine)


class Worker:
    """A load generator process: JSON lines in both directions."""

    def __init__(self, process: asyncio.subprocess.Process, role: str) -> None:
        self.process = process
        self.role = role

    @property
    def pid(self) -> int:
        return self.process.pid

    async def send(self, **message: Any) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        await self.process.stdin.drain()

    async def expect(self, event: str, timeout: float = 120.0) -> dict[str, Any]:
        """The next message with ``event``; earlier ones are skipped; errors raise."""
        assert self.process.stdout is not None
        async with asyncio.timeout(timeout):
            while True:
                line = await self.process.stdout.readline()
                if not line:
                    code = await self.process.wait()
                    raise RuntimeError(f"{self.role} worker exited ({code}) before {event!r}")
                message: dict[str, Any] = json.loads(line)
                if message.get("event") == "error":
                    error, trace = message.get("error"), message.get("trace", "")[-800:]
                    raise RuntimeError(f"{self.role} worker failed: {error}\n{trace}")
                if message.get("event") == event:
                    return message

    async def finish(self, timeout: float = 30.0) -> None:
        """Close stdin (the worker's stop signal) and wait; kill after ``timeout``."""
        p = self.process
        if p.stdin is not None and not p.stdin.is_closing():
            p.stdin.close()
        try:
            await asyncio.wait_for(p.wait(), timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
            await p.wait()


async def start_worker(
    role: str, config: dict[str, Any], *, stderr_path: Path | None = None
) -> Worker:
    """``python -m bench._loadgen ROLE CONFIG_JSON``; waits for its ``ready`` line."""
    argv = [PYTHON, "-m", "bench._loadgen", role, json.dumps(config)]
    process = await _spawn(argv, stderr_path=stderr_path)
    return Worker(process, role)


def redis_available() -> str | None:
    """Why the Redis variant cannot run, or None when it can."""
    store = ROOT / "relay" / "store"
    if not (store / "redis.py").exists() and not (store / "redis" / "__init__.py").exists():
        return "relay/store/redis (module or package) does not exist yet"
    try:
        from tests.support.redis_server import redis_server_binary
    except ImportError as exc:
        return f"tests/support/redis_server.py is not importable ({exc})"
    if redis_server_binary() is None:
        return "no redis-server binary on PATH"
    return None


@dataclass
class RedisHandle:
    """A running test redis-server: its URL and pid."""

    url: str
    pid: int


@contextlib.asynccontextmanager
async def redis_server(directory: Path, appendfsync: str = "always") -> AsyncIterator[RedisHandle]:
    """Our own redis-server on a free port (never 6379), AOF fsynced always (by default)."""
    from tests.support.redis_server import RedisServer

    server = RedisServer(directory, appendfsync=appendfsync)
    await asyncio.to_thread(server.start)
    try:
        proc = server._proc
        yield RedisHandle(server.url, proc.pid if proc is not None else 0)
    finally:
        await asyncio.to_thread(server.kill)
