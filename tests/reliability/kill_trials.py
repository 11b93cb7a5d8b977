"""One kill trial: a ``rawp serve --store sqlite:…`` killed with SIGKILL mid-turn (notes §16.2).

The client streams a turn while two edges watch; the master is killed at a seeded point in the
stream and started again on the same file. Then: every frame an edge received is in the log
with the same seq, every logged envelope is whole, the interrupted turn is finalized exactly
once (a second restart adds nothing), and the client's reattach with its ``session.history``
unfinalizes it. While the master runs, a second ``rawp serve`` on the same file refuses to
start with one line naming the file and the owner. Used by tests/e2e/test_durable.py and by
``make bench ARGS=durable`` (many seeded kill points).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from relay.startup import EXIT_STORE_REFUSED
from tests.support.masters import MasterProcess
from tests.support.wire import Peer, new_turn_id

__all__ = ["KillTrial", "run_kill_trial"]

KEY = "rk_durable_key"


def is_synthetic(frame: dict[str, Any]) -> bool:
    """True for a frame made by §7.8.1 finalization."""
    return bool((frame.get("metadata") or {}).get("synthetic"))


async def export(http_url: str, session_id: str) -> list[dict[str, Any]]:
    """The whole log of the session, as the export endpoint gives it."""
    headers = {"Authorization": f"Bearer {KEY}"}
    url = f"{http_url}/v1/sessions/{session_id}/export?format=json"
    async with aiohttp.ClientSession() as client, client.get(url, headers=headers) as response:
        assert response.status == 200, await response.text()
        body: dict[str, Any] = json.loads(await response.text())
    events: list[dict[str, Any]] = body["events"]
    return events


@contextlib.asynccontextmanager
async def serving(store_url: str, node_id: str, log_dir: Path) -> AsyncIterator[MasterProcess]:
    """A ``rawp serve`` on ``store_url``; stopped at the end (unless killed already)."""
    master = MasterProcess(node_id, store_url, api_key=KEY, log_dir=log_dir, reattach_window=30)
    master.spawn()
    try:
        await asyncio.to_thread(master.wait_ready)
        yield master
    finally:
        await asyncio.to_thread(master.stop)


async def watch(edge: Peer) -> None:
    """Receive (into ``edge.received``) until the edge's connection ends."""
    with contextlib.suppress(Exception):
        while True:
            await edge.recv(timeout=30)


class KillTrial:
    """What one kill trial saw, for the test's assertions and the bench's figures."""

    def __init__(self) -> None:
        self.sent = 0
        self.received_by_edges = 0
        self.logged = 0
        self.kill_after = 0


