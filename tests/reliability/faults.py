"""Seeded fault trials: drops, duplicates and delays mid-turn; the log and every view agree.

One trial (:func:`run_trial`) is a session on a running master: a client that streams
:class:`bench._workload.AgentStream` turns and two edges, all on raw sockets, while a seeded
random plan injects faults between frames:

* ``drop_client`` — the client's TCP connection is cut (no closing handshake) mid-turn; it
  reconnects with its participant id and, like the client library, sends one
  ``session.history`` with every frame after ``welcome.received.last_message_id``;
* ``drop_edge`` — an edge is cut and reattaches with its participant id and cursor;
* ``duplicate`` — the client sends a frame it already sent (same ``message_id``);
* ``delay`` — the client pauses a few milliseconds before the next frame;
* ``store_restart``, ``node_kill`` — **hooks** for the multi-node work: a :class:`Target`
  that can restart its store or kill -9 a node says so in ``faults``; the in-process
  target cannot, so plans never draw them there.

Then every check of notes §8: (1) every client frame is in the log exactly once, in
production order — acknowledged ones (``welcome.received``) included; (3) every edge's
view, folded from what it received live and in backlogs with ``protocol.finalize.fold_entry``,
equals the fold of the log from seq 1; and the master's own state equals it too.
Used by :mod:`tests.reliability.test_faults` (a short slice) and ``make bench ARGS=faults``
(1,000 trials).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from bench._workload import TIMESTAMP, AgentStream, hello
from bench._wsraw import RawWS, open_raw
from protocol import codec
from protocol.errors import ProtocolError
from protocol.finalize import fold_entry
from protocol.state import SessionState
from tests.reliability.fuzzing import same_view, view_key

__all__ = ["FAULTS", "InProcessTarget", "Target", "TrialResult", "run_trial"]

FAULTS: Final = ("drop_client", "drop_edge", "duplicate", "delay", "store_restart", "node_kill")


class Target(Protocol):
    """A master (or a cluster of them) to run trials on."""

    host: str
    port: int
    api_key: str
    faults: frozenset[str]  # which of FAULTS this target can inject

    async def log(self, session_id: str) -> list[tuple[int, str, bytes]]:
        """(seq, sender_role, data) of every entry, in seq order."""
        ...

    async def master_state(self, session_id: str) -> SessionState | None:
        """The master's live state of the session, when the target can see it."""
        ...

    async def restart_store(self) -> None:
        """Restart the store (Redis) under the running master(s) — multi-node hook."""
        ...

    async def kill_node(self) -> None:
        """kill -9 one master node; its sockets drop — multi-node hook."""
        ...


class InProcessTarget:
    """A :class:`relay.server.Master` in this process (memory store)."""

    faults = frozenset({"drop_client", "drop_edge", "duplicate", "delay"})

    def __init__(self, master: Any, api_key: str) -> None:
        self.master = master
        self.host = "127.0.0.1"
        self.port = master.ws_port
        self.api_key = api_key

    async def log(self, session_id: str) -> list[tuple[int, str, bytes]]:
        return [(e.seq, e.sender_role, e.data) for e in await self.master.store.read(session_id)]

    async def master_state(self, session_id: str) -> SessionState | None:
        session = self.master.hub.sessions.get(session_id)
        return None if session is None else session.state

    async def restart_store(self) -> None:
        raise NotImplementedError("the memory store cannot restart under a running master")

    async def kill_node(self) -> None:
        raise NotImplementedError("one in-process master: no node to kill -9")


@dataclass
class TrialResult:
    """What one trial did and found."""

    seed: int
    frames: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    log_entries: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems


class _Edge:
    def __init__(self, name: str) -> None:
        self.name = name
        self.ws: RawWS | None = None
        self.pid: str | None = None
        self.received: list[bytes] = []
        self.last_seq = 0

    def on_message(self, data: bytes) -> None:
        self.received.append(data)
        frame = json.loads(data)
        if frame["type"] == "session.history" and frame["sender"]["role"] == "master":
            for inner in frame["payload"]["frames"]:
                self.last_seq = max(self.last_seq, int(inner["seq"]))
        elif "seq" in frame:
            self.last_seq = max(self.last_seq, int(frame["seq"]))

    def view(self) -> tuple[SessionState, list[str]]:
        state = SessionState(name=self.name)
        errors: list[str] = []
        for data in self.received:
            frame = codec.decode(data)
            backlog = frame.type == "session.history" and frame.seq is None
            if frame.seq is None and not backlog:
                continue  # not a log entry (the welcome, errors to this edge only)
            role = frame.sender.role if frame.sender is not None else "master"
            try:
                state = fold_entry(state, frame, role)
            except ProtocolError as exc:
                errors.append(f"seq {frame.seq} {frame.type}: {exc.code} {exc.message}")
        return state, errors


