"""One run at a time, and runs that say how they ended (notes §17.3, §17.4, §17.12).

Against a ``rawp serve`` process on SQLite: a ``user.message`` that arrives while the agent
runs waits (up to 3 s) and is relayed when the run ends, or refused ``busy`` (not logged);
between two UIs the first wins; a client that steers gets every message at once; the same
over REST and AG-UI (409 ``busy``) and in the client library (``FrameRefused``); the master
logs ``session.status`` on every status change, and a failed run's error shows in the
session's HTTP view.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from protocol.client import FrameRefused, RawpClient
from tests.support.masters import MasterProcess
from tests.support.wire import Peer, new_turn_id, usage_payload

__all__: list[str] = []

KEY = "rk_runs"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
def master(tmp_path: Path) -> Iterator[MasterProcess]:
    """``rawp serve`` on a SQLite file."""
    node = MasterProcess("n1", f"sqlite:{tmp_path / 'rawp.db'}", api_key=KEY, log_dir=tmp_path)
    node.spawn()
    try:
        node.wait_ready()
        yield node
    finally:
        node.stop()


async def call(master: MasterProcess, method: str, path: str, body: Any = None) -> Any:
    """(status, JSON answer) of one HTTP request."""
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, master.http_url + path, json=body, headers=AUTH) as answer,
    ):
        return answer.status, await answer.json(content_type=None)


async def session_with_edges(
    master: MasterProcess, session_id: str, edges: int = 1, **client_hello: Any
) -> tuple[Peer, list[Peer]]:
    """A client and ``edges`` edges attached, presence drained."""
    client = await Peer.open(master.ws_url, session_id, token=KEY, create=True, **client_hello)
    attached = []
    for _ in range(edges):
        edge = await Peer.open(master.ws_url, session_id, role="edge", token=KEY)
        for peer in (client, *attached):
            await peer.recv_type("session.presence")
        attached.append(edge)
    return client, attached


async def start_turn(client: Peer, index: int = 0) -> str:
    """Open a turn; its id."""
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": index})
    return turn


async def end_turn(client: Peer, turn: str, **end: Any) -> None:
    """End the turn (``end`` overrides the payload) and send its usage."""
    await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn", **end})
    await client.send("session.usage", usage_payload(turn))


async def logged_ids(master: MasterProcess, session_id: str) -> list[str]:
    """The message ids of the session's log."""
    _, page = await call(master, "GET", f"/v1/sessions/{session_id}/events?limit=1000")
    return [event["message_id"] for event in page["events"]]


async def test_message_during_a_run_waits_and_follows_its_end(master: MasterProcess) -> None:
    """A user.message sent while a turn is open reaches the agent only after the turn ends."""
    client, (edge,) = await session_with_edges(master, "s-wait")
    turn = await start_turn(client)
    message = await edge.send("user.message", {"text": "next, please"})
    assert await client.no_frame(0.8)  # held while the agent runs
    await end_turn(client, turn)
    got = await client.recv_type("user.message")
    assert got["message_id"] == message["message_id"]


async def test_message_refused_busy_when_the_run_outlasts_the_wait(master: MasterProcess) -> None:
    """After 3 s with the turn still open the message is refused ``busy`` (non-fatal, naming
    it), never relayed nor logged."""
    client, (edge,) = await session_with_edges(master, "s-busy")
    await start_turn(client)
    message = await edge.send("user.message", {"text": "are you there?"})
    error = await edge.recv_type("session.error", timeout=10)
    assert error["payload"]["error_code"] == "busy"
    assert error["payload"]["fatal"] is False
    assert error["payload"]["ref_message_id"] == message["message_id"]
    assert "seq" not in error
    assert await client.no_frame(0.3)
    assert message["message_id"] not in await logged_ids(master, "s-busy")


