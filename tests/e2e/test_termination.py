"""Termination: the §7.5.3 / §7.7 order for every trigger, and what is left after (notes §9)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from relay.server import Master
from tests.e2e.conftest import API_KEY, OTHER_KEY
from tests.e2e.util import (
    detached,
    hello,
    hello_close_code,
    http,
    is_presence,
    new_session,
    next_frame,
    wait_until,
)
from tests.support.wire import Peer, new_turn_id


async def busy_session(master: Master, sid: str, edges: int = 2) -> tuple[Peer, list[Peer], str]:
    """A session mid-turn: open text block, two open tool calls; every edge has seen it all."""
    client, attached = await new_session(master, sid, edges=edges)
    turn = new_turn_id()
    steps: list[tuple[str, dict[str, Any]]] = [
        ("session.turn.start", {"turn_id": turn, "turn_index": 0}),
        ("agent.state", {"state": "tool_calling"}),
        ("agent.text.delta", {"block_id": "b1", "delta": "working"}),
        ("tool.invoke.request", {"call_id": "c1", "tool_name": "ls", "input": {}}),
        ("tool.invoke.request", {"call_id": "c2", "tool_name": "cat", "input": {"f": "x"}}),
    ]
    for type_, payload in steps:
        await client.send(type_, payload)
    for edge in attached:
        for _ in steps:
            await next_frame(edge)
    return client, attached, turn


async def until_closed(peer: Peer) -> tuple[list[dict[str, Any]], int | None]:
    """Every frame the peer gets until the master closes it (presence left out), and the code."""
    before = len(peer.received)
    code = await peer.closed_with()
    return [f for f in peer.received[before:] if not is_presence(f)], code


def assert_cleanup_order(
    frames: list[dict[str, Any]], turn: str | None, sid: str, reason: str, deleted_by: str
) -> None:
    """tool.invoke.result cancelled per open call → turn.end error → session.deleted."""
    expected: list[tuple[str, Any]] = []
    if turn is not None:
        expected += [("tool.invoke.result", "c1"), ("tool.invoke.result", "c2")]
        expected += [("session.turn.end", turn)]
    expected += [("session.deleted", sid)]
    got = []
    for f in frames:
        p = f["payload"]
        key = p.get("call_id") or p.get("turn_id") or p.get("session_id")
        got.append((f["type"], key))
    assert got == expected, frames
    for f in frames:
        assert f["sender"] == {"role": "master", "participant_id": "m-test"}
        # Termination cleanup is final, never retracted: not synthetic (notes §15.2).
        assert not (f.get("metadata") or {}).get("synthetic")
    seqs = [f["seq"] for f in frames]
    # In log order, one after another but for the session.status (terminated) just before
    # session.deleted (notes §17.4).
    assert seqs[:-1] == list(range(seqs[0], seqs[0] + len(seqs) - 1))
    assert seqs[-1] == seqs[-2] + 2 if len(seqs) > 1 else True
    for f in frames:
        if f["type"] == "tool.invoke.result":
            assert f["payload"]["status"] == "cancelled"
        if f["type"] == "session.turn.end":
            assert f["payload"]["stop_reason"] == "error"
    ended = {"session_id": sid, "reason": reason, "deleted_by": deleted_by}
    assert {k: v for k, v in frames[-1]["payload"].items() if k != "reattach_window_ms"} == ended


async def assert_gone(master: Master, sid: str) -> None:
    """The session is deleted: store empty, hellos refused 4410, DELETE 404."""
    # The master closes the sockets, then removes the session from the store.
    await wait_until(lambda: sid not in master.hub.sessions)
    assert await master.store.get_session(sid) is None
    assert await master.store.read(sid) == []
    assert sid not in master.hub.sessions
    assert await hello_close_code(master, hello(sid)) == 4410
    assert await hello_close_code(master, hello(sid, role="edge")) == 4410
    status, body = await http(master, "DELETE", f"/v1/session/{sid}")
    assert status == 404, body


async def assert_archived(master: Master, sid: str, reason: str, deleted_by: str) -> None:
    """The session ended and is archived (notes §16.1): readable, hellos 4410, DELETE purges."""
    await wait_until(lambda: sid not in master.hub.sessions)
    header = await master.store.get_session(sid)
    assert header is not None
    assert header.archived
    assert (header.reason, header.deleted_by) == (reason, deleted_by)
    log = await master.store.read(sid)
    assert log[-1].type == "session.deleted"
    assert await master.store.list_participants(sid) == []
    status, body = await http(master, "GET", f"/v1/sessions/{sid}")
    assert status == 200
    assert body["status"] == "terminated"
    assert body["reason"] == reason
    assert await hello_close_code(master, hello(sid)) == 4410
    assert await hello_close_code(master, hello(sid, role="edge")) == 4410
    status, body = await http(master, "DELETE", f"/v1/session/{sid}")
    assert status == 200, body
    await assert_gone(master, sid)


async def test_http_delete_cleans_up_in_order_then_closes_1000(master: Master) -> None:
    """DELETE /v1/session/{id}: cancelled results, turn end error, session.deleted, 1000."""
    sid = "s-term-http"
    client, edges, turn = await busy_session(master, sid)
    status, body = await http(master, "DELETE", f"/v1/session/{sid}")
    assert status == 200
    assert body == {"session_id": sid, "deleted": True}
    for peer in (client, *edges):
        frames, code = await until_closed(peer)
        assert code == 1000
        assert_cleanup_order(frames, turn, sid, "master_request", "master")
    await assert_gone(master, sid)


async def test_http_delete_plural_alias(master: Master) -> None:
    """DELETE /v1/sessions/{id} is the same operation."""
    client, _ = await new_session(master, "s-term-alias", edges=0)
    status, _ = await http(master, "DELETE", "/v1/sessions/s-term-alias")
    assert status == 200
    frames, code = await until_closed(client)
    assert code == 1000
    assert_cleanup_order(frames, None, "s-term-alias", "master_request", "master")


async def test_idle_session_delete_sends_only_deleted(master: Master) -> None:
    """With no turn in progress only session.deleted precedes the close."""
    sid = "s-term-idle"
    client, (edge,) = await new_session(master, sid)
    status, _ = await http(master, "DELETE", f"/v1/session/{sid}")
    assert status == 200
    for peer in (client, edge):
        frames, code = await until_closed(peer)
        assert code == 1000
        assert_cleanup_order(frames, None, sid, "master_request", "master")


async def test_edge_delete_request_terminates_with_user_request(master: Master) -> None:
    """An edge's session.deleted is a request: not relayed; the master's own one follows cleanup."""
    sid = "s-term-edge"
    client, edges, turn = await busy_session(master, sid)
    request = await edges[0].send(
        "session.deleted", {"session_id": sid, "reason": "user_request", "deleted_by": "edge"}
    )
    for peer in (client, *edges):
        frames, code = await until_closed(peer)
        assert code == 1000
        assert request["message_id"] not in {f["message_id"] for f in frames}
        assert_cleanup_order(frames, turn, sid, "user_request", "edge")
    await assert_gone(master, sid)


async def test_client_delete_request_terminates_with_user_request(master: Master) -> None:
    """A client's delete request ends the session with deleted_by client."""
    sid = "s-term-client"
    client, edges, turn = await busy_session(master, sid, edges=1)
    await client.send(
        "session.deleted", {"session_id": sid, "reason": "user_request", "deleted_by": "client"}
    )
    for peer in (client, *edges):
        frames, code = await until_closed(peer)
        assert code == 1000
        assert_cleanup_order(frames, turn, sid, "user_request", "client")
    await assert_gone(master, sid)


