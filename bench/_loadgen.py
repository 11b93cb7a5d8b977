"""``python -m bench._loadgen ROLE CONFIG_JSON``: one load-generator process.

Talks to the relay under test over raw sockets (:mod:`bench._wsraw`) on 127.0.0.1 and to
the benchmark over JSON lines: it prints ``{"event": ...}`` lines on stdout and reads
``{"cmd": ...}`` lines on stdin; stdin closing means stop. Every role stops by itself after
``max_seconds`` (default 300). Roles:

* ``throughput`` — one client and N edges in this process; the client keeps at most
  ``window`` frames ahead of the slowest edge (closed-loop, so no queue can overflow) and
  the edges count what they receive during ``measure_s`` seconds after ``warmup_s``.
* ``pace`` — a client that sends ``rate`` frames/s (in ~1 ms ticks), each stamped with the
  monotonic clock, until told ``stop``.
* ``latency`` — N edges that record receive time − send stamp for every frame.
* ``idle`` — N edges (or clients that create their sessions) over many sessions that
  attach and then only read (memory benchmark).
* ``detach`` — ``count`` clients that each create their session (``prefix-i``), wait for the
  welcome and leave (close 1000), ``concurrency`` at a time: detached sessions, fast.
* ``wake`` — ``count`` clients that each create their session, ask to be woken at their
  ``at_ms`` (``session.revisit.request``), stay attached and record when each
  ``session.wake`` arrives (wall clock), until all came or ``stop``.
* ``churn`` — N edges that each drop every ~``period_s`` for ~``down_s`` and reattach with
  their participant id and cursor, timing each replay, then verify exact accounting
  against a dump of the session log.
* ``storm_attach``, ``storm``, ``throughput_picows`` — picows clients (:mod:`bench._stormgen`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sys
import time
import traceback
from array import array
from collections.abc import Callable
from typing import Any

from ._plot import CURVE_QS
from ._procs import API_KEY, percentile_curve, percentiles, raise_nofile
from ._workload import AgentStream, frame_type, hello, read_stamp, stamp_ns
from ._wsraw import RawWS, open_raw

_NOT_STREAM = frozenset(
    {b"session.presence", b"connection.welcome", b"session.error", b"session.history"}
)
_dec = json.JSONDecoder()


def emit(event: str, **data: Any) -> None:
    """One JSON line to the benchmark."""
    print(json.dumps({"event": event, **data}), flush=True)


class Commands:
    """stdin JSON lines; ``closed`` is set at EOF."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.closed = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

        async def pump() -> None:
            while True:
                line = await reader.readline()
                if not line:
                    self.closed.set()
                    await self.queue.put({"cmd": "eof"})
                    return
                if line.strip():
                    await self.queue.put(json.loads(line))

        self._pump = loop.create_task(pump())  # keep a reference: tasks are weakly held

    async def next(self) -> dict[str, Any]:
        return await self.queue.get()

    async def wait_for(self, cmd: str) -> dict[str, Any]:
        while True:
            message = await self.next()
            if message.get("cmd") in (cmd, "eof"):
                return message


async def attach(
    host: str, port: int, hello_bytes: bytes, on_message: Callable[[bytes], None] | None = None
) -> tuple[RawWS, dict[str, Any]]:
    """Connect, send the hello, wait for the welcome; later messages go to ``on_message``."""
    ws = await open_raw(host, port)
    ws.send_text(hello_bytes)
    try:
        first = await ws.recv(timeout=15)
    except (ConnectionError, TimeoutError) as exc:
        raise ConnectionError(f"no welcome (close {ws.close_code} {ws.close_reason})") from exc
    welcome: dict[str, Any] = json.loads(first)
    if welcome.get("type") != "connection.welcome":
        raise ConnectionError(f"expected a welcome, got {first[:200]!r}")
    if on_message is not None:
        ws.on_message = on_message
        while ws.messages:
            on_message(ws.messages.popleft())
    return ws, welcome


