"""Session resources over HTTP: create, list, read, rename, fork, export, delete."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from protocol.errors import StoreUnavailableError
from relay.server import Master
from relay.store.base import AppendResult, NewEntry
from tests.e2e.conftest import API_KEY, OTHER_KEY
from tests.relay.http.conftest import Api, wait_head
from tests.support.wire import Peer, envelope, new_turn_id, usage_payload


async def run_turn(client: Peer, index: int = 0, text: str = "Hello") -> str:
    """A complete turn: text, a tool call and its result, turn end, usage."""
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": index})
    await client.send("agent.text.delta", {"block_id": f"b{index}", "delta": text})
    await client.send("agent.text.done", {"block_id": f"b{index}"})
    await client.send(
        "tool.invoke.request", {"call_id": f"c{index}", "tool_name": "ls", "input": {"p": "."}}
    )
    await client.send("tool.invoke.result", {"call_id": f"c{index}", "status": "ok", "output": 1})
    await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    await client.send("session.usage", usage_payload(turn))
    return turn


async def test_create_returns_the_session_and_one_token(api: Api) -> None:
    """The first create answers 201 with the session and a session token shown once."""
    reply = await api.post(
        "/v1/sessions", {"session_id": "s-new", "name": "First", "agent_id": "agent-7"}
    )
    assert reply.status == 201
    assert reply.headers["Location"] == "/v1/sessions/s-new"
    body = reply.body
    assert body["created"] is True
    session = body["session"]
    assert session["session_id"] == "s-new"
    assert session["name"] == "First"
    assert session["agent_id"] == "agent-7"
    assert session["workspace"] == "default"
    assert session["status"] == "idle"
    assert session["head_seq"] == 0
    assert session["connection"] == "none"
    token = body["token"]
    assert token["token"].startswith("st_")
    assert token["session_id"] == "s-new"
    assert token["grants"] == []
    assert len(token["token_id"]) == 64
    assert token["expires_at"] is not None
    mine = await api.get("/v1/sessions/s-new", token=token["token"])
    assert mine.status == 200


async def test_repeat_create_is_idempotent_and_issues_no_token(api: Api) -> None:
    """Creating the same id again answers 200 with the same session and no new token."""
    first = await api.create("s-twice", name="Once")
    again = await api.post("/v1/sessions", {"session_id": "s-twice", "name": "Other name"})
    assert again.status == 200
    assert again.body["created"] is False
    assert again.body["token"] is None
    assert again.body["session"]["name"] == "Once"
    assert again.body["session"]["epoch"] == first.body["session"]["epoch"]
    assert again.body["session"]["created_at"] == first.body["session"]["created_at"]


async def test_create_without_id_generates_one(api: Api) -> None:
    """A create without session_id (or without a body) gets a fresh s-… id."""
    reply = await api.post("/v1/sessions")
    assert reply.status == 201
    assert reply.body["session"]["session_id"].startswith("s-")


async def test_create_refusals_are_problems(api: Api) -> None:
    """Bad body, taken id, unknown parent and a session token: problem+json answers."""
    bad = await api.post("/v1/sessions", {"name": 42})
    assert bad.status == 400
    assert bad.problem["code"] == "invalid_body"
    assert "name" in bad.problem["detail"]
    not_json = await api.call("POST", "/v1/sessions", data=b"{nope")
    assert not_json.status == 400
    assert not_json.problem["code"] == "invalid_body"
    await api.create("s-taken")
    taken = await api.post("/v1/sessions", {"session_id": "s-taken"}, token=OTHER_KEY)
    assert taken.status == 409
    assert taken.problem["code"] == "session_id_taken"
    orphan = await api.post("/v1/sessions", {"session_id": "s-child", "parent_session_id": "nope"})
    assert orphan.status == 422
    assert orphan.problem["code"] == "parent_not_found"
    token = (await api.create("s-tok")).body["token"]["token"]
    by_token = await api.post("/v1/sessions", {"session_id": "s-x"}, token=token)
    assert by_token.status == 403
    assert by_token.problem["code"] == "not_allowed"


async def test_create_with_parent_records_it(api: Api) -> None:
    """parent_session_id (a session of the same workspace) is kept in the header."""
    await api.create("s-parent")
    child = await api.create("s-child", parent_session_id="s-parent")
    assert child.body["session"]["parent_session_id"] == "s-parent"


async def test_list_is_paged_and_per_workspace(api: Api) -> None:
    """Listing pages through the key's workspace only, in id order, with next_after."""
    for i in range(5):
        await api.create(f"s-list-{i}")
    await api.post("/v1/sessions", {"session_id": "s-elsewhere"}, token=OTHER_KEY)
    seen: list[str] = []
    after = ""
    while True:
        reply = await api.get(f"/v1/sessions?limit=2&after={after}")
        assert reply.status == 200
        page = reply.body
        assert len(page["sessions"]) <= 2
        seen += [s["session_id"] for s in page["sessions"]]
        if page["next_after"] is None:
            break
        after = page["next_after"]
    assert seen == [f"s-list-{i}" for i in range(5)]
    other = await api.get("/v1/sessions", token=OTHER_KEY)
    assert [s["session_id"] for s in other.body["sessions"]] == ["s-elsewhere"]
    bad = await api.get("/v1/sessions?limit=0")
    assert bad.status == 400
    assert bad.problem["code"] == "invalid_query"