async def test_fatal_error_from_client_terminates_with_error(master: Master) -> None:
    """A participant's fatal session.error is relayed, then the cleanup order with reason error."""
    sid = "s-term-fatal"
    client, edges, turn = await busy_session(master, sid)
    fatal = await client.send(
        "session.error", {"error_code": "agent_crashed", "message": "boom", "fatal": True}
    )
    for edge in edges:
        frames, code = await until_closed(edge)
        assert code == 1000
        assert frames[0]["message_id"] == fatal["message_id"]
        assert frames[0]["sender"]["role"] == "client"
        assert_cleanup_order(frames[1:], turn, sid, "error", "client")
    frames, code = await until_closed(client)
    assert code == 1000
    assert_cleanup_order(frames, turn, sid, "error", "client")
    await assert_archived(master, sid, "error", "client")


async def test_fatal_error_from_edge_terminates_with_error(master: Master) -> None:
    """An edge's fatal session.error ends the session with deleted_by edge."""
    sid = "s-term-fatal-edge"
    client, edges, turn = await busy_session(master, sid, edges=1)
    await edges[0].send("session.error", {"error_code": "ui", "message": "x", "fatal": True})
    frames, code = await until_closed(client)
    assert code == 1000
    assert frames[0]["type"] == "session.error"
    assert_cleanup_order(frames[1:], turn, sid, "error", "edge")
    frames, code = await until_closed(edges[0])
    assert code == 1000
    assert_cleanup_order(frames, turn, sid, "error", "edge")
    await assert_archived(master, sid, "error", "edge")