async def _attach(
    target: Target, first: bytes, edge: _Edge | None = None
) -> tuple[RawWS, dict[str, Any]]:
    ws = await open_raw(target.host, target.port)
    ws.send_text(first)
    welcome = json.loads(await ws.recv(timeout=10))
    if welcome.get("type") != "connection.welcome":
        raise AssertionError(f"no welcome: {welcome}")
    if edge is not None:
        ws.on_message = edge.on_message
        while ws.messages:
            edge.on_message(ws.messages.popleft())
    return ws, welcome


def _history(session_id: str, frames: list[bytes], last_id: str) -> bytes:
    inner = b",".join(frames)
    size = sum(len(f) for f in frames)
    status = (
        b'{"policy_applied":"RING","truncated":false,"lost_frame_count":0,'
        b'"buffer_high_watermark":%d}' % size
    )
    return (
        b'{"type":"session.history","message_id":"h-%s","session_id":"%s","timestamp":"%s",'
        b'"payload":{"frames":[%s],"buffer_status":%s,"last_sync_timestamp":"%s",'
        b'"last_message_id":"%s"}}'
        % (
            codec.new_message_id().encode(),
            session_id.encode(),
            TIMESTAMP.encode(),
            inner,
            status,
            TIMESTAMP.encode(),
            last_id.encode(),
        )
    )


def _client_ids_in_log(log: list[tuple[int, str, bytes]]) -> list[str]:
    ids: list[str] = []
    for _seq, role, data in log:
        if role != "client":
            continue
        frame = json.loads(data)
        if frame["type"] == "session.history":
            ids += [f["message_id"] for f in frame["payload"]["frames"]]
        else:
            ids.append(frame["message_id"])
    return ids


def _replay(log: list[tuple[int, str, bytes]], name: str) -> tuple[SessionState, list[str]]:
    state = SessionState(name=name)
    errors: list[str] = []
    for seq, role, data in log:
        try:
            state = fold_entry(state, codec.decode(data), role)  # type: ignore[arg-type]
        except ProtocolError as exc:
            errors.append(f"seq {seq}: {exc.code} {exc.message}")
    return state, errors


async def run_trial(
    target: Target,
    seed: int,
    *,
    frames: int = 60,
    rates: dict[str, float] | None = None,
) -> TrialResult:
    """One seeded trial (see the module docstring); never raises for a finding."""
    rng = random.Random(seed)
    rates = {
        "drop_client": 0.03,
        "drop_edge": 0.03,
        "duplicate": 0.05,
        "delay": 0.08,
        **(rates or {}),
    }
    plan = [f for f in rates if f in target.faults and rates[f] > 0]
    result = TrialResult(seed=seed)
    sid = f"s-trial-{seed}-{rng.getrandbits(32):08x}"
    key = target.api_key
    script = AgentStream(sid, seed=seed, prefix=f"t{seed}").take(frames)
    ids = [json.loads(f)["message_id"] for f in script]
    client, welcome = await _attach(target, hello(sid, "client", key, create=True))
    client.on_message = lambda data: None
    client_pid = welcome["payload"]["participant_id"]
    name = welcome["payload"]["session"]["name"]
    edges = [_Edge(name), _Edge(name)]
    for e in edges:
        e.ws, w = await _attach(target, hello(sid, "edge", key), e)
        e.pid = w["payload"]["participant_id"]
        e.last_seq = int(w["payload"]["session"]["head_seq"])
    acknowledged: set[str] = set()
    sent = 0
    try:
        while sent < frames:
            roll = rng.random()
            fault = None
            acc = 0.0
            for name in plan:
                acc += rates[name]
                if roll < acc:
                    fault = name
                    break
            if fault == "drop_client":
                result.faults[fault] += 1
                client.abort()
                await asyncio.sleep(rng.uniform(0, 0.03))
                first = hello(sid, "client", key, participant_id=client_pid)
                client, welcome = await _attach(target, first)
                client.on_message = lambda data: None
                last = (welcome["payload"].get("received") or {}).get("last_message_id")
                upto = ids.index(last) + 1 if last in ids else 0
                acknowledged.update(ids[:upto])
                client.send_text(_history(sid, script[upto:sent], last or ""))
            elif fault == "drop_edge":
                result.faults[fault] += 1
                e = rng.choice(edges)
                assert e.ws is not None
                e.ws.abort()
                await asyncio.sleep(rng.uniform(0, 0.03))
                first = hello(
                    sid, "edge", key, participant_id=e.pid, resume={"last_seq": e.last_seq}
                )
                e.ws, _ = await _attach(target, first, e)
            elif fault == "duplicate" and sent:
                result.faults[fault] += 1
                client.send_text(script[rng.randrange(sent)])
            elif fault == "delay":
                result.faults[fault] += 1
                await asyncio.sleep(rng.uniform(0, 0.01))
            client.send_text(script[sent])
            sent += 1
            if sent % 8 == 0:
                await asyncio.sleep(0)
        result.frames = sent
        # Let everything land: the edges catch up to the head of what they are owed.
        await _settle(target, sid, edges)
        await _check(target, sid, ids[:sent], acknowledged, edges, result)
    except Exception as exc:  # a hang or a refusal is a finding, not a crash of the runner
        result.problems.append(f"trial raised {exc!r}")
    finally:
        for ws in (client, *(e.ws for e in edges)):
            if ws is not None:
                ws.abort()
    return result


