"""Frames that would read one way to the master and another to a receiver (notes §3, §16.8).

A reattaching client's history cannot carry the master's stamp to the edges or the log, and
a frame holding one key twice is refused, not relayed with both values.
"""

from __future__ import annotations

import json
from typing import Any

from protocol import codec
from relay.server import Master
from tests.e2e.test_finalization import (
    drop,
    finalization_frames,
    history,
    mid_turn,
    reattach_client,
)
from tests.e2e.util import logged
from tests.support.wire import envelope

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