# --- throughput -------------------------------------------------------------------------


async def role_throughput(cfg: dict[str, Any], commands: Commands) -> None:
    host, port, sid = cfg["host"], cfg["port"], cfg["session_id"]
    n_edges = cfg.get("edges", 3)
    window = cfg.get("window", 2000)
    counts = [0] * n_edges
    errors: list[str] = []
    progress = asyncio.Event()

    def counter(i: int) -> Callable[[bytes], None]:
        def on_message(data: bytes) -> None:
            t = frame_type(data)
            if t in _NOT_STREAM:
                if t == b"session.error":
                    errors.append(data[:300].decode("utf-8", "replace"))
                return
            counts[i] += 1
            progress.set()

        return on_message

    client_errors: list[str] = []

    def on_client(data: bytes) -> None:
        if frame_type(data) == b"session.error":
            client_errors.append(data[:300].decode("utf-8", "replace"))

    client, _ = await attach(host, port, hello(sid, "client", API_KEY, create=True), on_client)
    edges = []
    for i in range(n_edges):
        ws, _ = await attach(host, port, hello(sid, "edge", API_KEY), counter(i))
        edges.append(ws)
    stream = AgentStream(sid, seed=cfg.get("seed", 1))
    sent = 0
    stop = False

    async def pump() -> None:
        nonlocal sent
        while not stop:
            allowed = min(counts) + window - sent
            if allowed <= 0 or client.write_buffer_size > (1 << 20):
                progress.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(progress.wait(), 1.0)
                continue
            batch = stream.take(min(allowed, 256))
            client.send_many(batch)
            sent += len(batch)
            await asyncio.sleep(0)

    task = asyncio.get_running_loop().create_task(pump())
    emit("attached", edges=n_edges)
    await asyncio.sleep(cfg.get("warmup_s", 1.5))
    start_counts = list(counts)
    t0 = time.perf_counter()
    emit("measure_start", sent=sent)
    await asyncio.sleep(cfg.get("measure_s", 5.0))
    elapsed = time.perf_counter() - t0
    end_counts = list(counts)
    emit("measure_end", sent=sent)
    stop = True
    await task
    # Everything sent must arrive: wait for the edges to catch up (closed loop: ≤ window).
    deadline = time.monotonic() + 30
    while min(counts) < sent and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    delivered = [e - s for s, e in zip(start_counts, end_counts, strict=True)]
    emit(
        "result",
        sent=sent,
        received=counts,
        complete=all(c == sent for c in counts),
        delivered=delivered,
        seconds=elapsed,
        frames_per_s=min(delivered) / elapsed,
        deliveries_per_s=sum(delivered) / elapsed,
        edge_errors=errors[:5],
        client_errors=client_errors[:5],
        client_error_count=len(client_errors),
        bytes_per_frame=round(sum(len(f) for f in stream.take(700)) / 700, 1),
    )
    for ws in (client, *edges):
        await ws.close()


# --- latency ----------------------------------------------------------------------------


async def role_pace(cfg: dict[str, Any], commands: Commands) -> None:
    host, port, sid = cfg["host"], cfg["port"], cfg["session_id"]
    rate = float(cfg["rate"])
    errors: list[str] = []

    def on_client(data: bytes) -> None:
        if frame_type(data) == b"session.error":
            errors.append(data[:300].decode("utf-8", "replace"))

    client, _ = await attach(
        host, port, hello(sid, "client", API_KEY, create=cfg.get("create", True)), on_client
    )
    stream = AgentStream(sid, seed=cfg.get("seed", 2), prefix=cfg.get("prefix", "m"))
    emit("ready")
    await commands.wait_for("go")
    sent = 0
    t0 = time.monotonic()
    stop = asyncio.Event()

    async def until_stop() -> None:
        await commands.wait_for("stop")
        stop.set()

    waiter = asyncio.get_running_loop().create_task(until_stop())
    duration = cfg.get("duration_s")
    clock = time.monotonic_ns
    while not stop.is_set():
        now = time.monotonic()
        if duration is not None and now - t0 >= duration:
            break
        due = int((now - t0) * rate) + 1
        while sent < due:
            client.send_text(stamp_ns(next(stream), clock()))
            sent += 1
        await asyncio.sleep(max(0.0, t0 + due / rate - time.monotonic()))
    waiter.cancel()
    emit(
        "done", sent=sent, seconds=time.monotonic() - t0, errors=errors[:5], error_count=len(errors)
    )
    await commands.wait_for("close")
    await client.close()


