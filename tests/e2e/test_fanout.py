"""Fan-out: who gets what, stamped how, logged once (notes §3, §7, §15.4, §15.9)."""

from __future__ import annotations

import json
from typing import Any

from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.e2e.util import logged, new_session, next_frame, nothing_pending
from tests.support.wire import Peer, envelope


def unstamped(frame: dict[str, Any]) -> dict[str, Any]:
    """The frame without the keys the master sets."""
    return {k: v for k, v in frame.items() if k not in ("seq", "sender")}


async def test_unknown_envelope_and_payload_keys_are_relayed_untouched(master: Master) -> None:
    """Unknown keys (envelope, payload, metadata) reach every recipient and the log as sent."""
    client, (edge1, edge2) = await new_session(master, "s-fan-keys", edges=2)
    frame = envelope(
        "s-fan-keys",
        "agent.text.delta",
        {"block_id": "b1", "delta": "hi", "x_payload": {"nested": [1, 2.5, None, "é"]}},
        x_trace={"span": "abc", "depth": 3},
        metadata={"x_note": "kept", "ignorable": False},
    )
    await client.send_frame(frame)
    for edge in (edge1, edge2):
        got = await next_frame(edge)
        assert unstamped(got) == frame
        assert got["sender"] == {"role": "client", "participant_id": client.participant_id}
        assert isinstance(got["seq"], int)
    (stored,) = [f for f in await logged(master, "s-fan-keys") if f["type"] == frame["type"]]
    assert unstamped(stored) == frame


async def test_seq_and_sender_are_stamped_and_input_values_ignored(master: Master) -> None:
    """A sender's own seq and sender are overwritten with the log seq and its real identity."""
    client, (edge,) = await new_session(master, "s-fan-stamp")
    first = await client.send("agent.state", {"state": "thinking"})
    got1 = await next_frame(edge)
    forged = envelope(
        "s-fan-stamp",
        "agent.state",
        {"state": "responding"},
        seq=999,
        sender={"role": "master", "participant_id": "m-forged"},
        x_extra=True,
    )
    await client.send_frame(forged)
    got2 = await next_frame(edge)
    assert got1["message_id"] == first["message_id"]
    assert got2["message_id"] == forged["message_id"]
    assert got2["seq"] == got1["seq"] + 1
    assert got2["sender"] == {"role": "client", "participant_id": client.participant_id}
    assert got2["x_extra"] is True
    log = await logged(master, "s-fan-stamp")
    assert log[-1]["seq"] == got2["seq"]
    assert log[-1]["sender"]["participant_id"] == client.participant_id


async def test_frames_go_to_everyone_but_their_sender(master: Master) -> None:
    """An edge's frame reaches the client and the other edges, never the edge itself."""
    client, (edge1, edge2) = await new_session(master, "s-fan-others", edges=2)
    sent = await edge1.send("user.message", {"text": "hello"})
    for peer in (client, edge2):
        got = await next_frame(peer)
        assert got["message_id"] == sent["message_id"]
        assert got["sender"] == {"role": "edge", "participant_id": edge1.participant_id}
    sentinel = await client.send("agent.state", {"state": "thinking"})
    assert (await next_frame(edge1))["message_id"] == sentinel["message_id"]
    assert (await next_frame(edge2))["message_id"] == sentinel["message_id"]
    await nothing_pending(client, via=edge1)  # its own frame did not come back


async def test_ignorable_unknown_type_is_logged_and_relayed_untouched(master: Master) -> None:
    """An unknown type with metadata.ignorable is logged and relayed with every key intact."""
    client, (edge,) = await new_session(master, "s-fan-ignorable")
    frame = envelope(
        "s-fan-ignorable",
        "x.vendor.progress",
        {"percent": 42, "detail": {"step": "indexing"}},
        metadata={"ignorable": True, "vendor": "acme"},
        x_top="level",
    )
    await client.send_frame(frame)
    got = await next_frame(edge)
    assert unstamped(got) == frame
    assert got["sender"]["participant_id"] == client.participant_id
    from_edge = envelope("s-fan-ignorable", "x.ui.hint", {"hint": 1}, metadata={"ignorable": True})
    await edge.send_frame(from_edge)
    assert unstamped(await next_frame(client)) == from_edge
    stored = {f["message_id"]: f for f in await logged(master, "s-fan-ignorable")}
    assert unstamped(stored[frame["message_id"]]) == frame
    assert unstamped(stored[from_edge["message_id"]]) == from_edge


async def test_unknown_type_without_ignorable_is_refused(master: Master) -> None:
    """An unknown type without ignorable gets unknown_type and is neither logged nor relayed."""
    client, (edge,) = await new_session(master, "s-fan-unknown")
    frame = envelope("s-fan-unknown", "x.vendor.progress", {"percent": 1}, metadata={"x": 1})
    await client.send_frame(frame)
    error = await next_frame(client)
    assert error["payload"]["error_code"] == "unknown_type"
    assert error["payload"]["fatal"] is False
    sentinel = await client.send("agent.state", {"state": "thinking"})
    assert (await next_frame(edge))["message_id"] == sentinel["message_id"]
    ids = {f["message_id"] for f in await logged(master, "s-fan-unknown")}
    assert frame["message_id"] not in ids


