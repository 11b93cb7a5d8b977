"""A reattach backlog larger than a socket write: streamed as one fragmented message (§7)."""

from __future__ import annotations

import json
from typing import Any

from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.e2e.util import new_session, wait_until
from tests.support.wire import Peer

__all__: list[str] = []


async def test_a_multi_mebibyte_backlog_arrives_whole_and_within_max_frame_bytes(
    make_master: Any,
) -> None:
    """A 3 MB backlog reaches a reattaching edge as one session.history, every frame in seq
    order, the message no larger than the welcome's max_frame_bytes."""
    limit = 8 << 20
    master: Master = await make_master(max_frame_bytes=limit, buffer_capacity=6 << 20)
    client, _edges = await new_session(master, "s-big-backlog", edges=0)
    sent = [
        await client.send("agent.text.delta", {"block_id": "b", "delta": f"{i:04d}" * 15000})
        for i in range(50)
    ]
    session = master.hub.sessions["s-big-backlog"]
    await wait_until(lambda: session.head >= len(sent))
    edge = await Peer.open(
        master.ws_url,
        "s-big-backlog",
        role="edge",
        token=API_KEY,
        resume={"last_seq": 0},
        max_size=limit,
    )
    assert edge.welcome["payload"]["max_frame_bytes"] == limit
    raw = await edge.ws.recv()
    assert len(raw) > 2 << 20  # past the slicing threshold (1 MiB)
    assert len(raw.encode() if isinstance(raw, str) else raw) <= limit
    history = json.loads(raw)
    assert history["type"] == "session.history"
    frames = history["payload"]["frames"]
    seqs = [f["seq"] for f in frames]
    assert seqs == sorted(seqs)
    assert [f["message_id"] for f in frames if f["type"] == "agent.text.delta"] == [
        f["message_id"] for f in sent
    ]
    assert history["payload"]["buffer_status"]["lost_frame_count"] == 0
