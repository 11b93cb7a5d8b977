"""Three ``rawp serve`` nodes on one Redis (and on a Redis Cluster): a node dies mid-turn.

The client is on node A, one edge on B and one on C. The client streams a turn with a tool
call; A is killed with SIGKILL mid-turn. B or C notices A is dead, claims it and finalizes
the session exactly once (§7.8.2); the edges see the synthetic frames once. The client
reattaches through B with its ``session.history`` (what it produced while cut off), the
master unfinalizes (§7.8.3), and the client goes on with another turn. At the end both edges
hold the same view as a fresh replay of the log, each received exactly the entries live
delivery owes it (in seq order, no gap, no duplicate), and every frame the client produced
is in the log exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol import codec
from protocol.errors import ProtocolError
from protocol.finalize import fold_entry
from protocol.frames import History
from protocol.state import Phase, SessionState
from relay.store.base import LogEntry
from relay.store.redis import RedisStore
from tests.support.masters import MasterProcess, start_all
from tests.support.redis_server import RedisCluster, RedisServer
from tests.support.wire import Peer, envelope, new_turn_id, usage_payload

__all__: list[str] = []

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

KEY = "rk_multinode_key"
SYNTHETIC = ["agent.text.done", "tool.invoke.result", "session.turn.end", "agent.state"]


def flush(server: RedisServer | RedisCluster) -> None:
    """Empty our own Redis (or every primary of our cluster) before a scenario."""
    nodes = server.nodes if isinstance(server, RedisCluster) else [server]
    for node in nodes:
        with contextlib.closing(node.client()) as c:
            c.flushall()


@contextlib.asynccontextmanager
async def three_nodes(
    url: str, tmp_path: Path, *, cluster: bool
) -> AsyncIterator[list[MasterProcess]]:
    """Masters A, B and C on ``url``; stopped (or already killed) at the end."""
    masters = [MasterProcess(n, url, api_key=KEY, log_dir=tmp_path, cluster=cluster) for n in "ABC"]
    try:
        await asyncio.to_thread(start_all, masters)
        yield masters
    finally:
        # in threads: this loop must go on answering the masters' closing handshakes
        await asyncio.gather(*(asyncio.to_thread(m.stop) for m in masters))


def fold_all(frames: list[tuple[bytes, str]]) -> SessionState:
    """Fold (envelope bytes, sender role) pairs from scratch, as any view of the log does."""
    state = SessionState()
    for data, role in frames:
        try:
            state = fold_entry(state, codec.decode(data), role)  # type: ignore[arg-type]
        except ProtocolError:
            continue
    return state


def is_synthetic(frame: dict[str, Any]) -> bool:
    """True for a frame made by §7.8.1 finalization."""
    return bool((frame.get("metadata") or {}).get("synthetic"))


def client_history(frames: list[dict[str, Any]]) -> dict[str, Any]:
    """The client's §7.1.1 session.history payload (not truncated)."""
    return {
        "frames": frames,
        "buffer_status": {
            "policy_applied": "RING",
            "truncated": False,
            "lost_frame_count": 0,
            "buffer_high_watermark": sum(len(json.dumps(f)) for f in frames),
        },
        "last_sync_timestamp": frames[0]["timestamp"],
        "last_message_id": frames[0]["message_id"],
    }


