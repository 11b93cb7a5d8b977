"""Jepsen-style fault trials against real ``rawp serve`` nodes sharing one real redis-server.

:class:`FaultCluster` starts a redis-server of its own (AOF, ``appendfsync always``, on a
free loopback port), one :class:`~tests.faults.proxy.FaultProxy` per node between the node
and Redis, and ``rawp serve`` nodes on fixed free ports (so a killed node comes back where it
was). Only processes it started are signalled, by their PIDs.

One trial (:func:`run_trial`) is one new session: a client streams seeded turns (text
deltas, tool calls, usage) into a node, two edges watch through random nodes, and a seeded
plan injects faults while it streams:

========================  ===================================================================
``node_pause_long``       SIGSTOP the client's node longer than ``--node-dead-after`` (it is
                          declared dead and swept), then SIGCONT: fencing must keep it out
``node_pause_short``      SIGSTOP a node briefly (not declared dead), then SIGCONT
``node_kill``             kill -9 a node, start it again (same id and ports)
``redis_pause``           SIGSTOP / SIGCONT redis-server briefly
``redis_pause_long``      SIGSTOP redis-server past the nodes' Redis timeout (5 s): calls
                          time out and are retried on new connections while the old copies
                          wait in Redis's socket buffers, to run when it resumes; every node
                          looks dead once it does (the declared-dead path, fencing)
``redis_kill``            kill -9 redis-server and start it again (AOF replayed)
``proxy_cut``             cut every connection between a node and Redis
``proxy_delay``           hold a node's Redis replies back for a while
``proxy_lose_replies``    a node's scripts run but their replies are lost, then the cut and
                          a while of refused connections (the retries fail too: frames the
                          log holds are answered ``store_unavailable``)
``client_drop``           the client's TCP connection is cut; it reattaches on a random node
``edge_drop``             an edge is cut; it reattaches on a random node with its cursor
========================  ===================================================================

The client behaves as docs/protocol.md asks of a producer: on reattach it sends one
``session.history`` with every frame after ``welcome.received``; on a ``store_unavailable``
refusal it sends everything again from the first refused frame, in order (go-back-N).

Then :func:`check` proves, from the log as Redis holds it:

1. every frame the client produced is in the log exactly once and in production order (a
   history's frames count where the history sits). **Acknowledged** is, until producer acks
   (notes §16.3) exist, "an edge received it, or it is in the log as a reader sees it"; the
   trial ends only once the edge received the client's last frame, so every produced frame
   is acknowledged and must be there;
2. no client frame follows a §7.8.1 finalization in the log until the client's next
   ``session.history`` (the unfinalization): a node declared dead logs nothing after its
   sweep;
3. every edge's view (folded from what it received live and in backlogs) and a new edge's
   view (its backlog from seq 0) equal the replay of the log, which itself folds cleanly;
4. every ``welcome.received`` the client got names the last of its frames the log held
   right then (read before the client sent anything more).

Refusals the client receives are reported (``TrialResult.notes``), not failures: a node
declared dead judges what its socket still held against the finalized state before it
notices; those frames come back in the client's history and are checked by 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bench._procs import _child_setup
from bench._workload import TIMESTAMP, hello
from bench._wsraw import RawWS, open_raw
from protocol import codec
from protocol.errors import ProtocolError
from protocol.finalize import fold_entry
from protocol.state import SessionState
from relay.cli import announced_urls
from relay.store.base import LogEntry
from relay.store.redis import RedisStore
from tests.reliability.fuzzing import same_view, view_key
from tests.support.redis_server import RedisServer, free_port
from tests.support.wire import usage_payload

__all__ = ["API_KEY", "FAULTS", "FaultCluster", "TrialResult", "check", "run_trial"]

API_KEY: Final = "rk_faults_key"
FAULTS: Final = (
    "node_pause_long",
    "node_pause_short",
    "node_kill",
    "redis_pause",
    "redis_pause_long",
    "redis_kill",
    "proxy_cut",
    "proxy_delay",
    "proxy_lose_replies",
    "client_drop",
    "edge_drop",
)
_SERVE: Final = "import sys; from rawp.cli import main; sys.exit(main())"


@dataclass(eq=False)
class Node:
    """One ``rawp serve`` process of the cluster."""

    node_id: str
    ws_port: int
    http_port: int
    proxy: Any  # FaultProxy (imported lazily with the cluster)
    process: asyncio.subprocess.Process | None = None
    paused: bool = False
    drain: asyncio.Task[None] | None = None
    faulted: asyncio.Lock = field(default_factory=asyncio.Lock)  # one node fault at a time

    @property
    def up(self) -> bool:
        """Running and not paused: a client may connect here."""
        return self.process is not None and self.process.returncode is None and not self.paused


class FaultCluster:
    """redis-server + one proxy per node + ``rawp serve`` nodes, all owned by this object."""

    def __init__(
        self, directory: Path, *, nodes: int = 2, dead_after_s: float = 1.5, beat_s: float = 0.2
    ) -> None:
        self.directory = directory
        self.redis = RedisServer(directory / "redis")
        self.dead_after_s = dead_after_s
        self.beat_s = beat_s
        self.nodes: list[Node] = []
        self._count = nodes
        self.store: RedisStore | None = None  # the checker's reader, straight to Redis

    async def start(self) -> None:
        """Start Redis, the proxies and the nodes."""
        from tests.faults.proxy import FaultProxy

        self.redis.start()
        for i in range(self._count):
            proxy = FaultProxy(self.redis.port)
            await proxy.start()
            node = Node(f"fault-n{i}", free_port(), free_port(), proxy)
            self.nodes.append(node)
            await self.spawn(node)
        self.store = RedisStore(self.redis.url, node_id="fault-checker")

    async def stop(self) -> None:
        """Stop everything this cluster started."""
        for node in self.nodes:
            await self._end(node)
            await node.proxy.stop()
        if self.store is not None:
            with contextlib.suppress(Exception):
                await self.store.close()
        self.redis.kill()

    async def spawn(self, node: Node, timeout: float = 30.0) -> None:
        """Start ``rawp serve`` for ``node`` and wait until it listens."""
        argv = [
            sys.executable,
            "-c",
            _SERVE,
            "serve",
            "--host",
            "127.0.0.1",
            "--ws-port",
            str(node.ws_port),
            "--http-port",
            str(node.http_port),
            "--store",
            f"redis://127.0.0.1:{node.proxy.port}/0",
            "--api-key",
            API_KEY,
            "--node-id",
            node.node_id,
            "--node-heartbeat",
            str(self.beat_s),
            "--node-dead-after",
            str(self.dead_after_s),
            "--reattach-window",
            "60",
            "--log-level",
            "warning",
            "--rate-frames",
            "1000000",
        ]
        log = (self.directory / f"{node.node_id}.log").open("ab")
        try:
            node.process = await asyncio.create_subprocess_exec(
                *argv,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
                stdin=asyncio.subprocess.DEVNULL,
                preexec_fn=_child_setup,  # dies with the test run (PR_SET_PDEATHSIG)
            )
        finally:
            log.close()
        node.paused = False
        assert node.process.stdout is not None
        async with asyncio.timeout(timeout):
            while announced_urls((line := await node.process.stdout.readline()).decode()) is None:
                if not line:  # EOF: it exited (readline would return at once forever)
                    code = await node.process.wait()
                    raise RuntimeError(f"{node.node_id} exited {code} before listening")
        node.drain = asyncio.get_running_loop().create_task(_drain(node.process))

    async def _end(self, node: Node) -> None:
        process = node.process
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            if node.paused:
                os.kill(process.pid, signal.SIGCONT)
            process.kill()
        await process.wait()
        node.paused = False

    # --- faults ---------------------------------------------------------------------------

    def pause(self, node: Node) -> None:
        """SIGSTOP the node's process."""
        assert node.process is not None
        os.kill(node.process.pid, signal.SIGSTOP)
        node.paused = True

    def resume(self, node: Node) -> None:
        """SIGCONT the node's process."""
        assert node.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(node.process.pid, signal.SIGCONT)
        node.paused = False

    async def kill_and_restart(self, node: Node, down_s: float) -> None:
        """kill -9 the node, wait, start it again (same id, same ports)."""
        await self._end(node)
        await asyncio.sleep(down_s)
        await self.spawn(node)

    def pause_redis(self) -> None:
        """SIGSTOP redis-server."""
        pid = self.redis.pid
        if pid is not None:
            os.kill(pid, signal.SIGSTOP)

    def resume_redis(self) -> None:
        """SIGCONT redis-server."""
        pid = self.redis.pid
        if pid is not None:
            os.kill(pid, signal.SIGCONT)

    async def restart_redis(self, down_s: float) -> None:
        """kill -9 redis-server and start it again on the same port and directory."""
        self.redis.kill()
        await asyncio.sleep(down_s)
        await asyncio.to_thread(self.redis.start)

    async def heal(self) -> None:
        """Undo whatever a trial left: resume, restart, heal the proxies; wait for Redis."""
        self.resume_redis()
        if not self.redis.running:
            await asyncio.to_thread(self.redis.start)
        for node in self.nodes:
            node.proxy.heal()
            if node.paused:
                self.resume(node)
            if node.process is None or node.process.returncode is not None:
                await self.spawn(node)

    def up_nodes(self) -> list[Node]:
        """Nodes a participant may connect to now."""
        return [n for n in self.nodes if n.up]

    async def log(self, session_id: str) -> list[LogEntry]:
        """The session's log as Redis holds it (waits out an outage, bounded)."""
        assert self.store is not None
        async with asyncio.timeout(30):
            while True:
                try:
                    return await self.store.read(session_id)
                except Exception:
                    await asyncio.sleep(0.1)