async def test_get_shows_status_presence_and_usage(api: Api, master: Master) -> None:
    """GET reports status from the state machine, presence and the usage totals."""
    client = await Peer.open(master.ws_url, "s-get", token=API_KEY, create={"name": "g"})
    edge = await Peer.open(master.ws_url, "s-get", role="edge", token=API_KEY)
    await run_turn(client)
    session = await wait_head(api, "s-get", 9)
    assert session["status"] == "idle"
    assert session["connection"] == "attached"
    assert session["usage"] == {
        "input_tokens": 10,
        "output_tokens": 20,
        "cost_used": 0.01,
        "cost_unit": "USD",
        "turns_completed": 1,
        "compactions": 0,
    }
    roles = {p["participant_id"]: (p["role"], p["state"]) for p in session["participants"]}
    assert roles[client.participant_id] == ("client", "attached")
    assert roles[edge.participant_id] == ("edge", "attached")
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 1})
    running = await wait_head(api, "s-get", 10)
    assert running["status"] == "running"
    await client.send(
        "agent.interaction.request",
        {"interaction_id": "i1", "kind": "confirmation", "prompt": "ok?"},
    )
    asking = await wait_head(api, "s-get", 11)
    assert asking["status"] == "requires_action"
    assert asking["pending_interactions"] == ["i1"]
    await client.close()
    gone = await wait_head(api, "s-get", 12)
    assert gone["connection"] == "detached"
    detached = [p for p in gone["participants"] if p["participant_id"] == client.participant_id]
    assert detached[0]["state"] == "detached"
    assert detached[0]["detached_at"] is not None
    await edge.close()


async def test_get_unknown_session_is_404(api: Api) -> None:
    """An unknown session answers a 404 problem."""
    reply = await api.get("/v1/sessions/s-nowhere")
    assert reply.status == 404
    assert reply.problem["code"] == "not_found"


async def test_rename_is_broadcast_as_master(api: Api, master: Master) -> None:
    """PATCH logs a §7.6 session.renamed (renamed_by master) sent to client and edges."""
    client = await Peer.open(master.ws_url, "s-ren", token=API_KEY, create={"name": "before"})
    edge = await Peer.open(master.ws_url, "s-ren", role="edge", token=API_KEY)
    reply = await api.patch("/v1/sessions/s-ren", {"name": "after"})
    assert reply.status == 200
    assert reply.body["name"] == "after"
    for peer in (client, edge):
        frame = await peer.recv_type("session.renamed")
        assert frame["payload"] == {
            "session_id": "s-ren",
            "name": "after",
            "renamed_by": "master",
            "previous_name": "before",
        }
        assert frame["sender"] == {"role": "master", "participant_id": "m-test"}
    events = await api.get("/v1/sessions/s-ren/events?limit=1")
    assert events.body["events"][0]["type"] == "session.renamed"
    head = events.body["head_seq"]
    same = await api.patch("/v1/sessions/s-ren", {"name": "after"})
    assert same.status == 200
    assert (await api.get("/v1/sessions/s-ren/events?limit=1")).body["head_seq"] == head
    too_long = await api.patch("/v1/sessions/s-ren", {"name": "x" * 201})
    assert too_long.status == 400
    assert too_long.problem["code"] == "invalid_body"
    header = await master.store.get_session("s-ren")
    assert header is not None
    assert header.name == "after"
    await client.close()
    await edge.close()


