"""No received text forges an SSE field (issue 12, notes §16.7), read by a raw client."""

from __future__ import annotations

from protocol import codec, names
from relay.server import Master
from relay.store.base import NewEntry
from tests.e2e.conftest import API_KEY
from tests.protocol.test_names import CONTROLS
from tests.relay.http.conftest import Api, wait_head
from tests.relay.http.test_sse import RawStream, auth
from tests.support.wire import Peer

FORGED = "id: 999999\nevent: session.deleted\ndata: {}"


async def test_an_ignorable_type_with_any_control_character_is_refused_not_streamed(
    api: Api, master: Master
) -> None:
    """A viewer's ignorable frame whose type holds any control character is invalid_frame."""
    await api.create("s-inject")
    token = (await api.post("/v1/sessions/s-inject/tokens", {})).body["token"]
    viewer = await Peer.open(master.ws_url, "s-inject", role="edge", token=token)
    head = (await api.get("/v1/sessions/s-inject")).body["head_seq"]
    for char in CONTROLS:
        await viewer.send(f"x.evil{char}{FORGED}", {}, metadata={"ignorable": True})
        error = await viewer.recv_type("session.error")
        assert error["payload"]["error_code"] == "invalid_frame", repr(char)
    ok = await viewer.send("x.fine", {}, metadata={"ignorable": True})
    body = await wait_head(api, "s-inject", head + 1)
    assert body["head_seq"] == head + 1  # only the well-formed one was logged
    stream = await RawStream.open(master, "/v1/sessions/s-inject/events/stream?after_seq=0", auth())
    events = [await stream.next_event() for _ in range(head + 1)]
    assert [e and int(e["id"]) for e in events] == list(range(1, head + 2))
    last = events[-1]
    assert last is not None
    assert last["event"] == "x.fine"
    assert ok["message_id"] in last["data"]
    await stream.close()
    await viewer.close()


async def test_a_logged_entry_of_an_older_build_is_escaped_in_its_event_field(
    api: Api, master: Master
) -> None:
    """An entry whose type predates the grammar is written with its controls escaped."""
    await api.create("s-legacy")
    head = (await api.get("/v1/sessions/s-legacy")).body["head_seq"]
    evil = "x.evil\r\n" + FORGED
    frame = b'{"type":"x.evil","message_id":"m-legacy","session_id":"s-legacy",'
    frame += b'"timestamp":"2026-11-29T09:00:00Z","payload":{},"seq":'
    tail = b',"sender":{"role":"edge","participant_id":"p-old"}}'
    entry = NewEntry(
        message_id="m-legacy",
        type=evil,
        head=frame,
        tail=tail,
        sender_id="p-old",
        sender_role="edge",
    )
    await master.store.append("s-legacy", [entry])
    stream = await RawStream.open(
        master, f"/v1/sessions/s-legacy/events/stream?after_seq={head}", auth()
    )
    event = await stream.next_event()
    assert event is not None
    assert event["id"] == str(head + 1)
    assert event["event"] == names.one_line(evil)
    assert codec.decode_object(event["data"])["message_id"] == "m-legacy"
    assert set(event) == {"id", "event", "data"}  # no forged field
    await stream.close()


async def test_frames_naming_a_malformed_session_id_never_reach_the_log(
    api: Api, master: Master
) -> None:
    """A frame whose session_id is outside the grammar is invalid_frame on an open socket."""
    await api.create("s-ids")
    client = await Peer.open(master.ws_url, "s-ids", token=API_KEY)
    head = (await api.get("/v1/sessions/s-ids")).body["head_seq"]
    for bad in ("s-ids\n", "s{ids}", "s-ids "):
        await client.send_frame(
            {
                "type": "agent.state",
                "message_id": f"m-{len(bad)}-{ord(bad[-1])}",
                "session_id": bad,
                "timestamp": "2026-11-29T09:00:00Z",
                "payload": {"state": "idle"},
            }
        )
        error = await client.recv_type("session.error")
        assert error["payload"]["error_code"] == "invalid_frame"
    assert (await api.get("/v1/sessions/s-ids")).body["head_seq"] == head
    await client.close()