async def test_between_two_uis_the_first_wins(master: MasterProcess) -> None:
    """Two UIs write to an idle agent at once: the first message starts the run, the second
    waits and, the run still open after 3 s, is refused busy."""
    client, (first, second) = await session_with_edges(master, "s-race", edges=2)
    a = await first.send("user.message", {"text": "first"})
    b = await second.send("user.message", {"text": "second"})
    got = await client.recv_type("user.message")
    assert got["message_id"] == a["message_id"]
    await start_turn(client)  # the run the first message asked for
    error = await second.recv_type("session.error", timeout=10)
    assert (error["payload"]["error_code"], error["payload"]["ref_message_id"]) == (
        "busy",
        b["message_id"],
    )
    assert b["message_id"] not in await logged_ids(master, "s-race")


async def test_a_run_about_to_start_holds_the_next_message(master: MasterProcess) -> None:
    """Right after a message to an idle agent, the next one waits for that run: relayed once
    the run it started ends, after the agent's turn."""
    client, (edge,) = await session_with_edges(master, "s-soon")
    await edge.send("user.message", {"text": "one"})
    await client.recv_type("user.message")
    second = await edge.send("user.message", {"text": "two"})
    turn = await start_turn(client)
    assert await client.no_frame(0.5)
    await end_turn(client, turn)
    got = await client.recv_type("user.message")
    assert got["message_id"] == second["message_id"]


async def test_a_steering_client_gets_messages_at_once(master: MasterProcess) -> None:
    """A client whose hello says accepts_input_during_turn gets a message during its turn."""
    agent, (ui,) = await session_with_edges(master, "s-steer", accepts_input_during_turn=True)
    await start_turn(agent)
    message = await ui.send("user.message", {"text": "steer left"})
    got = await agent.recv_type("user.message", timeout=2)
    assert got["message_id"] == message["message_id"]


async def test_rest_message_during_a_long_run_is_409_busy(master: MasterProcess) -> None:
    """``POST …/events`` with a user.message while a turn stays open answers 409 ``busy``."""
    client, _ = await session_with_edges(master, "s-rest", edges=0)
    await start_turn(client)
    body = {"type": "user.message", "payload": {"text": "hello?"}, "message_id": "rest-1"}
    status, problem = await call(master, "POST", "/v1/sessions/s-rest/events", body)
    assert (status, problem["code"]) == (409, "busy")
    assert "rest-1" not in await logged_ids(master, "s-rest")


async def test_rest_message_waits_for_a_run_that_ends(master: MasterProcess) -> None:
    """``POST …/events`` during a turn that ends within the wait answers 201 after it."""
    client, _ = await session_with_edges(master, "s-rest-ok", edges=0)
    turn = await start_turn(client)
    body = {"type": "user.message", "payload": {"text": "after you"}, "message_id": "rest-2"}
    posting = asyncio.ensure_future(call(master, "POST", "/v1/sessions/s-rest-ok/events", body))
    await asyncio.sleep(0.5)
    assert not posting.done()
    await end_turn(client, turn)
    status, answer = await posting
    assert status == 201
    assert answer["message_id"] == "rest-2"