async def test_edge_rename_reaches_every_edge_and_the_client(master: Master) -> None:
    """An edge's rename goes to every edge, the requesting one included, and to the client."""
    client, edges = await new_session(master, "s-fan-rename", edges=3)
    sent = await edges[0].send(
        "session.renamed",
        {
            "session_id": "s-fan-rename",
            "name": "Renamed",
            "previous_name": "test",
            "renamed_by": "edge",
        },
    )
    for peer in (client, *edges):
        got = await next_frame(peer)
        assert got["message_id"] == sent["message_id"]
        assert got["payload"]["name"] == "Renamed"
        assert got["payload"]["renamed_by"] == "edge"
        assert got["sender"]["participant_id"] == edges[0].participant_id
    seqs = {peer.received[-1]["seq"] for peer in (client, *edges)}
    assert len(seqs) == 1
    late = await Peer.open(master.ws_url, "s-fan-rename", role="edge", token=API_KEY)
    assert late.welcome["payload"]["session"]["name"] == "Renamed"
    assert (await master.store.get_session("s-fan-rename")).name == "Renamed"  # type: ignore[union-attr]


async def test_client_rename_reaches_every_edge_and_the_client(master: Master) -> None:
    """A client's rename goes to every edge and back to the client."""
    client, edges = await new_session(master, "s-fan-rename-c", edges=2)
    sent = await client.send(
        "session.renamed",
        {"session_id": "s-fan-rename-c", "name": "By client", "renamed_by": "client"},
    )
    for peer in (client, *edges):
        got = await next_frame(peer)
        assert got["message_id"] == sent["message_id"]
        assert got["payload"]["renamed_by"] == "client"


async def test_rename_with_wrong_renamed_by_is_refused(master: Master) -> None:
    """renamed_by must equal the sender's role; otherwise invalid_frame, nothing relayed."""
    client, (edge,) = await new_session(master, "s-fan-rename-bad")
    for sender, claimed in ((edge, "client"), (edge, "master"), (client, "edge")):
        await sender.send(
            "session.renamed",
            {"session_id": "s-fan-rename-bad", "name": "x", "renamed_by": claimed},
        )
        error = await next_frame(sender)
        assert error["type"] == "session.error"
        assert error["payload"]["error_code"] == "invalid_frame"
    other = await client.send(
        "session.renamed",
        {"session_id": "s-other", "name": "x", "renamed_by": "client"},
    )
    assert (await next_frame(client))["payload"]["error_code"] == "invalid_frame"
    sentinel = await client.send("agent.state", {"state": "thinking"})
    assert (await next_frame(edge))["message_id"] == sentinel["message_id"]
    log = await logged(master, "s-fan-rename-bad")
    assert not any(f["type"] == "session.renamed" for f in log)
    assert other["message_id"] not in {f["message_id"] for f in log}


async def test_same_message_id_twice_is_logged_and_relayed_once(master: Master) -> None:
    """A frame re-sent with the same message_id (later or back to back) is logged once."""
    client, (edge,) = await new_session(master, "s-fan-dedupe")
    spaced = envelope(
        "s-fan-dedupe", "tool.invoke.request", {"call_id": "c1", "tool_name": "ls", "input": {}}
    )
    await client.send_frame(spaced)
    first = await next_frame(edge)
    await client.send_frame(spaced)
    # Back to back: both copies are likely in one batch.
    burst = envelope(
        "s-fan-dedupe", "tool.invoke.request", {"call_id": "c2", "tool_name": "ls", "input": {}}
    )
    raw = json.dumps(burst)
    await client.ws.send(raw)
    await client.ws.send(raw)
    await client.ws.send(raw)
    second = await next_frame(edge)
    assert second["message_id"] == burst["message_id"]
    assert second["seq"] == first["seq"] + 1
    sentinel = await client.send("agent.state", {"state": "tool_calling"})
    third = await next_frame(edge)
    assert third["message_id"] == sentinel["message_id"]
    assert third["seq"] == second["seq"] + 1
    # No error either: a duplicate is not a violation.
    await nothing_pending(client, via=edge)
    ids = [f["message_id"] for f in await logged(master, "s-fan-dedupe")]
    assert ids.count(spaced["message_id"]) == 1
    assert ids.count(burst["message_id"]) == 1


async def test_same_message_id_from_another_participant_is_dropped(master: Master) -> None:
    """message_id is unique within the session: a second sender's copy is not logged either."""
    client, (edge1, edge2) = await new_session(master, "s-fan-dedupe2", edges=2)
    frame = envelope("s-fan-dedupe2", "user.message", {"text": "once"})
    await edge1.send_frame(frame)
    assert (await next_frame(client))["message_id"] == frame["message_id"]
    assert (await next_frame(edge2))["message_id"] == frame["message_id"]
    await edge2.send_frame(frame)
    sentinel = await edge2.send("user.message", {"text": "after"})
    assert (await next_frame(client))["message_id"] == sentinel["message_id"]
    assert (await next_frame(edge1))["message_id"] == sentinel["message_id"]
