"""A client and two edges exchange a turn through a master."""

from __future__ import annotations

from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.support.wire import Peer, new_turn_id, usage_payload


async def test_client_and_two_edges_exchange_a_turn(master: Master) -> None:
    """Every frame the client sends reaches both edges with dense seqs and sender stamps."""
    client = await Peer.open(master.ws_url, "s-smoke", token=API_KEY, create=True)
    edge1 = await Peer.open(master.ws_url, "s-smoke", role="edge", token=API_KEY)
    edge2 = await Peer.open(master.ws_url, "s-smoke", role="edge", token=API_KEY)
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send("agent.text.delta", {"block_id": "b1", "delta": "Hel"})
    await client.send("agent.text.delta", {"block_id": "b1", "delta": "lo"})
    await client.send("agent.text.done", {"block_id": "b1"})
    await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    await client.send("session.usage", usage_payload(turn))
    for edge in (edge1, edge2):
        frames = await edge.recv_until(lambda f: f["type"] == "session.usage")
        agent = [f for f in frames if f["sender"]["role"] == "client"]
        assert [f["type"] for f in agent] == [
            "session.turn.start",
            "agent.text.delta",
            "agent.text.delta",
            "agent.text.done",
            "session.turn.end",
            "session.usage",
        ]
        seqs = [f["seq"] for f in agent]
        # in order; the gaps are the master's session.status frames (notes §17.4)
        statuses = {s["seq"] for s in edge.statuses}
        assert set(range(seqs[0], seqs[-1] + 1)) - set(seqs) <= statuses
        assert all(f["sender"]["participant_id"] == client.participant_id for f in agent)
    await edge1.send("user.message", {"text": "thanks"})
    got = await client.recv_type("user.message")
    assert got["payload"]["text"] == "thanks"
    assert got["sender"]["role"] == "edge"
    for peer in (client, edge1, edge2):
        await peer.close()