async def test_non_fatal_error_from_client_is_only_relayed(master: Master) -> None:
    """A non-fatal session.error is relayed and the session goes on."""
    client, (edge,) = await new_session(master, "s-term-nonfatal")
    sent = await client.send("session.error", {"error_code": "x", "message": "y", "fatal": False})
    assert (await next_frame(edge))["message_id"] == sent["message_id"]
    sentinel = await client.send("agent.state", {"state": "thinking"})
    assert (await next_frame(edge))["message_id"] == sentinel["message_id"]


async def test_reattach_window_expiry_terminates_with_timeout(make_master: Any) -> None:
    """A client detached past the reattach window ends the session: timeout, system, 1000."""
    master: Master = await make_master(reattach_window_s=0.3)
    sid = "s-term-expiry"
    client, edges, _turn = await busy_session(master, sid)
    await client.close()
    for edge in edges:
        frames, code = await until_closed(edge)
        assert code == 1000
        # §7.8.1 finalization ran at the detach, so nothing is open any more at expiry.
        synthetic = [f for f in frames if (f.get("metadata") or {}).get("synthetic")]
        assert [f["type"] for f in synthetic] == [
            "agent.text.done",
            "tool.invoke.result",
            "tool.invoke.result",
            "session.turn.end",
            "agent.state",
        ]
        rest = frames[len(synthetic) :]
        assert_cleanup_order(rest, None, sid, "timeout", "system")
    await assert_archived(master, sid, "timeout", "system")


async def test_detached_edge_expires_without_ending_the_session(make_master: Any) -> None:
    """An edge detached past the window just expires (presence expired); the session lives."""
    master: Master = await make_master(reattach_window_s=0.3)
    sid = "s-term-edge-expiry"
    client, (edge1, edge2) = await new_session(master, sid, edges=2)
    await edge1.close()
    states = await client.recv_until(lambda f: f["payload"].get("state") == "expired")
    assert [(f["payload"]["participant_id"], f["payload"]["state"]) for f in states] == [
        (edge1.participant_id, "detached"),
        (edge1.participant_id, "expired"),
    ]
    await edge2.recv_until(lambda f: f["payload"].get("state") == "expired")
    assert await master.store.get_participant(sid, edge1.participant_id) is None
    # Its participant id is now unknown: a reattach gets a fresh one.
    back = await Peer.open(
        master.ws_url, sid, role="edge", token=API_KEY, participant_id=edge1.participant_id
    )
    assert back.welcome["payload"]["resumed"] is False
    assert back.participant_id != edge1.participant_id
    assert await master.store.get_session(sid) is not None


async def test_if_idle_refuses_409_while_attached(master: Master) -> None:
    """?if_idle=true answers 409 while anyone is attached and deletes once nobody is."""
    sid = "s-term-ifidle"
    client, (edge,) = await new_session(master, sid)
    status, body = await http(master, "DELETE", f"/v1/session/{sid}?if_idle=true")
    assert status == 409, body
    assert body["code"] == "attached"
    await client.send("agent.state", {"state": "thinking"})
    assert (await next_frame(edge))["type"] == "agent.state"
    await edge.close()
    status, _ = await http(master, "DELETE", f"/v1/session/{sid}?if_idle=true")
    assert status == 409
    await client.close()
    await detached(master, sid, client)
    await detached(master, sid, edge)
    status, body = await http(master, "DELETE", f"/v1/session/{sid}?if_idle=true")
    assert status == 200, body
    assert body["deleted"] is True
    await assert_gone(master, sid)