async def run_kill_trial(directory: Path, seed: int, *, deltas: int = 200) -> KillTrial:
    """One trial: stream, SIGKILL after a seeded number of frames, restart, check, reattach.

    Raises AssertionError when a promise of the module docstring does not hold.
    """
    rng = random.Random(seed)
    trial = KillTrial()
    trial.kill_after = rng.randrange(1, deltas)
    store_url = f"sqlite:{directory / 'data' / 'rawp.db'}"
    sid = f"s-durable-{seed}"
    turn = new_turn_id()
    async with serving(store_url, "first", directory) as first:
        client = await Peer.open(first.ws_url, sid, token=KEY, create=True)
        edges = [await Peer.open(first.ws_url, sid, role="edge", token=KEY) for _ in range(2)]
        produced = [await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})]
        # The turn is open in the log (an edge saw it), then the stream and the kill.
        await edges[0].recv_until(lambda f: f["type"] == "session.turn.start", timeout=10)
        watchers = [asyncio.ensure_future(watch(e)) for e in edges]
        for i in range(deltas):
            produced.append(
                await client.send("agent.text.delta", {"block_id": "b", "delta": f"{i} "})
            )
            if i == trial.kill_after:
                first.kill()  # mid-stream: some frames are committed, some in flight
                break
        trial.sent = len(produced)
        await asyncio.gather(*watchers)
        with contextlib.suppress(Exception):
            await client.ws.close()

    async with serving(store_url, "second", directory) as second:
        log = await export(second.http_url, sid)
        trial.logged = len(log)
        # Dense seqs, whole envelopes (export parsed them all), nothing twice.
        assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
        assert len({e["message_id"] for e in log}) == len(log)
        by_seq = {e["seq"]: e for e in log}
        for peer in edges:  # Peer.received: every frame it got, the welcome included
            for frame in (f for f in peer.received if "seq" in f):
                trial.received_by_edges += 1
                assert by_seq[frame["seq"]]["message_id"] == frame["message_id"], frame
        # Client frames are a prefix of what it produced, in order.
        from_client = [e["message_id"] for e in log if e["sender"]["role"] == "client"]
        assert from_client == [f["message_id"] for f in produced[: len(from_client)]]
        made = [e for e in log if is_synthetic(e)]
        streamed = any(e["type"] == "agent.text.delta" for e in log)
        expected = (["agent.text.done"] if streamed else []) + ["session.turn.end"]
        assert [e["type"] for e in made] == expected, [e["type"] for e in made]
        assert made[-1]["payload"] == {"turn_id": turn, "stop_reason": "disconnected"}
        assert log.index(made[0]) > max(
            i for i, e in enumerate(log) if e["sender"]["role"] == "client"
        )
        client_id = client.participant_id
        last_logged = from_client[-1]
        # A second owner on the same file is refused, in one line naming the file and owner.
        refused = await asyncio.to_thread(
            subprocess.run,
            [str(Path(sys.executable).with_name("rawp")), "serve", "--store", store_url,
             "--ws-port", "0", "--http-port", "0", "--api-key", f"default:{KEY}"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert refused.returncode == EXIT_STORE_REFUSED
        lines = [ln for ln in refused.stderr.splitlines() if not ln.startswith("dev API key")]
        assert len(lines) == 1, refused.stderr
        assert "rawp.db" in lines[0]
        assert "pid" in lines[0]

    # Exactly once: a further restart finalizes nothing more; then the client reattaches.
    async with serving(store_url, "third", directory) as third:
        again = await export(third.http_url, sid)
        assert again == log
        watcher = await Peer.open(third.ws_url, sid, role="edge", token=KEY)
        back = await Peer.open(
            third.ws_url,
            sid,
            token=KEY,
            participant_id=client_id,
            resume={"last_seq": len(log)},
        )
        assert back.welcome["payload"]["resumed"] is True
        assert back.welcome["payload"]["received"]["last_message_id"] == last_logged
        assert back.welcome["payload"]["session"]["status"] == "idle"  # finalized
        # What the client produced from its last logged frame on, the repeat dropped.
        unsent = [f for f in produced if f["message_id"] not in set(from_client)]
        history = produced[len(from_client) - 1 :]
        await back.send(
            "session.history",
            {
                "frames": history,
                "buffer_status": {
                    "policy_applied": "RING",
                    "truncated": False,
                    "lost_frame_count": 0,
                    "buffer_high_watermark": sum(len(json.dumps(f)) for f in history),
                },
                "last_sync_timestamp": history[0]["timestamp"],
                "last_message_id": history[0]["message_id"],
            },
        )
        relayed = await watcher.recv_until(lambda f: f["type"] == "session.history", timeout=10)
        inner = [f["message_id"] for f in relayed[-1]["payload"]["frames"]]
        assert inner == [f["message_id"] for f in unsent]
        if streamed or unsent:
            await back.send("agent.text.done", {"block_id": "b"})
        await back.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
        ended = await watcher.recv_until(lambda f: f["type"] == "session.turn.end", timeout=10)
        assert ended[-1]["payload"]["stop_reason"] == "end_turn"  # the turn was open again
        final = await export(third.http_url, sid)
        turn_ends = [e for e in final if e["type"] == "session.turn.end"]
        assert [e["payload"]["stop_reason"] for e in turn_ends] == ["disconnected", "end_turn"]
        await back.ws.close()
        await watcher.ws.close()
    return trial