async def test_agui_run_during_a_long_run_is_409_busy(master: MasterProcess) -> None:
    """An AG-UI POST whose new user message finds the agent running answers 409 ``busy``."""
    client, _ = await session_with_edges(master, "s-agui", edges=0)
    await start_turn(client)
    run = {
        "threadId": "s-agui",
        "runId": "r1",
        "state": {},
        "messages": [{"id": "ui-1", "role": "user", "content": "hi"}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    status, problem = await call(master, "POST", "/v1/sessions/s-agui/ag-ui", run)
    assert (status, problem["code"]) == (409, "busy")


async def test_client_library_raises_frame_refused_busy(master: MasterProcess) -> None:
    """An edge's post of a user.message the master refuses busy raises FrameRefused(busy)."""
    client, _ = await session_with_edges(master, "s-lib", edges=0)
    await start_turn(client)
    edge = RawpClient(master.ws_url, "s-lib", role="edge", token=KEY)
    await edge.connect()
    try:
        sent = await edge.user_message("anyone?")
        with pytest.raises(FrameRefused) as refused:
            await asyncio.wait_for(edge.committed(sent), 10)
        assert refused.value.code == "busy"
    finally:
        await edge.close()


async def test_status_changes_are_logged_and_a_failed_run_says_why(master: MasterProcess) -> None:
    """session.status running / idle (with stop_reason) reach an edge and the log; a turn
    that ends in error with error {code, message} shows in GET /v1/sessions/{id}."""
    client, (edge,) = await session_with_edges(master, "s-status")
    edge.show_status = True
    turn = await start_turn(client)
    running = await edge.recv_type("session.status")
    assert running["payload"] == {"status": "running"}
    failure = {"code": "model_overloaded", "message": "the model is overloaded; try later"}
    await end_turn(client, turn, stop_reason="error", error=failure)
    idle = await edge.recv_type("session.status")
    assert idle["payload"] == {"status": "idle", "stop_reason": "error"}
    status, got = await call(master, "GET", "/v1/sessions/s-status")
    assert status == 200
    assert got["stop_reason"] == "error"
    assert got["last_error"] == failure
    _, listed = await call(master, "GET", "/v1/sessions")
    mine = next(s for s in listed["sessions"] if s["session_id"] == "s-status")
    assert (mine["stop_reason"], mine["last_error"]) == ("error", failure)
    _, page = await call(master, "GET", "/v1/sessions/s-status/events?order=asc")
    statuses = [e["payload"]["status"] for e in page["events"] if e["type"] == "session.status"]
    assert statuses == ["running", "idle"]


async def test_status_reaches_sse(master: MasterProcess) -> None:
    """The logged session.status frames are SSE events like every logged frame."""
    client, _ = await session_with_edges(master, "s-sse", edges=0)
    turn = await start_turn(client)
    await end_turn(client, turn)
    url = f"{master.http_url}/v1/sessions/s-sse/events/stream?after_seq=0"
    seen: list[str] = []
    async with (
        aiohttp.ClientSession() as http,
        http.get(url, headers=AUTH) as response,
    ):
        async with asyncio.timeout(5):
            async for line in response.content:
                if line.startswith(b"data: "):
                    event = json.loads(line[6:])
                    if event["type"] == "session.status":
                        seen.append(event["payload"]["status"])
                if len(seen) == 2:
                    break
    assert seen == ["running", "idle"]


async def test_turn_end_error_only_with_stop_reason_error(master: MasterProcess) -> None:
    """An error on a turn that did not fail is refused invalid_frame."""
    client, _ = await session_with_edges(master, "s-err", edges=0)
    turn = await start_turn(client)
    bad = await client.send(
        "session.turn.end",
        {"turn_id": turn, "stop_reason": "end_turn", "error": {"code": "x", "message": "y"}},
    )
    error = await client.recv_type("session.error")
    assert error["payload"]["error_code"] == "invalid_frame"
    assert error["payload"]["ref_message_id"] == bad["message_id"]


async def test_a_held_message_dies_with_a_killed_master_and_its_sender_knows(
    master: MasterProcess,
) -> None:
    """The master killed (-9) while it holds a user.message for the agent's run: after the
    restart the message is neither logged nor relayed, the sender's welcome does not name it
    as received, and sent again it reaches the agent and the log exactly once."""
    client, (edge,) = await session_with_edges(master, "s-held-kill")
    await start_turn(client)
    message = await edge.send("user.message", {"text": "held when the master dies"})
    assert await client.no_frame(0.5)  # held for the run
    master.kill()
    master.spawn()
    master.wait_ready()
    assert message["message_id"] not in await logged_ids(master, "s-held-kill")
    client = await Peer.open(
        master.ws_url, "s-held-kill", token=KEY, participant_id=client.participant_id
    )
    edge = await Peer.open(
        master.ws_url, "s-held-kill", role="edge", token=KEY, participant_id=edge.participant_id
    )
    received = edge.welcome["payload"].get("received") or {}
    assert received.get("last_message_id") != message["message_id"]
    await edge.send_frame(message)  # what was not received is sent again, as it was
    got = await client.recv_until(lambda f: f.get("message_id") == message["message_id"])
    assert [f["message_id"] for f in got].count(message["message_id"]) == 1
    assert (await logged_ids(master, "s-held-kill")).count(message["message_id"]) == 1