async def role_latency(cfg: dict[str, Any], commands: Commands) -> None:
    host, port, sid = cfg["host"], cfg["port"], cfg["session_id"]
    n_edges = cfg.get("edges", 3)
    samples = [array("d") for _ in range(n_edges)]
    recording = False
    clock = time.monotonic_ns

    def recorder(i: int) -> Callable[[bytes], None]:
        out = samples[i]

        def on_message(data: bytes) -> None:
            now = clock()
            if not recording:
                return
            t = read_stamp(data)
            if t is not None:
                out.append((now - t) / 1000.0)

        return on_message

    edges = []
    for i in range(n_edges):
        ws, _ = await attach(host, port, hello(sid, "edge", API_KEY), recorder(i))
        edges.append(ws)
    emit("ready")
    await commands.wait_for("record")
    recording = True
    await commands.wait_for("stop")
    recording = False
    everything = [x for s in samples for x in s]
    emit(
        "result",
        per_edge=[len(s) for s in samples],
        latency_us=percentiles(everything),
        curve_us=percentile_curve(everything, CURVE_QS),
    )
    for ws in edges:
        await ws.close()


# --- idle edges (memory) ----------------------------------------------------------------


async def role_idle(cfg: dict[str, Any], commands: Commands) -> None:
    host, port = cfg["host"], cfg["port"]
    sessions: list[str] = cfg["sessions"]
    per_session = cfg["edges_per_session"]
    concurrency = cfg.get("concurrency", 50)
    role = cfg.get("role", "edge")
    received = [0]

    def on_message(data: bytes) -> None:
        received[0] += 1

    conns: list[RawWS] = []
    failures: list[str] = []
    gate = asyncio.Semaphore(concurrency)

    async def one(sid: str) -> None:
        async with gate:
            try:
                first = hello(sid, role, API_KEY, create=role == "client")
                ws, _ = await attach(host, port, first, on_message)
                conns.append(ws)
            except Exception as exc:
                failures.append(repr(exc)[:200])

    started = time.monotonic()
    await asyncio.gather(*(one(sid) for sid in sessions for _ in range(per_session)))
    emit(
        "ready",
        attached=len(conns),
        failures=len(failures),
        failure_examples=failures[:3],
        seconds=time.monotonic() - started,
    )
    await commands.wait_for("stop")
    still_open = sum(1 for ws in conns if ws.open)
    for ws in conns:
        ws.abort()
    emit("result", still_open=still_open, received=received[0])


# --- detach -----------------------------------------------------------------------------


async def role_detach(cfg: dict[str, Any], commands: Commands) -> None:
    host, port, prefix = cfg["host"], cfg["port"], cfg["prefix"]
    first, count = cfg.get("start", 0), cfg["count"]
    concurrency = cfg.get("concurrency", 200)
    failures: list[str] = []
    done = [0]
    next_index = iter(range(first, first + count))
    started = time.monotonic()

    async def lane() -> None:
        for i in next_index:
            try:
                ws, _ = await attach(
                    host, port, hello(f"{prefix}-{i}", "client", API_KEY, create=True)
                )
                await ws.close(1000, timeout=5)
            except Exception as exc:
                failures.append(repr(exc)[:200])
            done[0] += 1
            if done[0] % 10_000 == 0:
                emit("progress", done=done[0], seconds=time.monotonic() - started)

    await asyncio.gather(*(lane() for _ in range(concurrency)))
    emit(
        "done",
        created=done[0] - len(failures),
        failures=len(failures),
        failure_examples=failures[:3],
        seconds=time.monotonic() - started,
    )