async def _settle(target: Target, sid: str, edges: list[_Edge], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        log = await target.log(sid)
        owed = {
            e.pid: max(
                (s for s, _r, d in log if not _excluded(d, e.pid)),
                default=0,
            )
            for e in edges
        }
        if all(e.last_seq >= owed[e.pid] for e in edges) and log:
            await asyncio.sleep(0.02)
            if len(await target.log(sid)) == len(log):
                return
        if asyncio.get_running_loop().time() > deadline:
            return
        await asyncio.sleep(0.01)


def _excluded(data: bytes, pid: str | None) -> bool:
    """Presence about ``pid`` is not sent to it (the only exclusion for an edge here)."""
    return (
        pid is not None
        and b'"participant_id":"%s"' % pid.encode() in data
        and (b'"type":"session.presence"' in data)
    )


async def _check(
    target: Target,
    sid: str,
    produced: list[str],
    acknowledged: set[str],
    edges: list[_Edge],
    result: TrialResult,
) -> None:
    log = await target.log(sid)
    result.log_entries = len(log)
    logged = _client_ids_in_log(log)
    counts = Counter(logged)
    twice = [m for m, c in counts.items() if c > 1]
    if twice:
        result.problems.append(f"client frames logged more than once: {twice[:5]}")
    missing_ack = sorted(acknowledged - set(logged))
    if missing_ack:
        result.problems.append(f"acknowledged frames missing from the log: {missing_ack[:5]}")
    if logged != produced and not twice:
        first = next(
            (i for i, (a, b) in enumerate(zip(logged, produced, strict=False)) if a != b),
            min(len(logged), len(produced)),
        )
        result.problems.append(
            f"log order != production order at {first}: log {logged[first : first + 3]} "
            f"vs produced {produced[first : first + 3]} ({len(logged)} vs {len(produced)})"
        )
    replay, replay_errors = _replay(log, edges[0].name)
    if replay_errors:
        result.problems.append(f"the log does not replay: {replay_errors[:3]}")
    for i, e in enumerate(edges):
        view, errors = e.view()
        if errors:
            result.problems.append(f"edge {i} could not fold what it got: {errors[:3]}")
        if not same_view(view, replay):
            result.problems.append(f"edge {i} view != replay of the log: {_diff(view, replay)}")
    live = await target.master_state(sid)
    if live is not None and not same_view(live, replay):
        result.problems.append(f"master state != replay of the log: {_diff(live, replay)}")


def _diff(a: SessionState, b: SessionState) -> str:
    ka, kb = view_key(a), view_key(b)
    return "; ".join(
        f"{k}: {ka.get(k)!r:.100} vs {kb.get(k)!r:.100}" for k in kb if ka.get(k) != kb.get(k)
    )
