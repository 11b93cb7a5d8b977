"""Frames that would read one way to the master and another to a receiver (notes §3, §16.8).

A reattaching client's history cannot carry the master's stamp to the edges or the log, and
a frame holding one key twice is refused, not relayed with both values, and a message id
another frame holds is refused, not dropped as a re-send that its sender counts committed.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from protocol import codec
from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.e2e.test_finalization import (
    drop,
    finalization_frames,
    history,
    mid_turn,
    reattach_client,
)
from tests.e2e.util import logged, new_session
from tests.support.wire import envelope, new_turn_id

_MASTER = {"role": "master", "participant_id": "master"}


async def test_a_history_cannot_carry_the_masters_stamp(master: Master) -> None:
    """Inner frames with a master's sender and a seq reach edges and the log as the client's."""
    sid = "s-forged-history"
    client, edges, _turn = await mid_turn(master, sid, edges=1)
    await drop(client)
    await finalization_frames(edges[0], client.participant_id)
    back = await reattach_client(master, sid, client)
    await edges[0].recv_type("session.presence")
    notice = envelope(
        sid,
        "session.error",
        {"error_code": "history_truncated", "message": "lost", "fatal": False},
        sender=_MASTER,
        seq=3,
    )
    text = envelope(sid, "agent.text.delta", {"block_id": "b7", "delta": "x"}, sender=_MASTER)
    # The key spelled with an escape is the same key, and a null value is no stamp either.
    sneaky = json.dumps(envelope(sid, "agent.text.delta", {"block_id": "b8", "delta": "y"}))
    sneaky = sneaky[:-1] + ', "s\\u0065nder": null, "s\\u0065q": null}'
    payload = history(sid, [notice, text])
    await back.send("session.history", payload)
    relayed = await edges[0].recv_type("session.history")
    stamp = {"role": "client", "participant_id": client.participant_id}
    assert [f["message_id"] for f in relayed["payload"]["frames"]] == [
        notice["message_id"],
        text["message_id"],
    ]
    for inner in relayed["payload"]["frames"]:
        assert inner["sender"] == stamp
        assert "seq" not in inner
    entry = [f for f in await logged(master, sid) if f["type"] == "session.history"][-1]
    for inner in entry["payload"]["frames"]:
        assert inner["sender"] == stamp
        assert "seq" not in inner
    # The escaped spelling, live: the frame goes out with one sender key, the master's stamp.
    await back.ws.send(sneaky)
    raw = await _next_raw(edges[0])
    pairs = json.loads(raw, object_pairs_hook=lambda p: p)
    keys = [k for k, _ in pairs]
    assert keys.count("sender") == keys.count("seq") == 1, keys


async def _next_raw(peer: Any) -> str:
    """The exact text of the next session frame the peer receives."""
    while True:
        frame = await peer.recv()
        if frame["type"] != "session.presence":
            return str(peer.raw[-1])


async def test_a_frame_with_a_key_twice_is_refused(master: Master) -> None:
    """Two ``payload`` objects (or a key twice deeper down): invalid_frame, never relayed."""
    sid = "s-forged-keys"
    client, edges, turn = await mid_turn(master, sid, edges=1)
    head = len(await logged(master, sid))
    good = envelope(sid, "agent.text.delta", {"block_id": "b1", "delta": "shown"})
    body = json.dumps(good)
    twice = body[:-1] + ', "payload": {"block_id": "b1", "delta": "hidden"}}'
    inner = body.replace('"delta": "shown"', '"delta": "shown", "delta": "hidden"')
    for raw in (twice, inner):
        await client.ws.send(raw)
        error = await client.recv_type("session.error")
        assert error["payload"]["error_code"] == "invalid_frame"
        assert "twice" in error["payload"]["message"]
        assert error["payload"]["ref_message_id"] == good["message_id"]
    assert len(await logged(master, sid)) == head
    ok = await client.send("agent.text.delta", {"block_id": "b1", "delta": "fine"})
    assert (await edges[0].recv())["message_id"] == ok["message_id"]
    assert turn


def test_duplicate_key_finds_keys_twice_at_any_depth() -> None:
    """The check finds a key twice anywhere, and takes spaces and escapes for what they are."""
    assert codec.duplicate_key(b'{"a":1,"b":{"c":[{"d":1,"d":2}]}}') == "d"
    assert codec.duplicate_key(b'{"a":1,"\\u0061":2}') == "a"
    assert codec.duplicate_key(b'{ "a" : 1, "b" : { "a" : 2 } }') is None
    assert codec.duplicate_key(b'{"a":"\\u00e9"}') is None


async def test_an_id_another_sender_used_is_refused_not_swallowed(master: Master) -> None:
    """An edge reusing the client's message_id: message_id_conflict, not logged, not acked."""
    sid = "s-forged-ids"
    client, (edge,) = await new_session(master, sid)
    edge.show_acks = True
    turn = await client.send("session.turn.start", {"turn_id": new_turn_id(), "turn_index": 0})
    assert (await edge.recv())["message_id"] == turn["message_id"]
    head = len(await logged(master, sid))
    taken = envelope(sid, "user.message", {"text": "steal"}, message_id=turn["message_id"])
    await edge.send_frame(taken)
    error = await edge.recv_type("session.error")
    assert error["payload"]["error_code"] == "message_id_conflict"
    assert error["payload"]["ref_message_id"] == turn["message_id"]
    assert len(await logged(master, sid)) == head
    # The edge's next frame is acknowledged alone: the refused one is not counted committed.
    # (a rename: a user message would wait for the open turn, notes §17.3)
    mine = await edge.send(
        "session.renamed", {"session_id": sid, "name": "mine", "renamed_by": "edge"}
    )
    ack = await edge.recv_type("connection.ack")
    assert ack["payload"]["last_message_id"] == mine["message_id"]
    assert [f["message_id"] for f in await logged(master, sid)][head:] == [mine["message_id"]]
    # The client sending its own frame again is a re-send: dropped quietly, logged once.
    await client.send_frame(turn)
    await client.send("agent.text.delta", {"block_id": "b1", "delta": "x"})
    delta = await edge.recv_type("agent.text.delta")
    assert delta["payload"]["delta"] == "x"
    assert [
        e["payload"]["error_code"] for e in client.received if e["type"] == "session.error"
    ] == []
    # Over HTTP alike: 409, not "200 duplicate" with the other frame.
    status, body = await http_json(
        master,
        "POST",
        f"/v1/sessions/{sid}/events",
        {"type": "user.message", "payload": {"text": "x"}, "message_id": turn["message_id"]},
    )
    assert (status, body["code"]) == (409, "message_id_conflict")
    await edge.close()
    await client.close()


async def http_json(master: Master, method: str, path: str, body: Any) -> tuple[int, Any]:
    """One request with a JSON body and the test key; (status, decoded body)."""
    headers = {"Authorization": f"Bearer {API_KEY}"}
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, master.http_url + path, json=body, headers=headers) as r,
    ):
        return r.status, await r.json(content_type=None)