async def test_if_idle_is_checked_under_the_session_lock(master: Master) -> None:
    """An attach queued on the session lock before DELETE ?if_idle=true makes it 409 (seed 001)."""
    sid = "s-term-ifidle-race"
    client, _ = await new_session(master, sid, edges=0)
    await client.close()
    await wait_until(lambda: not master.hub.sessions[sid].participants)
    session = master.hub.sessions[sid]
    lock = session.lock
    assert isinstance(lock, asyncio.Lock)

    def waiting() -> int:
        return len(getattr(lock, "_waiters", None) or ())

    await lock.acquire()
    try:
        # An edge's attach queues on the lock first, then the idle-only delete behind it.
        edge_task = asyncio.create_task(Peer.open(master.ws_url, sid, role="edge", token=API_KEY))
        await wait_until(lambda: waiting() == 1)
        delete_task = asyncio.create_task(http(master, "DELETE", f"/v1/session/{sid}?if_idle=true"))
        await wait_until(lambda: waiting() == 2)
    finally:
        lock.release()
    edge = await edge_task
    status, body = await delete_task
    assert status == 409, body
    assert await master.store.get_session(sid) is not None
    assert edge.participant_id in master.hub.sessions[sid].participants


async def test_delete_unknown_session_404_or_200_with_if_absent(master: Master) -> None:
    """Deleting an unknown session answers 404, or 200 (deleted false) with if_absent=ok."""
    status, body = await http(master, "DELETE", "/v1/session/s-never")
    assert status == 404
    assert body["code"] == "not_found"
    status, body = await http(master, "DELETE", "/v1/session/s-never?if_absent=ok")
    assert status == 200
    assert body == {"session_id": "s-never", "deleted": False}


async def test_delete_needs_a_credential_that_sees_and_may_delete(master: Master) -> None:
    """No credential 401; another workspace 404; a session token without the grant 403."""
    sid = "s-term-auth"
    client = (await new_session(master, sid, edges=0))[0]
    status, _ = await http(master, "DELETE", f"/v1/session/{sid}", token=None)
    assert status == 401
    status, _ = await http(master, "DELETE", f"/v1/session/{sid}", token=OTHER_KEY)
    assert status == 404
    token, _ = await master.hub.auth.issue_token("default", sid)
    status, _ = await http(master, "DELETE", f"/v1/session/{sid}", token=token)
    assert status == 403
    granted, _ = await master.hub.auth.issue_token("default", sid, grants=frozenset({"delete"}))
    status, _ = await http(master, "DELETE", f"/v1/session/{sid}", token=granted)
    assert status == 200
    assert (await until_closed(client))[1] == 1000


async def test_deleted_session_can_be_created_again(master: Master) -> None:
    """After deletion a client hello with create starts a new session (new epoch, empty log)."""
    sid = "s-term-recreate"
    client, _ = await new_session(master, sid, edges=0)
    old_epoch = client.welcome["payload"]["session"]["epoch"]
    await http(master, "DELETE", f"/v1/session/{sid}")
    await until_closed(client)
    again = await Peer.open(master.ws_url, sid, token=API_KEY, create=True)
    session = again.welcome["payload"]["session"]
    assert session["epoch"] != old_epoch
    assert session["head_seq"] == 0


async def test_master_shutdown_closes_1001_without_finalization(make_master: Any) -> None:
    """Shutting the master down closes every connection 1001; the session is not ended."""
    master: Master = await make_master()
    sid = "s-term-shutdown"
    client, edges, _ = await busy_session(master, sid)
    await master.stop()
    for peer in (client, *edges):
        frames, code = await until_closed(peer)
        assert code == 1001
        assert frames == []
    assert await master.store.get_session(sid) is not None


@pytest.mark.parametrize("who", ["edge", "client"])
async def test_frames_after_delete_request_are_not_accepted(master: Master, who: str) -> None:
    """Frames that follow a delete request on the same socket are neither logged nor relayed."""
    sid = f"s-term-after-{who}"
    client, (edge,) = await new_session(master, sid)
    sender = edge if who == "edge" else client
    await sender.send(
        "session.deleted", {"session_id": sid, "reason": "user_request", "deleted_by": who}
    )
    late_type = "user.message" if who == "edge" else "agent.state"
    late_payload = {"text": "late"} if who == "edge" else {"state": "thinking"}
    late = await sender.send(late_type, late_payload)
    for peer in (client, edge):
        frames, code = await until_closed(peer)
        assert code == 1000
        assert late["message_id"] not in {f["message_id"] for f in frames}
        assert frames[-1]["type"] == "session.deleted"