# --- wake -------------------------------------------------------------------------------


def _iso_ms(ms: int) -> str:
    moment = time.gmtime(ms // 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", moment) + f".{ms % 1000:03d}Z"


async def role_wake(cfg: dict[str, Any], commands: Commands) -> None:
    host, port, prefix = cfg["host"], cfg["port"], cfg["prefix"]
    count, spread_ms = cfg["count"], cfg["spread_ms"]
    gate = asyncio.Semaphore(cfg.get("concurrency", 200))
    due: dict[str, int] = {}
    woken: dict[str, float] = {}
    all_woken = asyncio.Event()
    conns: list[tuple[int, RawWS]] = []
    failures: list[str] = []

    def on_message(data: bytes) -> None:
        if b'"session.wake"' not in data:
            return
        now = time.time()
        try:
            frame = json.loads(data)
        except ValueError:
            return
        if frame.get("type") == "session.wake":
            rid = frame.get("payload", {}).get("revisit_id")
            if rid in due and rid not in woken:
                woken[rid] = now
                if len(woken) == count:
                    all_woken.set()

    async def one(i: int) -> None:
        sid = f"{prefix}-{i}"
        async with gate:
            try:
                ws, _ = await attach(
                    host, port, hello(sid, "client", API_KEY, create=True), on_message
                )
                conns.append((i, ws))
            except Exception as exc:
                failures.append(repr(exc)[:200])

    started = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(count)))
    emit(
        "ready",
        attached=len(conns),
        failures=len(failures),
        failure_examples=failures[:3],
        seconds=time.monotonic() - started,
    )
    # Every client attached: the minute starts when the benchmark says (``go``).
    first_ms = int((await commands.wait_for("go"))["first_ms"])
    for i, ws in conns:
        rid = f"r-{i}"
        due[rid] = first_ms + (spread_ms * i) // max(count, 1)
        request = {
            "type": "session.revisit.request",
            "message_id": f"rv-{i}",
            "session_id": f"{prefix}-{i}",
            "timestamp": _iso_ms(int(time.time() * 1000)),
            "payload": {"revisit_id": rid, "at": _iso_ms(due[rid])},
        }
        ws.send_text(json.dumps(request).encode())
    emit("requested", count=len(conns))
    stop = asyncio.ensure_future(commands.wait_for("stop"))
    done = asyncio.ensure_future(all_woken.wait())
    await asyncio.wait({stop, done}, return_when=asyncio.FIRST_COMPLETED)
    stop.cancel()
    done.cancel()
    lags = [1000 * (woken[r] - due[r] / 1000) for r in woken]
    emit("result", woken=len(woken), lags_ms=lags, still_open=sum(1 for _, ws in conns if ws.open))
    for _, ws in conns:
        ws.abort()


# --- churn ------------------------------------------------------------------------------


