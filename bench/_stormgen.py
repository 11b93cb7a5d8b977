"""Server-bound load generator roles for :mod:`bench.storm` (picows clients, uvloop).

picows parses frames in C, so one process attaches thousands of connections without being
the bottleneck (the websockets client saturates first). Roles, run by ``bench._loadgen``:

* ``storm_attach`` — one client per session (``create``, untimed, skipped for the minimal
  server), then on ``go`` attaches ``edges_per_session`` edges to each session, at most
  ``concurrency`` handshakes in flight, timing connect → welcome; ``close`` closes them.
* ``storm`` — clients and edges attach; the clients send ``frames_before`` frames each
  (every edge receives them live); on ``drop`` every edge's TCP connection is cut at once
  (no closing handshake) and each client sends ``frames_during`` more; on ``reconnect``
  every edge reattaches at once with its participant id and ``resume.last_seq``, timed
  until its ``session.history`` is in; then ``verify``: every edge's client frames are the
  session's, in order, each once, none lost, and every edge's presence roster (folded from
  live frames and histories, coalesced or not) shows every other edge of its session
  attached.
* ``throughput`` (``bench._loadgen throughput_picows``) — the ``throughput`` role of
  ``bench._loadgen`` (same events, closed loop) with picows connections: the edges count
  stream frames by their first bytes, so :mod:`bench.throughput_picows` measures the relay.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Final

import msgspec
from picows import WSFrame, WSListener, WSMsgType, WSTransport, ws_connect

from ._procs import API_KEY, percentiles
from ._workload import AgentStream, frame_type, hello

_decode = msgspec.json.Decoder().decode


def _emit(event: str, **data: Any) -> None:
    print(json.dumps({"event": event, **data}), flush=True)


class Conn(WSListener):  # type: ignore[misc]
    """One connection: the first message (the welcome) resolves ``welcomed``, later ones go
    to the owner; a fragmented message (a backlog over 1 MiB) is joined first."""

    def __init__(self, owner: Peer) -> None:
        self.owner = owner
        self.transport: WSTransport | None = None
        self.welcomed: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.closed = asyncio.get_running_loop().create_future()
        self.close_code: int | None = None
        self.parts: list[bytes] = []

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        kind = frame.msg_type
        if kind == WSMsgType.TEXT or kind == WSMsgType.CONTINUATION:
            data = frame.get_payload_as_bytes()
            if not frame.fin:
                self.parts.append(data)
                return
            if self.parts:
                data = b"".join([*self.parts, data])
                self.parts = []
            if not self.welcomed.done():
                self.welcomed.set_result(json.loads(data))
                return
            self.owner.on_message(data)
        elif kind == WSMsgType.CLOSE:
            self.close_code = int(frame.get_close_code())
            transport.send_close(frame.get_close_code())
            transport.disconnect()

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        if not self.welcomed.done():
            self.welcomed.set_exception(ConnectionError(f"closed {self.close_code}"))
        if not self.closed.done():
            self.closed.set_result(None)


_BACKLOG: Final = b'{"type":"session.history","payload":'  # M→P: no seq, payload first
_ACK: Final = b'{"type":"connection.ack"'


class Peer:
    """An edge (or client) across its connections: seqs of client frames, roster, history.

    An edge keeps what it receives as bytes and parses it only when asked (:meth:`fold`,
    outside the timed part): with presence to 1,000 edges of one session every edge receives
    every change (≈ 2 × 1,000 per storm, ~85 bytes each), ≈ 170 MB across the storm; parsing
    that as it arrives made this process, not the master, the bottleneck (one core
    saturated, the master a third idle). The backlog that ends a reattach is recognised
    without parsing it: it is the first message after a resumed welcome (docs/protocol.md
    §5 item 5), checked when folded. A client only looks at its ``connection.ack`` frames.
    """

    def __init__(
        self, index: int, session_id: str, *, keep: bool = True, presence: bool = True
    ) -> None:
        self.index = index
        self.session_id = session_id
        self.keep = keep
        self.presence = presence  # False: its hellos decline presence (docs/protocol.md §5)
        self.presence_frames = 0  # presence frames it received (live or in backlogs)
        self.pid: str | None = None
        self.conn: Conn | None = None
        self.last_seq = 0
        self.client_seqs: list[int] = []
        self.disorder = 0
        self.lost = 0
        self.histories = 0
        self.roster: dict[str, str] = {}
        self.history_in: asyncio.Future[float] | None = None
        self.acked_id: str | None = None
        self.acked = asyncio.Event()
        self.wait_ack: str | None = None
        self.received: list[bytes] = []
        self.backlogs_at: set[int] = set()  # indexes in ``received`` that must be backlogs
        self.folded = 0
        self.bytes_in = 0
        self.messages_in = 0
        self.not_backlog = 0

    def on_message(self, data: bytes) -> None:
        if not self.keep:
            if data.startswith(_ACK):
                msg = _decode(data)
                if msg["payload"].get("last_message_id") == self.wait_ack:
                    self.acked.set()
            return
        self.bytes_in += len(data)
        self.messages_in += 1
        if self.history_in is not None and not self.history_in.done():
            self.backlogs_at.add(len(self.received))
            self.history_in.set_result(time.perf_counter())
        self.received.append(data)

    def fold(self) -> None:
        """Parse what arrived since the last fold: client frames, presence, backlogs."""
        received = self.received
        for i in range(self.folded, len(received)):
            data = received[i]
            received[i] = b""  # parsed once; the bytes are not needed again
            if i in self.backlogs_at and not data.startswith(_BACKLOG):
                self.not_backlog += 1
            msg = _decode(data)  # msgspec: coalesced presence frames to 1,000 edges add up
            if msg.get("type") == "session.history" and msg.get("seq") is None:
                self.histories += 1
                self.lost += int(msg["payload"]["buffer_status"].get("lost_frame_count") or 0)
                for inner in msg["payload"]["frames"]:
                    self._logged(inner)
            elif msg.get("seq") is not None:
                self._logged(msg)
        self.folded = len(received)

    def _logged(self, msg: dict[str, Any]) -> None:
        seq = int(msg["seq"])
        if seq <= self.last_seq:
            self.disorder += 1
            return
        self.last_seq = seq
        if msg.get("type") == "session.presence":
            self.presence_frames += 1
            p = msg["payload"]
            for change in p.get("changes") or [p]:
                self.roster[change["participant_id"]] = change["state"]
        elif (msg.get("sender") or {}).get("role") == "client":
            self.client_seqs.append(seq)


def _ignore(data: bytes) -> None:
    """What an attach-rate edge does with frames after its welcome."""


def _edges(cfg: dict[str, Any]) -> list[Peer]:
    """``eps`` edges per session; with ``watchers`` set, only the first that many of each
    session take presence (a dashboard, say) and the others decline it (viewers)."""
    watchers = cfg.get("watchers")
    return [
        Peer(i, sid, presence=watchers is None or n < watchers)
        for i, (sid, n) in enumerate((s, n) for s in cfg["sessions"] for n in range(cfg["eps"]))
    ]


def _url(cfg: dict[str, Any]) -> str:
    return f"ws://{cfg['host']}:{cfg['port']}{cfg.get('path', '/v1/ws')}"


async def _open(cfg: dict[str, Any], peer: Peer, hello_bytes: bytes) -> dict[str, Any]:
    transport, conn = await ws_connect(
        lambda: Conn(peer),
        _url(cfg),
        extra_headers={"Sec-WebSocket-Protocol": "rawp.1"},
        websocket_handshake_timeout=30,
        use_aiofastnet=False,
    )
    assert isinstance(conn, Conn)
    transport.send(WSMsgType.TEXT, hello_bytes)
    welcome = await asyncio.wait_for(conn.welcomed, 30)
    peer.conn = conn
    return welcome


async def _clients(cfg: dict[str, Any]) -> list[Peer]:
    clients = [Peer(-1, sid, keep=False) for sid in cfg["sessions"]]
    gate = asyncio.Semaphore(100)

    async def one(c: Peer) -> None:
        async with gate:
            w = await _open(cfg, c, hello(c.session_id, "client", API_KEY, create=True))
            c.pid = w["payload"]["participant_id"]

    await asyncio.gather(*(one(c) for c in clients))
    return clients


async def _attach_edges(
    cfg: dict[str, Any], edges: list[Peer], concurrency: int, *, resume: bool
) -> tuple[float, list[float], int]:
    """Attach (or reattach) ``edges``; (seconds, per-edge ms to welcome+history, failures).

    ``concurrency`` workers take the edges in order, so at most that many handshakes are in
    flight (an ``asyncio.Semaphore`` scans its waiters on every acquire: with 10,000 edges
    and 1,000 in flight that was ~10⁸ steps of this process's time).
    """
    times: list[float] = []
    failures = 0
    queue = iter(edges)

    async def one(e: Peer) -> None:
        nonlocal failures
        for attempt in range(10):
            if resume and attempt:
                e.fold()  # what the failed attempt received moves the cursor, as live
            t = time.perf_counter()
            kwargs: dict[str, Any] = {} if e.presence else {"presence": False}
            if resume:
                kwargs |= {"participant_id": e.pid, "resume": {"last_seq": e.last_seq}}
                e.history_in = asyncio.get_running_loop().create_future()
            try:
                w = await _open(cfg, e, hello(e.session_id, "edge", API_KEY, **kwargs))
                if resume:
                    assert e.history_in is not None
                    await asyncio.wait_for(e.history_in, 30)
            except (ConnectionError, OSError, TimeoutError, Exception):
                failures += 1
                await asyncio.sleep(0.05)
                continue
            p = w.get("payload", {})
            if not resume:
                e.pid = p.get("participant_id")
                e.last_seq = int(p.get("session", {}).get("head_seq", 0))
            times.append((time.perf_counter() - t) * 1000)
            return
        raise RuntimeError(f"edge {e.index} could not attach")

    async def worker() -> None:
        for e in queue:
            await one(e)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(edges))))))
    return time.perf_counter() - t0, times, failures


def _close_all(peers: list[Peer]) -> None:
    for p in peers:
        if p.conn is not None and p.conn.transport is not None:
            p.conn.transport.disconnect(graceful=False)


async def _commands() -> asyncio.Queue[dict[str, Any]]:
    from ._loadgen import Commands

    commands = Commands()
    await commands.start()
    return commands.queue


async def _wait(queue: asyncio.Queue[dict[str, Any]], cmd: str) -> None:
    while True:
        message = await queue.get()
        if message.get("cmd") in (cmd, "eof"):
            if message.get("cmd") == "eof":
                raise SystemExit(0)
            return


async def role_storm_attach(cfg: dict[str, Any], _commands_obj: Any) -> None:
    queue = _commands_obj.queue
    minimal = bool(cfg.get("minimal"))
    clients = [] if minimal else await _clients(cfg)
    edges = _edges(cfg)
    for peer in edges + clients:
        peer.on_message = _ignore  # type: ignore[method-assign]  # count attaches, parse nothing
    _emit("ready")
    await _wait(queue, "go")
    seconds, times, failures = await _attach_edges(
        cfg, edges, cfg.get("concurrency", 100), resume=False
    )
    _emit(
        "attached",
        seconds=seconds,
        edges=len(edges),
        failures=failures,
        ms=percentiles(times),
    )
    await _wait(queue, "close")
    _close_all(edges + clients)
    await asyncio.sleep(0.2)
    _emit("closed")


async def role_storm(cfg: dict[str, Any], _commands_obj: Any) -> None:
    queue = _commands_obj.queue
    clients = await _clients(cfg)
    streams = {c.session_id: AgentStream(c.session_id, seed=i) for i, c in enumerate(clients)}
    edges = _edges(cfg)
    await _attach_edges(cfg, edges, 200, resume=False)

    async def send(n: int) -> None:
        for c in clients:
            frames = streams[c.session_id].take(n)
            c.wait_ack = json.loads(frames[-1])["message_id"]
            c.acked.clear()
            assert c.conn is not None
            assert c.conn.transport is not None
            for f in frames:
                c.conn.transport.send(WSMsgType.TEXT, f)
        await asyncio.wait_for(asyncio.gather(*(c.acked.wait() for c in clients)), 60)

    await send(cfg["frames_before"])
    expected = cfg["frames_before"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for e in edges:
            e.fold()
        if all(len(e.client_seqs) >= expected for e in edges):
            break
        await asyncio.sleep(0.05)
    _emit("steady", edges=len(edges))
    await _wait(queue, "drop")
    _close_all(edges)  # the network drops: no closing handshake
    await asyncio.gather(*(e.conn.closed for e in edges if e.conn is not None))
    for e in edges:
        e.fold()  # the cursors to resume from: everything the dropped connections received
    await send(cfg["frames_during"])
    _emit("dropped")
    await _wait(queue, "reconnect")
    # every edge at once, up to ``storm_in_flight`` handshakes (1,000 edges: all of them)
    in_flight = min(len(edges), int(cfg.get("storm_in_flight", 1000)))
    for e in edges:
        e.bytes_in = e.messages_in = 0
    seconds, times, failures = await _attach_edges(cfg, edges, in_flight, resume=True)
    _emit("reconnected", seconds=seconds, failures=failures, ms=percentiles(times))
    await _wait(queue, "verify")
    expected = cfg["frames_before"] + cfg["frames_during"]
    by_session: dict[str, list[Peer]] = {}
    for e in edges:
        by_session.setdefault(e.session_id, []).append(e)

    def roster_ok(e: Peer) -> bool:
        if not e.presence:  # declined: exact is no presence frame at all
            return e.presence_frames == 0
        return all(
            e.roster.get(o.pid or "") == "attached" for o in by_session[e.session_id] if o is not e
        )

    def settled(e: Peer) -> bool:
        e.fold()
        return len(e.client_seqs) >= expected and roster_ok(e)

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not all([settled(e) for e in edges]):
        await asyncio.sleep(0.1)
    exact = 0
    problems: list[str] = []
    for _sid, group in by_session.items():
        reference = group[0].client_seqs
        for e in group:
            ok = (
                len(e.client_seqs) == expected
                and e.client_seqs == reference
                and e.disorder == 0
                and e.lost == 0
                and e.not_backlog == 0
            )
            exact += ok
            if not ok and len(problems) < 5:
                problems.append(
                    f"edge {e.index}: {len(e.client_seqs)} client frames of {expected}, "
                    f"disorder {e.disorder}, lost {e.lost}, "
                    f"{e.not_backlog} reattaches not answered by a backlog first"
                )
    _emit(
        "result",
        exact=exact,
        presence_exact=sum(roster_ok(e) for e in edges),
        edges=len(edges),
        lost=sum(e.lost for e in edges),
        mib_in=round(sum(e.bytes_in for e in edges) / (1 << 20), 1),
        messages_in=sum(e.messages_in for e in edges),
        problems=problems,
    )
    await _wait(queue, "close")
    _close_all(edges + clients)
    await asyncio.sleep(0.2)
    _emit("closed")


# --- throughput (server-bound) ----------------------------------------------------------

_NOT_STREAM = frozenset(
    {b"session.presence", b"connection.welcome", b"session.error", b"session.history"}
)


class _Counter(WSListener):  # type: ignore[misc]
    """An edge of the throughput role: counts the stream frames it receives, parses none."""

    def __init__(self, progress: asyncio.Event, errors: list[str]) -> None:
        self.count = 0
        self.progress = progress
        self.errors = errors
        self.transport: WSTransport | None = None
        self.welcomed: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.transport = transport

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        if frame.msg_type != WSMsgType.TEXT:
            if frame.msg_type == WSMsgType.CLOSE:
                transport.send_close(frame.get_close_code())
                transport.disconnect()
            return
        data = frame.get_payload_as_bytes()
        if not self.welcomed.done():
            self.welcomed.set_result(data)
            return
        if frame_type(data) in _NOT_STREAM:
            if data.startswith(b'{"type":"session.error"'):
                self.errors.append(data[:300].decode("utf-8", "replace"))
            return
        self.count += 1
        self.progress.set()

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        if not self.welcomed.done():
            self.welcomed.set_exception(ConnectionError("closed before the welcome"))


async def _attach_counter(
    cfg: dict[str, Any], hello_bytes: bytes, progress: asyncio.Event, errors: list[str]
) -> _Counter:
    transport, conn = await ws_connect(
        lambda: _Counter(progress, errors),
        _url(cfg),
        extra_headers={"Sec-WebSocket-Protocol": "rawp.1"},
        websocket_handshake_timeout=15,
    )
    assert isinstance(conn, _Counter)
    transport.send(WSMsgType.TEXT, hello_bytes)
    first = await asyncio.wait_for(conn.welcomed, 15)
    if b'"connection.welcome"' not in first[:40]:  # the minimal relay's json.dumps has spaces
        raise ConnectionError(f"expected a welcome, got {first[:200]!r}")
    return conn


async def role_throughput(cfg: dict[str, Any], _commands_obj: Any) -> None:
    """``bench._loadgen throughput``'s protocol with picows clients (same events, same loop).

    One client and N edges; the client keeps at most ``window`` frames ahead of the slowest
    edge (closed loop); the edges count stream frames during ``measure_s`` after ``warmup_s``.
    """
    sid = cfg["session_id"]
    n_edges = cfg.get("edges", 3)
    window = cfg.get("window", 2000)
    progress = asyncio.Event()
    errors: list[str] = []
    client_errors: list[str] = []
    client = await _attach_counter(
        cfg, hello(sid, "client", API_KEY, create=True), asyncio.Event(), client_errors
    )
    edges = [
        await _attach_counter(cfg, hello(sid, "edge", API_KEY), progress, errors)
        for _ in range(n_edges)
    ]
    assert client.transport is not None
    send = client.transport.send
    underlying = client.transport.underlying_transport
    stream = AgentStream(sid, seed=cfg.get("seed", 1))
    sent = 0
    stop = False

    def delivered_min() -> int:
        return min(e.count for e in edges)

    async def pump() -> None:
        nonlocal sent
        text = WSMsgType.TEXT
        while not stop:
            allowed = delivered_min() + window - sent
            if allowed <= 0 or underlying.get_write_buffer_size() > (1 << 20):
                progress.clear()
                try:
                    await asyncio.wait_for(progress.wait(), 1.0)
                except TimeoutError:
                    pass
                continue
            batch = stream.take(min(allowed, 256))
            for f in batch:
                send(text, f)
            sent += len(batch)
            await asyncio.sleep(0)

    task = asyncio.get_running_loop().create_task(pump())
    _emit("attached", edges=n_edges)
    await asyncio.sleep(cfg.get("warmup_s", 1.5))
    start_counts = [e.count for e in edges]
    t0 = time.perf_counter()
    _emit("measure_start", sent=sent)
    await asyncio.sleep(cfg.get("measure_s", 5.0))
    elapsed = time.perf_counter() - t0
    end_counts = [e.count for e in edges]
    _emit("measure_end", sent=sent)
    stop = True
    await task
    deadline = time.monotonic() + 30  # everything sent must arrive (closed loop: ≤ window)
    while delivered_min() < sent and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    delivered = [e - s for s, e in zip(start_counts, end_counts, strict=True)]
    _emit(
        "result",
        sent=sent,
        received=[e.count for e in edges],
        complete=all(e.count == sent for e in edges),
        delivered=delivered,
        seconds=elapsed,
        frames_per_s=min(delivered) / elapsed,
        deliveries_per_s=sum(delivered) / elapsed,
        edge_errors=errors[:5],
        client_errors=client_errors[:5],
        client_error_count=len(client_errors),
        bytes_per_frame=round(sum(len(f) for f in stream.take(700)) / 700, 1),
    )
    for conn in (client, *edges):
        if conn.transport is not None:
            conn.transport.send_close()
            conn.transport.disconnect()