async def test_fork_copies_the_prefix(api: Api, master: Master) -> None:
    """A fork's log is a copy of seqs 1..at_seq; later parent frames do not appear in it."""
    client = await Peer.open(master.ws_url, "s-src", token=API_KEY, create={"name": "src"})
    await run_turn(client, 0, "first")
    await wait_head(api, "s-src", 8)
    reply = await api.post("/v1/sessions/s-src/fork", {"at_seq": 8, "session_id": "s-fork"})
    assert reply.status == 201
    fork = reply.body["session"]
    assert fork["parent_session_id"] == "s-src"
    assert fork["seed_length"] == 8
    assert fork["name"] == "src (fork)"
    assert fork["usage"]["turns_completed"] == 1
    assert reply.body["token"]["session_id"] == "s-fork"
    await run_turn(client, 1, "second")
    await wait_head(api, "s-src", 15)
    parent = await api.get("/v1/sessions/s-src/events?order=asc&limit=8")
    copied = await api.get("/v1/sessions/s-fork/events?order=asc&limit=100")
    assert copied.body["events"][:8] == parent.body["events"]
    # after the copy, the source's client (its copied presence) is expired in the fork
    [gone] = copied.body["events"][8:]
    assert gone["type"] == "session.presence"
    assert gone["payload"]["participant_id"] == client.participant_id
    assert gone["payload"]["state"] == "expired"
    again = await api.post("/v1/sessions/s-src/fork", {"at_seq": 8, "session_id": "s-fork"})
    assert again.status == 200
    assert again.body["created"] is False
    clash = await api.post("/v1/sessions/s-src/fork", {"at_seq": 3, "session_id": "s-fork"})
    assert clash.status == 409
    past = await api.post("/v1/sessions/s-src/fork", {"at_seq": 999})
    assert past.status == 422
    assert past.problem["code"] == "invalid_seq"
    await client.close()


async def test_fork_inside_a_turn_is_finalized(api: Api, master: Master) -> None:
    """A prefix that ends inside a turn is closed in the fork with synthetic frames."""
    client = await Peer.open(master.ws_url, "s-mid", token=API_KEY, create={"name": "m"})
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send("agent.text.delta", {"block_id": "b", "delta": "par"})
    await client.send("tool.invoke.request", {"call_id": "c", "tool_name": "t", "input": {}})
    await wait_head(api, "s-mid", 5)  # with the turn's session.status (running)
    reply = await api.post("/v1/sessions/s-mid/fork", {"session_id": "s-mid-fork"})
    assert reply.status == 201
    assert reply.body["session"]["seed_length"] == 5
    assert reply.body["session"]["status"] == "idle"
    events = (await api.get("/v1/sessions/s-mid-fork/events?order=asc&after_seq=5")).body
    gone, *synthetic = [e for e in events["events"] if e["type"] != "session.status"]
    assert (gone["type"], gone["payload"]["state"]) == ("session.presence", "expired")
    types = [e["type"] for e in synthetic]
    assert types == ["agent.text.done", "tool.invoke.result", "session.turn.end"]
    assert all(e["metadata"] == {"synthetic": True} for e in synthetic)
    source = (await api.get("/v1/sessions/s-mid")).body
    assert source["status"] == "running"  # the source is untouched
    await client.close()


async def test_export_json_and_markdown(api: Api, master: Master) -> None:
    """export?format=json has every envelope; format=md is a readable transcript."""
    client = await Peer.open(master.ws_url, "s-exp", token=API_KEY, create={"name": "Export me"})
    await run_turn(client, 0, "The answer is 42.")
    await wait_head(api, "s-exp", 10)  # with the turn's two session.status frames
    as_json = await api.get("/v1/sessions/s-exp/export?format=json")
    assert as_json.status == 200
    assert 'filename="s-exp.json"' in as_json.headers["Content-Disposition"]
    assert as_json.body["session"]["session_id"] == "s-exp"
    assert [e["seq"] for e in as_json.body["events"]] == list(range(1, 11))
    as_md = await api.get("/v1/sessions/s-exp/export?format=md")
    assert as_md.status == 200
    assert as_md.headers["Content-Type"].startswith("text/markdown")
    text = as_md.text
    assert text.startswith("# Export me")
    assert "The answer is 42." in text
    assert "**Tool call** `ls` → ok" in text
    assert "## Turn 1 — end_turn" in text
    assert "10 in / 20 out tokens" in text
    bad = await api.get("/v1/sessions/s-exp/export?format=pdf")
    assert bad.status == 400
    assert bad.problem["code"] == "invalid_query"
    await client.close()