class ChurnEdge:
    """One edge that drops and reattaches, recording every seq it is given."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.pid: str | None = None
        self.first_head = 0
        self.seqs = array("q")
        self.last_seq = 0
        self.lost = 0
        self.unknown_loss = 0
        self.histories = 0
        self.disorder = 0
        self.closes: dict[str, int] = {}
        self.ws: RawWS | None = None
        self.replay_ms: list[float] = []
        self.history_frames = 0
        self._history_at: float | None = None
        self._started = 0.0

    def on_message(self, data: bytes) -> None:
        t = frame_type(data)
        if t == b"session.history":
            self._history(data)
            return
        seq = _seq_of(data)
        if seq is not None:
            self._take(seq)

    def _take(self, seq: int) -> None:
        if seq <= self.last_seq:
            self.disorder += 1
            return
        self.seqs.append(seq)
        self.last_seq = seq

    def _history(self, data: bytes) -> None:
        msg = json.loads(data)
        status = msg["payload"]["buffer_status"]
        self.histories += 1
        if status.get("lost_frame_count") is None and status.get("truncated"):
            self.unknown_loss += 1
        else:
            self.lost += int(status.get("lost_frame_count") or 0)
        frames = msg["payload"]["frames"]
        self.history_frames += len(frames)
        for inner in frames:
            self._take(int(inner["seq"]))
        if self._started:
            self.replay_ms.append((time.perf_counter() - self._started) * 1000)
            self._started = 0.0


def _seq_of(data: bytes) -> int | None:
    i = data.rfind(b'"seq":')
    if i < 0:
        return None
    i += 6
    j = i
    while 48 <= data[j] <= 57:
        j += 1
    return int(data[i:j])


async def role_churn(cfg: dict[str, Any], commands: Commands) -> None:
    host, port, sid = cfg["host"], cfg["port"], cfg["session_id"]
    n = cfg["edges"]
    period = float(cfg.get("period_s", 10.0))
    down = float(cfg.get("down_s", 1.0))
    rng = random.Random(cfg.get("seed", 3))
    buffer = cfg.get("buffer")
    edges = [ChurnEdge(cfg.get("index_base", 0) + i) for i in range(n)]
    gate = asyncio.Semaphore(cfg.get("concurrency", 50))
    churning = True
    reconnect_failures: list[str] = []

    async def connect(edge: ChurnEdge, *, first: bool) -> None:
        async with gate:
            for attempt in range(20):
                edge._started = 0.0 if first else time.perf_counter()
                try:
                    kwargs: dict[str, Any] = {"buffer": buffer}
                    if not first:
                        kwargs["participant_id"] = edge.pid
                        kwargs["resume"] = {"last_seq": edge.last_seq}
                    ws, welcome = await attach(
                        host, port, hello(sid, "edge", API_KEY, **kwargs), edge.on_message
                    )
                except (ConnectionError, TimeoutError, OSError) as exc:
                    reconnect_failures.append(repr(exc)[:160])
                    await asyncio.sleep(0.05 * (attempt + 1))
                    continue
                p = welcome["payload"]
                if first:
                    edge.pid = p["participant_id"]
                    edge.first_head = int(p["session"]["head_seq"])
                    edge.last_seq = edge.first_head
                elif p["participant_id"] != edge.pid:
                    reconnect_failures.append(f"edge {edge.index} got a new participant id")
                edge.ws = ws
                return
            raise RuntimeError(f"edge {edge.index} could not reattach: {reconnect_failures[-1:]}")

    async def life(edge: ChurnEdge) -> None:
        next_drop = time.monotonic() + rng.uniform(0, period)
        while churning:
            ws = edge.ws
            assert ws is not None
            # Sleep until the next drop, or until the master closes us (e.g. 4429).
            wait = next_drop - time.monotonic()
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ws.wait_closed(), min(wait, 1.0))
                if ws.open and churning:
                    continue
            if not churning:
                break
            if ws.open:
                ws.abort()  # the network drops: no closing handshake
                await asyncio.sleep(rng.uniform(0.8 * down, 1.2 * down))
                next_drop = time.monotonic() + rng.uniform(0.8 * period, 1.2 * period)
            else:
                key = str(ws.close_code)
                edge.closes[key] = edge.closes.get(key, 0) + 1
            await connect(edge, first=False)

    await asyncio.gather(*(connect(e, first=True) for e in edges))
    emit("attached", edges=n)
    await commands.wait_for("churn")
    lives = [asyncio.get_running_loop().create_task(life(e)) for e in edges]

    async def progress() -> None:
        while churning:
            await asyncio.sleep(cfg.get("progress_s", 5.0))
            emit(
                "progress",
                attached=sum(1 for e in edges if e.ws is not None and e.ws.open),
                replays=sum(len(e.replay_ms) for e in edges),
                failures=len(reconnect_failures),
                last_failure=reconnect_failures[-1] if reconnect_failures else None,
            )

    reporter = asyncio.get_running_loop().create_task(progress())
    await commands.wait_for("settle")
    churning = False
    reporter.cancel()
    await asyncio.gather(*lives)
    for e in edges:  # everyone attached again before the final check
        if e.ws is None or not e.ws.open:
            await connect(e, first=False)
    emit("settled")
    message = await commands.wait_for("verify")
    log = [json.loads(line) for line in open(message["path"])]  # noqa: ASYNC230, SIM115
    head = log[-1][0] if log else 0
    wanted_by: dict[int, list[int]] = {}
    for e in edges:
        wanted_by[e.index] = [
            seq
            for seq, _type, _role, exclude, edges_only, _mid in log
            if seq > e.first_head and exclude != e.pid
        ]
    # Wait until each edge has its last expected seq (the stream stopped before the dump).
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(
        wanted_by[e.index] and e.last_seq < wanted_by[e.index][-1] for e in edges
    ):
        await asyncio.sleep(0.05)
    exact = 0
    problems: list[str] = []
    total_missing = 0
    total_lost = 0
    for e in edges:
        wanted = set(wanted_by[e.index])
        got = list(e.seqs)
        extra = [s for s in got if s not in wanted]
        missing = len(wanted) - (len(got) - len(extra))
        total_missing += missing
        total_lost += e.lost
        ok = not extra and e.disorder == 0 and missing == e.lost and e.unknown_loss == 0
        exact += ok
        if not ok and len(problems) < 5:
            problems.append(
                f"edge {e.index} ({e.pid}): received {len(got)}, expected {len(wanted)}, "
                f"missing {missing}, lost_frame_count {e.lost}, extra {extra[:5]}, "
                f"out of order {e.disorder}, unknown loss {e.unknown_loss}"
            )
    replays = [x for e in edges for x in e.replay_ms]
    closes: dict[str, int] = {}
    for e in edges:
        for k, v in e.closes.items():
            closes[k] = closes.get(k, 0) + v
    emit(
        "result",
        edges=n,
        head=head,
        exact=exact,
        problems=problems,
        missing=total_missing,
        lost=total_lost,
        replays=len(replays),
        replay_ms=percentiles(replays),
        history_frames=sum(e.history_frames for e in edges),
        received=sum(len(e.seqs) for e in edges),
        master_closes=closes,
        reconnect_failures=len(reconnect_failures),
        reconnect_failure_examples=reconnect_failures[:3],
        replay_samples=replays,
    )
    for e in edges:
        if e.ws is not None:
            e.ws.abort()


ROLES = {
    "throughput": role_throughput,
    "pace": role_pace,
    "latency": role_latency,
    "idle": role_idle,
    "churn": role_churn,
    "detach": role_detach,
    "wake": role_wake,
    "storm_attach": lambda cfg, commands: _storm("role_storm_attach", cfg, commands),
    "storm": lambda cfg, commands: _storm("role_storm", cfg, commands),
    "throughput_picows": lambda cfg, commands: _storm("role_throughput", cfg, commands),
}


async def _storm(role: str, cfg: dict[str, Any], commands: Commands) -> None:
    """The picows roles of :mod:`bench.storm` (imported only when asked: picows is a bench dep)."""
    from . import _stormgen

    await getattr(_stormgen, role)(cfg, commands)


async def _main(role: str, cfg: dict[str, Any]) -> None:
    commands = Commands()
    await commands.start()
    try:
        async with asyncio.timeout(cfg.get("max_seconds", 300)):
            await ROLES[role](cfg, commands)
    except Exception as exc:
        emit("error", error=f"{exc!r}", trace=traceback.format_exc()[-2000:])


def main() -> None:
    role, config = sys.argv[1], json.loads(sys.argv[2])
    raise_nofile()
    try:
        import uvloop

        factory: Any = uvloop.new_event_loop
    except ImportError:  # pragma: no cover
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(_main(role, config))


if __name__ == "__main__":
    main()