async def until(peer: Peer, predicate: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    """The peer's frames up to the first that satisfies ``predicate`` (10 s at most)."""
    return await peer.recv_until(predicate, timeout=10.0)


async def crash_mid_turn(
    url: str, tmp_path: Path, *, cluster: bool, then_expire: bool = False
) -> None:
    """The scenario of this module, against the Redis at ``url``.

    ``then_expire``: afterwards the client's new node B is killed too and never comes back;
    its reattach window (5 s, armed in Redis by C's sweep) runs out on C, which ends the
    session (reason timeout) for C's edge.
    """
    sid = f"s-crash-{uuid.uuid4().hex[:8]}"
    async with three_nodes(url, tmp_path, cluster=cluster) as (node_a, node_b, node_c):
        client = await Peer.open(node_a.ws_url, sid, role="client", token=KEY, create=True)
        edges = [
            await Peer.open(node.ws_url, sid, role="edge", token=KEY) for node in (node_b, node_c)
        ]
        for edge in edges:
            edge.show_status = True  # every logged frame: their views are compared with the log
        turn = new_turn_id()
        produced: list[dict[str, Any]] = []  # every frame the client made, in order
        first_steps: list[tuple[str, dict[str, Any]]] = [
            ("session.turn.start", {"turn_id": turn, "turn_index": 0}),
            ("agent.state", {"state": "thinking"}),
            ("agent.thinking.delta", {"block_id": "k1", "delta": "where is it?"}),
            ("agent.thinking.done", {"block_id": "k1"}),
            ("agent.state", {"state": "responding"}),
            ("agent.text.delta", {"block_id": "b1", "delta": "Let me look"}),
            ("agent.state", {"state": "tool_calling"}),
            ("tool.invoke.request", {"call_id": "c1", "tool_name": "ls", "input": {"p": "/"}}),
        ]
        for type_, payload in first_steps:
            produced.append(await client.send(type_, payload))
        last_id = produced[-1]["message_id"]
        for edge in edges:  # A committed all of it; B and C relayed it from pub/sub
            await until(edge, lambda f: f.get("message_id") == last_id)
        # One more frame, then the crash: A may or may not have logged it.
        produced.append(await client.send("agent.text.delta", {"block_id": "b1", "delta": "…"}))
        node_a.kill()
        killed_at = time.monotonic()

        # B or C claims A and finalizes, once; both edges see the same synthetic frames.
        synthetic_ids: list[list[str]] = []
        for edge in edges:
            frames = await until(edge, lambda f: is_synthetic(f) and f["type"] == "agent.state")
            made = [f for f in frames if is_synthetic(f)]
            assert [f["type"] for f in made] == SYNTHETIC
            assert {f["sender"]["participant_id"] for f in made} <= {"B", "C"}
            assert made[1]["payload"]["status"] == "cancelled"
            assert made[2]["payload"] == {"turn_id": turn, "stop_reason": "disconnected"}
            detached = [f for f in frames if f["type"] == "session.presence"]
            assert detached[-1]["payload"]["state"] == "detached"
            synthetic_ids.append([f["message_id"] for f in made])
        assert synthetic_ids[0] == synthetic_ids[1]
        assert time.monotonic() - killed_at < 8

        # The client was cut off meanwhile and went on; it reattaches through B.
        cut_off = [
            ("tool.invoke.result", {"call_id": "c1", "status": "ok", "output": "bin etc"}),
            ("agent.state", {"state": "responding"}),
            ("agent.text.delta", {"block_id": "b1", "delta": " found it"}),
            ("agent.text.done", {"block_id": "b1"}),
            ("agent.state", {"state": "idle"}),
            ("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"}),
            ("session.usage", usage_payload(turn)),
        ]
        produced += [envelope(sid, t, p) for t, p in cut_off]
        seen = max((f["seq"] for f in client.received if "seq" in f), default=0)
        back = await Peer.open(
            node_b.ws_url,
            sid,
            role="client",
            token=KEY,
            participant_id=client.participant_id,
            resume={"last_seq": seen},
        )
        welcome = back.welcome["payload"]
        assert welcome["resumed"] is True
        assert welcome["session"]["status"] == "idle"  # finalized: the turn was closed
        backlog = await back.recv(10)
        assert backlog["type"] == "session.history"
        # (the master's session.status frames, notes §17.4, looked past)
        missed = [f["type"] for f in backlog["payload"]["frames"] if f["type"] != "session.status"]
        assert missed[-len(SYNTHETIC) :] == SYNTHETIC
        # welcome.received names the last frame A logged (recomputed from the log by the
        # recovery); the history repeats that one too, to prove it is logged only once.
        received = welcome["received"]["last_message_id"]
        ids = [f["message_id"] for f in produced]
        assert received in ids[len(ids) - len(cut_off) - 2 :]
        resend = produced[ids.index(received) :]
        await back.send("session.history", client_history(resend))
        for edge in edges:
            frames = await until(edge, lambda f: f["type"] == "session.history")
            relayed = frames[-1]["payload"]
            assert relayed["buffer_status"]["truncated"] is False
            inner = [f["message_id"] for f in relayed["frames"]]
            assert received not in inner  # already logged: taken out of the entry

        # Live again, through B: another turn reaches C through pub/sub.
        turn2 = new_turn_id()
        second_turn: list[tuple[str, dict[str, Any]]] = [
            ("session.turn.start", {"turn_id": turn2, "turn_index": 1}),
            ("agent.text.delta", {"block_id": "b2", "delta": "next"}),
            ("agent.text.done", {"block_id": "b2"}),
            ("session.turn.end", {"turn_id": turn2, "stop_reason": "end_turn"}),
            ("session.usage", usage_payload(turn2)),
        ]
        for type_, payload in second_turn:
            produced.append(await back.send(type_, payload))
        final_id = produced[-1]["message_id"]
        for edge in edges:
            await until(edge, lambda f: f.get("message_id") == final_id)
        assert not [f for f in back.received if f["type"] == "session.error"], back.received

        # --- the log, read straight from the store -----------------------------------
        store = RedisStore(url, cluster=cluster)
        try:
            log = await store.read(sid)
        finally:
            await store.close()
        assert [e.seq for e in log] == list(range(1, len(log) + 1))
        replay = fold_all([(e.data, e.sender_role) for e in log])
        assert replay.phase is Phase.IDLE
        assert replay.turns_completed == 2
        assert not replay.finalized
        assert not replay.open_calls
        assert not replay.open_text

        # Finalization happened exactly once, and it is what the edges saw.
        logged_synthetic = [e for e in log if is_synthetic(json.loads(e.data))]
        assert [e.message_id for e in logged_synthetic] == synthetic_ids[0]

        # Every frame the client produced is in the log exactly once.
        counts = Counter(client_frames(log, client.participant_id))
        assert counts == Counter(f["message_id"] for f in produced)
        assert set(counts.values()) == {1}

        # Each edge got exactly what live delivery owes it, in order, and its view is the
        # view of a fresh replay of the log.
        for edge in edges:
            joined = edge.welcome["payload"]["session"]["head_seq"]
            owed = [
                e.seq for e in log if e.seq > joined and e.delivered_to(edge.participant_id, "edge")
            ]
            while len([f for f in edge.received if "seq" in f]) < len(owed):
                await edge.recv(10)  # a session.status logged after the last frame read
            got = [f for f in edge.received if "seq" in f]
            assert [f["seq"] for f in got] == owed
            view = fold_all(
                [
                    (raw.encode(), json.loads(raw)["sender"]["role"])
                    for raw in edge.raw
                    if '"seq"' in raw
                ]
            )
            assert view == replay

        if then_expire:
            node_b.kill()
            edge_c = edges[1]
            frames = await edge_c.recv_until(lambda f: f["type"] == "session.deleted", timeout=15)
            assert frames[0]["type"] == "session.presence"
            assert frames[0]["payload"]["state"] == "detached"
            assert not [f for f in frames if is_synthetic(f)]  # the client was idle
            assert frames[-1]["payload"]["reason"] == "timeout"
            assert frames[-1]["sender"]["participant_id"] == "C"
            assert await edge_c.closed_with(10) == 1000


def client_frames(log: list[LogEntry], client_id: str) -> Iterator[str]:
    """Message ids of the client's frames in the log: top-level entries and history frames."""
    for entry in log:
        if entry.sender_id != client_id:
            continue
        frame = codec.decode(entry.data)
        if isinstance(frame, History):
            for raw in frame.payload.frames:
                yield codec.decode(bytes(raw)).message_id
        else:
            yield entry.message_id


async def test_node_killed_mid_turn_is_finalized_once_and_undone_on_reattach(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """Kill -9 the client's node mid-turn: finalized once, undone on reattach; windows expire."""
    flush(redis_server)
    await crash_mid_turn(redis_server.url, tmp_path, cluster=False, then_expire=True)


async def test_the_same_on_a_redis_cluster(redis_cluster: RedisCluster, tmp_path: Path) -> None:
    """The crash scenario against a three-primary Redis Cluster (--redis-cluster)."""
    flush(redis_cluster)
    await crash_mid_turn(redis_cluster.url, tmp_path, cluster=True)