async def _drain(process: asyncio.subprocess.Process) -> None:
    assert process.stdout is not None
    with contextlib.suppress(Exception):
        while await process.stdout.read(1 << 16):
            pass


# --- the workload -------------------------------------------------------------------------


def _script(session_id: str, rng: random.Random, turns: int) -> list[bytes]:
    """A seeded client stream: turns with text blocks, tool calls and usage (valid RAWP)."""
    frames: list[dict[str, Any]] = []

    def add(type_: str, payload: dict[str, Any]) -> None:
        frames.append(
            {
                "type": type_,
                "message_id": codec.new_message_id(),
                "session_id": session_id,
                "timestamp": TIMESTAMP,
                "payload": payload,
            }
        )

    for index in range(turns):
        turn = codec.new_message_id()
        add("session.turn.start", {"turn_id": turn, "turn_index": index})
        for block in range(rng.randint(1, 2)):
            block_id = f"b{index}-{block}"
            for n in range(rng.randint(3, 12)):
                add("agent.text.delta", {"block_id": block_id, "delta": f"{n} "})
            add("agent.text.done", {"block_id": block_id})
        if rng.random() < 0.5:
            call = f"c{index}"
            add("tool.invoke.request", {"call_id": call, "tool_name": "t", "input": {}})
            add("tool.invoke.result", {"call_id": call, "status": "ok", "output": "x"})
        add("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
        add("session.usage", usage_payload(turn))
    return [json.dumps(f, separators=(",", ":")).encode() for f in frames]


def _history(session_id: str, frames: list[bytes], last_id: str) -> bytes:
    size = sum(len(f) for f in frames)
    return json.dumps(
        {
            "type": "session.history",
            "message_id": codec.new_message_id(),
            "session_id": session_id,
            "timestamp": TIMESTAMP,
            "payload": {
                "frames": [json.loads(f) for f in frames],
                "buffer_status": {
                    "policy_applied": "RING",
                    "truncated": False,
                    "lost_frame_count": 0,
                    "buffer_high_watermark": size,
                },
                "last_sync_timestamp": TIMESTAMP,
                "last_message_id": last_id,
            },
        },
        separators=(",", ":"),
    ).encode()


@dataclass
class TrialResult:
    """What one trial did and found."""

    seed: int
    frames: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    log_entries: int = 0
    welcomes: int = 0
    notes: list[str] = field(default_factory=list)  # client refusals: reported, not failures

    @property
    def ok(self) -> bool:
        """No finding."""
        return not self.problems


class _Edge:
    """An edge that records every log entry it receives, live or in a backlog."""

    def __init__(self) -> None:
        self.ws: RawWS | None = None
        self.pid: str | None = None
        self.entries: dict[int, bytes] = {}  # seq -> delivered envelope
        self.duplicates = 0

    def on_message(self, data: bytes) -> None:
        frame = json.loads(data)
        if frame.get("type") == "session.history" and "seq" not in frame:
            for inner in frame["payload"]["frames"]:
                self._add(int(inner["seq"]), json.dumps(inner, separators=(",", ":")).encode())
        elif "seq" in frame:
            self._add(int(frame["seq"]), data)

    def _add(self, seq: int, data: bytes) -> None:
        if seq in self.entries:
            self.duplicates += 1
        self.entries[seq] = data

    @property
    def cursor(self) -> int:
        """The highest seq up to which it has everything."""
        seq = 0
        while seq + 1 in self.entries:
            seq += 1
        return seq


class _Client:
    """The producer: go-back-N on refusals, a history on every reattach."""

    def __init__(self, session_id: str, script: list[bytes]) -> None:
        self.session_id = session_id
        self.script = script
        self.ids = [json.loads(f)["message_id"] for f in script]
        self.index = {m: i for i, m in enumerate(self.ids)}
        self.next = 0  # the frame sent next
        self.sent_max = 0  # frames sent at least once
        self.ws: RawWS | None = None
        self.pid: str | None = None
        self.errors: list[str] = []
        self.received_checks: list[tuple[str | None, int]] = []  # (reported, seq read at)
        self.histories: set[str] = set()  # message ids of the histories it sent

    def on_message(self, data: bytes) -> None:
        frame = json.loads(data)
        if frame.get("type") != "session.error":
            return
        payload = frame["payload"]
        text = str(payload.get("message", ""))
        if payload.get("error_code") == "store_unavailable":
            if any(word in self.histories for word in text.split()) and self.ws is not None:
                self.ws.abort()  # the history was not stored: reattach, which sends another
                return
            # "frame X was not stored": go back to X (or further back, if named)
            for word in text.split():
                at = self.index.get(word)
                if at is not None and at < self.next:
                    self.next = at
        elif payload.get("error_code") != "history_truncated":
            self.errors.append(f"{payload.get('error_code')}: {text[:160]}")


async def _open(
    node: Node, first: bytes, on_message: Any, timeout: float = 10.0
) -> tuple[RawWS, dict[str, Any]]:
    ws = await asyncio.wait_for(open_raw("127.0.0.1", node.ws_port), timeout)
    ws.send_text(first)
    welcome = json.loads(await ws.recv(timeout=timeout))
    if welcome.get("type") != "connection.welcome":
        ws.abort()
        raise ConnectionError(f"no welcome: {str(welcome)[:200]}")
    ws.on_message = on_message
    while ws.messages:
        on_message(ws.messages.popleft())
    return ws, welcome


async def _attach_anywhere(
    cluster: FaultCluster, rng: random.Random, first: Any, on_message: Any, deadline: float
) -> tuple[RawWS, dict[str, Any]]:
    """Attach through any node that is up, retrying (bounded) while the cluster heals."""
    last: BaseException | None = None
    while time.monotonic() < deadline:
        nodes = cluster.up_nodes()
        if nodes:
            try:
                return await _open(rng.choice(nodes), first(), on_message)
            except Exception as exc:  # refused, reset, handshake failed: try again
                last = exc
        await asyncio.sleep(0.1)
    raise TimeoutError(f"could not attach: {last!r}")


async def _client_attach(
    cluster: FaultCluster, rng: random.Random, client: _Client, deadline: float, result: Any
) -> None:
    sid = client.session_id

    def first() -> bytes:
        if client.pid is None:
            return hello(sid, "client", API_KEY, create=True)
        return hello(sid, "client", API_KEY, participant_id=client.pid)

    ws, welcome = await _attach_anywhere(cluster, rng, first, client.on_message, deadline)
    payload = welcome["payload"]
    reattach = client.pid is not None
    client.pid = payload["participant_id"]
    client.ws = ws
    if not reattach:
        return
    result.welcomes += 1
    received = (payload.get("received") or {}).get("last_message_id")
    client.received_checks.append((received, len(await cluster.log(sid))))
    if received is not None and received not in client.index:
        client.errors.append(f"welcome.received names an unknown frame {received}")
        received = None
    upto = client.index[received] + 1 if received is not None else 0
    # everything after what the master has, sent at least once so far
    resend = client.script[upto : client.sent_max]
    history = _history(sid, resend, received or "")
    client.histories.add(json.loads(history)["message_id"])
    ws.send_text(history)
    client.next = client.sent_max


async def _edge_attach(
    cluster: FaultCluster, rng: random.Random, edge: _Edge, sid: str, deadline: float
) -> None:
    def first() -> bytes:
        if edge.pid is None:
            return hello(sid, "edge", API_KEY, resume={"last_seq": 0})
        return hello(
            sid, "edge", API_KEY, participant_id=edge.pid, resume={"last_seq": edge.cursor}
        )

    edge.ws, welcome = await _attach_anywhere(cluster, rng, first, edge.on_message, deadline)
    edge.pid = welcome["payload"]["participant_id"]


async def _inject(
    cluster: FaultCluster, rng: random.Random, fault: str, state: dict[str, Any]
) -> None:
    """Run one fault to its end (pauses resumed, killed processes started again)."""
    nodes = cluster.nodes
    if fault in ("node_pause_long", "node_pause_short"):
        node = state.get("client_node") or rng.choice(nodes)
        held = cluster.dead_after_s + 1.5 if fault == "node_pause_long" else rng.uniform(0.1, 0.4)
        async with node.faulted:
            if not node.up:
                return
            cluster.pause(node)
            await asyncio.sleep(held)
            cluster.resume(node)
    elif fault == "node_kill":
        node = rng.choice(nodes)
        async with node.faulted:
            if node.up:
                await cluster.kill_and_restart(node, rng.uniform(0.1, 0.5))
    elif fault in ("redis_pause", "redis_pause_long"):
        cluster.pause_redis()
        await asyncio.sleep(rng.uniform(0.2, 1.2) if fault == "redis_pause" else 5.5)
        cluster.resume_redis()
    elif fault == "redis_kill":
        await cluster.restart_redis(rng.uniform(0.1, 0.8))
    elif fault == "proxy_cut":
        rng.choice(nodes).proxy.cut()
    elif fault == "proxy_delay":
        proxy = rng.choice(nodes).proxy
        proxy.delay(rng.uniform(0.1, 0.8))
        await asyncio.sleep(rng.uniform(0.3, 1.5))
        proxy.delay(0.0)
    elif fault == "proxy_lose_replies":
        proxy = rng.choice(nodes).proxy
        await proxy.lose_replies(rng.uniform(0.05, 0.4))
        proxy.refuse(True)
        await asyncio.sleep(rng.uniform(0.0, 1.0))
        proxy.refuse(False)


def _node_of(cluster: FaultCluster, ws: RawWS | None) -> Node | None:
    if ws is None or ws.transport is None:
        return None
    peer = ws.transport.get_extra_info("peername")
    for node in cluster.nodes:
        if peer and peer[1] == node.ws_port:
            return node
    return None


async def run_trial(
    cluster: FaultCluster,
    seed: int,
    *,
    turns: int = 3,
    faults: tuple[str, ...] = FAULTS,
    fault_count: int = 2,
    timeout: float = 60.0,
) -> TrialResult:
    """One seeded trial (module docstring); a finding is a problem, never an exception."""
    rng = random.Random(seed)
    result = TrialResult(seed=seed)
    # a fresh session even when a seed runs again on the same cluster
    sid = f"s-fault-{seed}-{rng.getrandbits(32):08x}-{codec.new_message_id()[:8]}"
    client = _Client(sid, _script(sid, rng, turns))
    edges = [_Edge(), _Edge()]
    deadline = time.monotonic() + timeout
    plan = sorted(
        # in the first two thirds of the stream, so the faults hit it in full flow
        (rng.randrange(len(client.script) * 2 // 3), rng.choice(faults))
        for _ in range(fault_count)
    )
    running: list[asyncio.Task[None]] = []
    state: dict[str, Any] = {}
    try:
        await _client_attach(cluster, rng, client, deadline, result)
        for edge in edges:
            await _edge_attach(cluster, rng, edge, sid, deadline)
        while time.monotonic() < deadline:
            while plan and plan[0][0] <= client.next:
                _at, fault = plan.pop(0)
                result.faults[fault] += 1
                if fault == "client_drop":
                    assert client.ws is not None
                    client.ws.abort()
                elif fault == "edge_drop":
                    victim = rng.choice(edges)
                    if victim.ws is not None:
                        victim.ws.abort()
                else:
                    state["client_node"] = _node_of(cluster, client.ws)
                    running.append(asyncio.create_task(_inject(cluster, rng, fault, state)))
            for edge in edges:
                if edge.ws is None or not edge.ws.open:
                    await _edge_attach(cluster, rng, edge, sid, deadline)
            if client.ws is None or not client.ws.open:
                await _client_attach(cluster, rng, client, deadline, result)
                continue
            if client.next < len(client.script):
                client.ws.send_text(client.script[client.next])
                client.next += 1
                client.sent_max = max(client.sent_max, client.next)
                await asyncio.sleep(rng.uniform(0.002, 0.02))
                continue
            # everything sent: done once an edge has the last frame (then all is logged)
            last = client.ids[-1]
            if any(last.encode() in data for e in edges for data in e.entries.values()):
                break
            await asyncio.sleep(0.05)
        else:
            result.problems.append(
                f"trial did not finish: {client.next}/{len(client.script)} sent, "
                f"faults {dict(result.faults)}"
            )
        await asyncio.gather(*running, return_exceptions=True)
        running.clear()
        await cluster.heal()
        result.frames = len(client.script)
        await check(cluster, sid, client, edges, result, deadline=time.monotonic() + 30)
    except Exception as exc:  # a hang or a crash of the run is a finding too
        result.problems.append(f"trial raised {exc!r}")
    finally:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        for ws in (client.ws, *(e.ws for e in edges)):
            if ws is not None:
                ws.abort()
        with contextlib.suppress(Exception):
            await cluster.heal()
    return result


# --- the checker --------------------------------------------------------------------------


def _client_ids(log: list[LogEntry], client_pid: str | None) -> list[str]:
    """The client's frames in log order, a history's frames where the history sits."""
    ids: list[str] = []
    for entry in log:
        if entry.sender_role != "client" or entry.sender_id != client_pid:
            continue
        if entry.type == "session.history":
            ids += [f["message_id"] for f in json.loads(entry.data)["payload"]["frames"]]
        else:
            ids.append(entry.message_id)
    return ids


def _replay(log: list[LogEntry]) -> tuple[SessionState, list[str]]:
    state = SessionState()
    errors: list[str] = []
    for entry in log:
        try:
            state = fold_entry(state, codec.decode(entry.data), entry.sender_role)  # type: ignore[arg-type]
        except ProtocolError as exc:
            errors.append(f"seq {entry.seq} {entry.type}: {exc.code} {exc.message}")
    return state, errors


def _fold(entries: list[bytes]) -> tuple[SessionState, list[str]]:
    state = SessionState()
    errors: list[str] = []
    for data in entries:
        frame = codec.decode(data)
        role = frame.sender.role if frame.sender is not None else "master"
        try:
            state = fold_entry(state, frame, role)
        except ProtocolError as exc:
            errors.append(f"seq {frame.seq} {frame.type}: {exc.code} {exc.message}")
    return state, errors


def _after_finalization(log: list[LogEntry]) -> list[str]:
    """Client frames logged after a synthetic finalization and before the client's next
    history (what a node declared dead would have logged after its sweep)."""
    found: list[str] = []
    finalized = False
    for entry in log:
        if entry.sender_role == "master" and b'"synthetic":true' in entry.data:
            finalized = True
        elif entry.sender_role == "client":
            if entry.type == "session.history":
                finalized = False
            elif finalized:
                found.append(f"seq {entry.seq} {entry.type}")
    return found


def _diff(a: SessionState, b: SessionState) -> str:
    ka, kb = view_key(a), view_key(b)
    return "; ".join(
        f"{k}: {ka.get(k)!r:.100} vs {kb.get(k)!r:.100}" for k in kb if ka.get(k) != kb.get(k)
    )


async def check(
    cluster: FaultCluster,
    sid: str,
    client: _Client,
    edges: list[_Edge],
    result: TrialResult,
    *,
    deadline: float,
) -> None:
    """Every invariant of the module docstring, on the log as Redis holds it."""
    log = await cluster.log(sid)
    result.log_entries = len(log)
    problems = result.problems
    if [e.seq for e in log] != list(range(1, len(log) + 1)):
        problems.append("the log's seqs are not dense from 1")
    # 1. exactly once, in production order
    logged = _client_ids(log, client.pid)
    twice = [m for m, c in Counter(logged).items() if c > 1]
    if twice:
        problems.append(f"client frames logged more than once: {twice[:3]}")
    if logged != client.ids[: len(logged)]:
        at = next(
            (i for i, (a, b) in enumerate(zip(logged, client.ids, strict=False)) if a != b),
            len(logged),
        )
        positions = [client.index.get(m) for m in logged[at : at + 4]]
        problems.append(f"log order != production order at {at}: {positions}")
    elif result.ok and len(logged) != len(client.ids):
        problems.append(f"acknowledged frames missing: {len(logged)}/{len(client.ids)} logged")
    # 2. nothing from a fenced node after a finalization
    late = _after_finalization(log)
    if late:
        problems.append(f"client frames logged after a finalization: {late[:3]}")
    # 3. views
    replay, errors = _replay(log)
    if errors:
        problems.append(f"the log does not replay: {errors[:2]}")
    fresh = _Edge()
    await _edge_attach(cluster, random.Random(result.seed), fresh, sid, deadline)
    everyone = [*edges, fresh]
    head = log[-1].seq if log else 0
    while time.monotonic() < deadline:
        # an edge is owed every entry but presence about itself
        if all(_caught_up(e, log) for e in everyone):
            break
        for e in everyone:
            if e.ws is None or not e.ws.open:
                await _edge_attach(cluster, random.Random(), e, sid, deadline)
        await asyncio.sleep(0.05)
    for i, e in enumerate(everyone):
        owed = [x.seq for x in log if x.delivered_to(e.pid or "", "edge")]
        got = sorted(s for s in e.entries if s <= head)
        if got != owed:
            problems.append(f"edge {i} got seqs != owed ({len(got)} vs {len(owed)})")
            continue
        view, errors = _fold([e.entries[s] for s in got])
        if errors:
            problems.append(f"edge {i} could not fold what it got: {errors[:2]}")
        if not same_view(view, replay):
            problems.append(f"edge {i} view != replay of the log: {_diff(view, replay)}")
    # 4. welcome.received
    for reported, seen in client.received_checks:
        expected = _client_ids(log[:seen], client.pid)
        want = expected[-1] if expected else None
        if reported != want:
            problems.append(
                f"welcome.received {client.index.get(reported or '')} != last logged "
                f"{client.index.get(want or '')}"
            )
    # Refusals the client got are not findings by themselves: a node that resumes after it
    # was declared dead judges what its socket held against the finalized state before it
    # notices (the frames come back in the client's history, checked above). Reported.
    result.notes.extend(f"client got {e}" for e in client.errors[:3])


def _caught_up(edge: _Edge, log: list[LogEntry]) -> bool:
    owed = {x.seq for x in log if x.delivered_to(edge.pid or "", "edge")}
    return owed <= set(edge.entries)