async def test_delete_answers_404_or_if_absent(api: Api, master: Master) -> None:
    """DELETE: 404 for an unknown id unless if_absent=ok; the plural path is an alias."""
    missing = await api.delete("/v1/session/s-none")
    assert missing.status == 404
    assert missing.problem["code"] == "not_found"
    tolerated = await api.delete("/v1/session/s-none?if_absent=ok")
    assert tolerated.status == 200
    assert tolerated.body == {"session_id": "s-none", "deleted": False}
    await api.create("s-del")
    edge = await Peer.open(master.ws_url, "s-del", role="edge", token=API_KEY)
    busy = await api.delete("/v1/sessions/s-del?if_idle=true")
    assert busy.status == 409
    done = await api.delete("/v1/sessions/s-del")
    assert done.status == 200
    assert done.body == {"session_id": "s-del", "deleted": True}
    frame = await edge.recv_type("session.deleted")
    assert frame["payload"]["reason"] == "master_request"
    assert (await api.get("/v1/sessions/s-del")).status == 404


async def test_unknown_ignorable_frames_are_served_untouched(api: Api, master: Master) -> None:
    """Frames of unknown ignorable types are stored and served untouched."""
    client = await Peer.open(master.ws_url, "s-ign", token=API_KEY, create=True)
    frame = envelope(
        "s-ign", "vendor.custom", {"x": [1, 2]}, metadata={"ignorable": True}, extra_key="kept"
    )
    await client.send_frame(frame)
    await wait_head(api, "s-ign", 2)
    events = (await api.get("/v1/sessions/s-ign/events?limit=1")).body["events"]
    assert events[0]["type"] == "vendor.custom"
    assert events[0]["extra_key"] == "kept"
    assert events[0]["payload"] == {"x": [1, 2]}
    await client.close()


async def test_a_store_outage_answers_503_without_the_store_s_own_text(
    api: Api, master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GET while the store is down: 503 store_unavailable whose detail names the failure's
    kind, not the backend's text (its host and port stay in the master's log)."""
    await api.create("s-outage-text")

    async def get_session(session_id: str) -> None:
        raise StoreUnavailableError("redis unreachable: Error 111 connecting to 10.9.8.7:6380.")

    monkeypatch.setattr(master.store, "get_session", get_session)
    refused = await api.get("/v1/sessions/s-outage-text")
    assert refused.status == 503
    assert refused.problem["code"] == "store_unavailable"
    assert refused.problem["detail"] == "the store is unavailable"
    assert "10.9.8.7" not in refused.text


async def test_a_delete_the_store_cannot_make_durable_answers_503(
    api: Api, master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DELETE while the store takes neither the session.deleted nor the purge: 503
    store_unavailable, the session still there; sent again once the store is back, 200."""
    await api.create("s-del-outage")
    real_append, real_delete = master.store.append, master.store.delete_session
    down = True

    async def append(session_id: str, entries: Sequence[NewEntry]) -> list[AppendResult]:
        if down:
            raise StoreUnavailableError("redis unreachable")
        return await real_append(session_id, entries)

    async def delete_session(session_id: str) -> bool:
        if down:
            raise StoreUnavailableError("redis unreachable")
        return await real_delete(session_id)

    monkeypatch.setattr(master.store, "append", append)
    monkeypatch.setattr(master.store, "delete_session", delete_session)
    refused = await api.delete("/v1/sessions/s-del-outage")
    assert refused.status == 503
    assert refused.problem["code"] == "store_unavailable"
    assert (await api.get("/v1/sessions/s-del-outage")).status == 200
    down = False
    done = await api.delete("/v1/sessions/s-del-outage")
    assert done.status == 200
    assert (await api.get("/v1/sessions/s-del-outage")).status == 404
