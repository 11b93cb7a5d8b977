"""A session's log over HTTP: paged reads, appends as an edge, cancel."""

from __future__ import annotations

from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.relay.http.conftest import Api, wait_head
from tests.support.wire import Peer, new_turn_id


async def filled(api: Api, master: Master, session_id: str, deltas: int) -> Peer:
    """A session with a client that opened a turn and streamed ``deltas`` deltas."""
    client = await Peer.open(master.ws_url, session_id, token=API_KEY, create=True)
    await client.send("session.turn.start", {"turn_id": new_turn_id(), "turn_index": 0})
    for i in range(deltas):
        await client.send("agent.text.delta", {"block_id": "b", "delta": str(i)})
    await wait_head(api, session_id, 2 + deltas)
    return client


async def test_events_are_paged_newest_first(api: Api, master: Master) -> None:
    """Default order is desc; following next.before_seq walks the whole log once."""
    client = await filled(api, master, "s-ev", 10)
    seqs: list[int] = []
    path = "/v1/sessions/s-ev/events?limit=5"
    while True:
        reply = await api.get(path)
        assert reply.status == 200
        page = reply.body
        assert page["order"] == "desc"
        assert page["head_seq"] == 13  # with the turn's session.status (running)
        seqs += [e["seq"] for e in page["events"]]
        if page["next"] is None:
            break
        path = f"/v1/sessions/s-ev/events?limit=5&before_seq={page['next']['before_seq']}"
    assert seqs == list(range(13, 0, -1))
    newest = (await api.get("/v1/sessions/s-ev/events?limit=1")).body["events"][0]
    assert newest["type"] == "agent.text.delta"
    assert newest["sender"]["role"] == "client"
    assert newest["session_id"] == "s-ev"
    await client.close()


async def test_events_ascending_between_cursors(api: Api, master: Master) -> None:
    """order=asc with after_seq/before_seq returns that window oldest first."""
    client = await filled(api, master, "s-asc", 6)
    reply = await api.get("/v1/sessions/s-asc/events?order=asc&after_seq=2&before_seq=7&limit=3")
    assert [e["seq"] for e in reply.body["events"]] == [3, 4, 5]
    assert reply.body["next"] == {"after_seq": 5}
    rest = await api.get("/v1/sessions/s-asc/events?order=asc&after_seq=5&before_seq=7")
    assert [e["seq"] for e in rest.body["events"]] == [6]
    assert rest.body["next"] is None
    await client.close()


async def test_events_query_errors_are_problems(api: Api) -> None:
    """Bad cursors, limits and orders answer 400 invalid_query."""
    await api.create("s-q")
    for query in ("order=sideways", "limit=0", "limit=100000", "after_seq=-1", "before_seq=x"):
        reply = await api.get(f"/v1/sessions/s-q/events?{query}")
        assert reply.status == 400, query
        assert reply.problem["code"] == "invalid_query"


async def test_post_user_message_is_validated_logged_and_relayed(api: Api, master: Master) -> None:
    """A user.message appended over HTTP reaches the client as an edge's frame."""
    client = await Peer.open(master.ws_url, "s-post", token=API_KEY, create=True)
    edge = await Peer.open(master.ws_url, "s-post", role="edge", token=API_KEY)
    reply = await api.post(
        "/v1/sessions/s-post/events", {"type": "user.message", "payload": {"text": "hi"}}
    )
    assert reply.status == 201
    seq = reply.body["seq"]
    assert reply.body["duplicate"] is False
    event = reply.body["event"]
    assert event["seq"] == seq
    assert event["sender"]["role"] == "edge"
    assert event["sender"]["participant_id"].startswith("http-")
    for peer in (client, edge):
        got = await peer.recv_type("user.message")
        assert got == event
    logged = (await api.get("/v1/sessions/s-post/events?limit=1")).body["events"][0]
    assert logged == event
    await client.close()
    await edge.close()


async def test_post_event_dedupes_by_message_id(api: Api) -> None:
    """Posting the same message_id twice logs it once and answers 200 the second time."""
    await api.create("s-dup")
    body = {"type": "user.message", "message_id": "m-1", "payload": {"text": "once"}}
    first = await api.post("/v1/sessions/s-dup/events", body)
    second = await api.post("/v1/sessions/s-dup/events", body)
    assert first.status == 201
    assert second.status == 200
    assert second.body["duplicate"] is True
    assert second.body["seq"] == first.body["seq"]
    events = (await api.get("/v1/sessions/s-dup/events")).body["events"]
    assert [e["message_id"] for e in events].count("m-1") == 1


async def test_post_interaction_response_goes_through_the_state_machine(
    api: Api, master: Master
) -> None:
    """An answer with no pending interaction is refused 409; a pending one is accepted."""
    client = await Peer.open(master.ws_url, "s-ask", token=API_KEY, create=True)
    answer = {
        "type": "control.interaction.response",
        "payload": {"interaction_id": "i1", "response": True},
    }
    early = await api.post("/v1/sessions/s-ask/events", answer)
    assert early.status == 409
    assert early.problem["code"] == "interaction_state"
    await client.send("session.turn.start", {"turn_id": new_turn_id(), "turn_index": 0})
    await client.send(
        "agent.interaction.request",
        {"interaction_id": "i1", "kind": "confirmation", "prompt": "go?"},
    )
    assert (await wait_head(api, "s-ask", 3))["status"] == "requires_action"
    ok = await api.post("/v1/sessions/s-ask/events", answer)
    assert ok.status == 201
    got = await client.recv_type("control.interaction.response")
    assert got["payload"] == {"interaction_id": "i1", "response": True}
    assert (await api.get("/v1/sessions/s-ask")).body["status"] == "running"
    again = await api.post("/v1/sessions/s-ask/events", answer)
    assert again.status == 409
    await client.close()


async def test_post_event_refuses_other_types_and_bad_payloads(api: Api) -> None:
    """Only edge input types are accepted; an invalid payload answers invalid_frame."""
    await api.create("s-types")
    agent_frame = await api.post(
        "/v1/sessions/s-types/events",
        {"type": "agent.text.delta", "payload": {"block_id": "b", "delta": "x"}},
    )
    assert agent_frame.status == 422
    assert agent_frame.problem["code"] == "unsupported_type"
    no_text = await api.post("/v1/sessions/s-types/events", {"type": "user.message", "payload": {}})
    assert no_text.status == 400
    assert no_text.problem["code"] == "invalid_frame"
    assert "text" in no_text.problem["detail"]
    synthetic = await api.post(
        "/v1/sessions/s-types/events",
        {"type": "user.message", "payload": {"text": "x"}, "metadata": {"synthetic": True}},
    )
    assert synthetic.status == 400
    assert synthetic.problem["code"] == "invalid_frame"
    missing = await api.post("/v1/sessions/s-nope/events", {"type": "user.message", "payload": {}})
    assert missing.status == 404


async def test_cancel_sends_control_cancel_for_the_open_turn(api: Api, master: Master) -> None:
    """POST cancel relays control.cancel with the open turn's id; 409 when none is open."""
    client = await Peer.open(master.ws_url, "s-cancel", token=API_KEY, create=True)
    idle = await api.post("/v1/sessions/s-cancel/cancel")
    assert idle.status == 409
    assert idle.problem["code"] == "not_running"
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await wait_head(api, "s-cancel", 2)
    reply = await api.post("/v1/sessions/s-cancel/cancel")
    assert reply.status == 201
    got = await client.recv_type("control.cancel")
    assert got["payload"] == {"turn_id": turn}
    assert got["sender"]["role"] == "edge"
    await client.close()
