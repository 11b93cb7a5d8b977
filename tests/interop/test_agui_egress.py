"""The relay as an AG-UI agent endpoint, driven by the real ``@ag-ui/client`` (HttpAgent).

Behind the endpoint is a RAWP agent written with the Python client library; in front of it
the npm package's own pipeline (enforceEvents, verifyEvents, defaultApplyEvents) runs in Node.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from protocol import codec
from protocol.agui import AguiEgress
from protocol.client import ConnectionStatus, RawpClient
from protocol.view import TextBlock, ThinkingBlock, ToolCallBlock, UserMessageBlock
from relay.http.transcript import view_of
from relay.server import Master
from tests.interop.conftest import API_KEY, run_harness

pytestmark = pytest.mark.timeout(120)

Script = Callable[[RawpClient, str, asyncio.Queue[Any]], Awaitable[None]]


async def _answer(client: RawpClient, text: str, _inbox: asyncio.Queue[Any]) -> None:
    """One turn: thinking, streamed text, a tool call and its result, usage after the end."""
    turn = await client.turn_start()
    await client.thinking_delta(f"th-{text}", "Let me think")
    await client.thinking_done(f"th-{text}")
    await client.text_delta(f"tx-{text}", "You said: ")
    await client.text_delta(f"tx-{text}", text)
    await client.text_done(f"tx-{text}")
    await client.tool_request(f"call-{text}", "search", {"query": text})
    await client.tool_result(f"call-{text}", "ok", {"hits": 2})
    await client.text_delta(f"tx2-{text}", "Done.")
    await client.text_done(f"tx2-{text}")
    await client.turn_end(turn.payload.turn_id, tool_invocation_count=1)
    await client.usage(input_tokens=10, output_tokens=20, thinking_tokens=5)


@contextlib.asynccontextmanager
async def rawp_agent(master: Master, session_id: str, script: Script) -> AsyncIterator[RawpClient]:
    """A RAWP client that runs ``script`` for every user message; responses go to its inbox."""
    client = RawpClient(master.ws_url, session_id, role="client", token=API_KEY, create=True)
    await client.connect()
    inbox: asyncio.Queue[Any] = asyncio.Queue()

    turns: list[asyncio.Task[None]] = []

    async def serve() -> None:
        async for frame in client:
            if frame.type == "user.message":
                text = frame.payload.text  # type: ignore[union-attr]
                previous = turns[-1] if turns else None
                turns.append(asyncio.create_task(_after(previous, script(client, text, inbox))))
            elif frame.type == "control.interaction.response":
                inbox.put_nowait(frame.payload.response)  # type: ignore[union-attr]

    task = asyncio.create_task(serve())
    try:
        yield client
    finally:
        for turn in turns:
            turn.cancel()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        await client.close()


async def _after(previous: asyncio.Task[None] | None, turn: Awaitable[None]) -> None:
    """Run ``turn`` once the previous turn is over (one turn at a time, as an agent does)."""
    if previous is not None:
        with contextlib.suppress(Exception):
            await previous
    await turn


def _scenario(master: Master, session_id: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "url": f"{master.http_url}/v1/sessions/{session_id}/ag-ui",
        "token": API_KEY,
        "threadId": "frontend-thread",
        "steps": steps,
    }


def _normal(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as comparable JSON (key order and absent optionals aside)."""
    return [json.loads(json.dumps(m, sort_keys=True)) for m in messages]


def _transcript(blocks: list[Any]) -> list[tuple[str, str]]:
    """The RAWP view's transcript as (role, text) pairs, in AG-UI message order."""
    out: list[tuple[str, str]] = []
    for block in blocks:
        if isinstance(block, UserMessageBlock):
            out.append(("user", block.text))
        elif isinstance(block, ThinkingBlock):
            out.append(("reasoning", block.text))
        elif isinstance(block, TextBlock):
            out.append(("assistant", block.text))
        elif isinstance(block, ToolCallBlock):
            out.append(("tool_call", f"{block.tool_name} {json.dumps(block.input)}"))
            out.append(("tool", json.dumps(block.output, separators=(",", ":"))))
    return out


def _pairs(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for m in messages:
        if m.get("toolCalls"):
            for call in m["toolCalls"]:
                args = json.dumps(json.loads(call["function"]["arguments"]))
                out.append(("tool_call", f"{call['function']['name']} {args}"))
        else:
            out.append((m["role"], m["content"]))
    return out


async def _log_events(master: Master, session_id: str) -> list[tuple[str | None, str]]:
    """Every (id, type) the egress makes of the whole log, folded from seq 1."""
    egress = AguiEgress(session_id)
    out: list[tuple[str | None, str]] = []
    for entry in await master.store.read(session_id):
        for emitted in egress.feed(codec.decode(entry.data), entry.seq, entry.sender_role):
            out.append((emitted.event_id, emitted.event.type.value))
    return out


async def test_http_agent_runs_verify_and_assemble_the_transcript(
    master: Master, node_harness: Path, tmp_path: Path
) -> None:
    """Two HttpAgent runs pass the client's verification; its messages equal the transcript."""
    async with rawp_agent(master, "agui-e1", _answer):
        steps = [
            {"kind": "run", "id": "u-1", "text": "hello"},
            {"kind": "run", "id": "u-2", "text": "again"},
            {"kind": "connect"},
        ]
        report = await run_harness(node_harness, _scenario(master, "agui-e1", steps), tmp_path)
    assert report["errors"] == [], report["stderr"]
    first, second, tail = report["runs"]
    types = [e["type"] for e in first["events"]]
    assert types[0] == "RUN_STARTED"
    assert types[-1] == "RUN_FINISHED"
    # CUSTOM session.status (running) right after the start (notes §17.4); the turn's usage
    # just before the run's end
    customs = [e.get("name") for e in first["events"] if e["type"] == "CUSTOM"]
    assert customs == ["session.status", "session.usage"]
    assert types[-2] == "CUSTOM"
    assert "TEXT_MESSAGE_START" in types
    assert "REASONING_MESSAGE_CONTENT" in types
    assert first["events"][-1]["usage"] == [
        {"inputTokens": 10, "outputTokens": 20, "reasoningTokens": 5}
    ]
    # The user's message is never echoed back as a text message.
    started = [e for e in first["events"] if e["type"] == "TEXT_MESSAGE_START"]
    assert all(e["messageId"] != "u-1" for e in started)
    # Each user message became one user.message frame, even though every run sent them all.
    log = [json.loads(e.data) for e in await master.store.read("agui-e1")]
    users = [f for f in log if f["type"] == "user.message"]
    assert [(f["message_id"], f["payload"]["text"]) for f in users] == [
        ("u-1", "hello"),
        ("u-2", "again"),
    ]
    view = view_of("agui-e1", await master.store.read("agui-e1"))
    assert _pairs(report["messages"]) == _transcript(view.blocks)
    # A late joiner (GET, the snapshot) assembles exactly what the running client holds.
    assert _normal(tail["messages"]) == _normal(report["messages"])
    assert [e["type"] for e in tail["events"]][:2] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"]
    assert second["events"][0]["input"]["messages"][0]["id"] == "u-2"


async def test_sse_drop_mid_run_resumes_without_gap_or_double(
    master: Master, node_harness: Path, tmp_path: Path
) -> None:
    """A POST stream cut mid-run resumes from Last-Event-ID: every event once, in order."""
    release = asyncio.Event()

    async def slow(client: RawpClient, text: str, _inbox: asyncio.Queue[Any]) -> None:
        turn = await client.turn_start()
        await client.text_delta("b1", "one ")
        await client.tool_request("c1", "lookup", {"k": 1})
        session = master.hub.sessions["agui-e2"]
        # Hold the turn open until the resumed GET listens beside the cut POST stream.
        async with asyncio.timeout(30):
            while len(session.listeners) < 2:
                await asyncio.sleep(0.02)
        release.set()
        await client.tool_result("c1", "ok", "found")
        await client.text_delta("b1", "two")
        await client.text_done("b1")
        await client.turn_end(turn.payload.turn_id)
        await client.usage(input_tokens=1, output_tokens=2)

    async with rawp_agent(master, "agui-e2", slow):
        steps = [{"kind": "run", "id": "u-1", "text": "go", "dropAfter": 4}]
        report = await run_harness(node_harness, _scenario(master, "agui-e2", steps), tmp_path)
    assert release.is_set()
    assert report["errors"] == [], report["stderr"]
    assert report["dropped"]["after"] == 4
    delivered = report["runs"][0]["ids"]
    assert len(delivered) == len(set(delivered))
    expected = [(i, t) for i, t in await _log_events(master, "agui-e2")]
    start = next(k for k, (_, t) in enumerate(expected) if t == "RUN_STARTED")
    end = next(k for k, (_, t) in enumerate(expected) if t == "RUN_FINISHED")
    assert delivered == [i for i, _ in expected[start : end + 1]]
    got = [e["type"] for e in report["runs"][0]["events"]]
    assert got == [t for _, t in expected[start : end + 1]]
    assert _pairs(report["messages"]) == [
        ("user", "go"),
        ("assistant", "one two"),
        ("tool_call", 'lookup {"k": 1}'),
        ("tool", "found"),
    ]


async def test_interaction_is_an_interrupt_and_resume_answers_it(
    master: Master, node_harness: Path, tmp_path: Path
) -> None:
    """A pending interaction ends the run as an interrupt; the resume entry answers it."""

    async def ask(client: RawpClient, text: str, inbox: asyncio.Queue[Any]) -> None:
        turn = await client.turn_start()
        await client.text_delta("q1", "Shall I?")
        await client.interaction_request("i-1", "confirmation", "Delete the file?", ["yes", "no"])
        answer = await asyncio.wait_for(inbox.get(), 30)
        await client.text_delta("q1", f" You said {answer}.")
        await client.text_done("q1")
        await client.turn_end(turn.payload.turn_id)
        await client.usage(input_tokens=1, output_tokens=1)

    async with rawp_agent(master, "agui-e3", ask):
        steps = [
            {"kind": "run", "id": "u-1", "text": "clean up"},
            {"kind": "resume", "interruptId": "i-1", "payload": "yes"},
        ]
        report = await run_harness(node_harness, _scenario(master, "agui-e3", steps), tmp_path)
    assert report["errors"] == [], report["stderr"]
    first, second = report["runs"]
    outcome = first["events"][-1]["outcome"]
    assert outcome["type"] == "interrupt"
    assert outcome["interrupts"] == [
        {
            "id": "i-1",
            "reason": "confirmation",
            "message": "Delete the file?",
            "metadata": {"options": ["yes", "no"]},
        }
    ]
    assert second["events"][0]["type"] == "RUN_STARTED"
    assert second["events"][0]["input"]["resume"][0]["interruptId"] == "i-1"
    assert second["events"][-1]["outcome"] == {"type": "success"}
    assert report["pendingInterrupts"] == []
    assert _pairs(report["messages"]) == [
        ("user", "clean up"),
        ("assistant", "Shall I? You said yes."),
    ]
    log = [json.loads(e.data) for e in await master.store.read("agui-e3")]
    answers = [f for f in log if f["type"] == "control.interaction.response"]
    assert [a["payload"] for a in answers] == [{"interaction_id": "i-1", "response": "yes"}]


async def _sse(url: str, token: str, **headers: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(url, headers={"Authorization": f"Bearer {token}", **headers}) as response,
    ):
        return response.status, await response.text()


async def test_credentials_scope_the_endpoint_like_the_other_routes(master: Master) -> None:
    """A session token reads its session's AG-UI stream; another workspace's key gets 404."""
    async with rawp_agent(master, "agui-e4", _answer):
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"{master.http_url}/v1/sessions/agui-e4/tokens",
                headers={"Authorization": f"Bearer {API_KEY}"},
                json={},
            ) as response,
        ):
            token = (await response.json())["token"]
        url = f"{master.http_url}/v1/sessions/agui-e4/ag-ui?until=run_end"
        status, body = await _sse(url, token)
        assert status == 200
        assert body.count("\n\n") >= 3
        assert "\r" not in body
        assert (await _sse(url, "rk_other_workspace"))[0] == 404
        assert (await _sse(url, "not-a-key"))[0] == 401
        status, body = await _sse(url, API_KEY, **{"Last-Event-ID": "12.x"})
        assert status == 400


async def test_tail_ends_with_run_error_when_the_session_is_deleted(master: Master) -> None:
    """A session ended mid-turn closes its open messages and ends the AG-UI run with RUN_ERROR."""

    async def hang(client: RawpClient, text: str, _inbox: asyncio.Queue[Any]) -> None:
        await client.turn_start()
        await client.text_delta("b1", "partial")

    async with rawp_agent(master, "agui-e5", hang) as client:
        edge = RawpClient(master.ws_url, "agui-e5", role="edge", token=API_KEY)
        await edge.connect()
        await edge.user_message("start")
        async with asyncio.timeout(10):
            while client.view.state.open_text != {"b1"}:
                await asyncio.sleep(0.02)
        url = f"{master.http_url}/v1/sessions/agui-e5/ag-ui"
        tail = asyncio.create_task(_sse(url, API_KEY))
        async with asyncio.timeout(10):
            while len(master.hub.sessions["agui-e5"].listeners) < 1:
                await asyncio.sleep(0.02)
        async with (
            aiohttp.ClientSession() as http,
            http.delete(
                f"{master.http_url}/v1/session/agui-e5",
                headers={"Authorization": f"Bearer {API_KEY}"},
            ) as response,
        ):
            assert response.status == 200
        status, body = await asyncio.wait_for(tail, 20)
        await edge.close()
    types = [json.loads(line[6:])["type"] for line in body.split("\n") if line.startswith("data: ")]
    assert status == 200
    assert types[:2] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"]
    assert types[-2:] == ["TEXT_MESSAGE_END", "RUN_ERROR"]


def _ids_and_types(body: str) -> list[tuple[str | None, str]]:
    out: list[tuple[str | None, str]] = []
    for block in body.split("\n\n"):
        lines = block.split("\n")
        data = [line[6:] for line in lines if line.startswith("data: ")]
        if not data:
            continue
        ids = [line[4:] for line in lines if line.startswith("id: ")]
        out.append((ids[0] if ids else None, json.loads(data[0])["type"]))
    return out


async def test_tail_resumes_from_any_event_id_exactly(master: Master) -> None:
    """GET with Last-Event-ID ``N`` or ``N.k`` continues with exactly the events after it."""
    async with rawp_agent(master, "agui-e6", _answer) as client:
        edge = RawpClient(master.ws_url, "agui-e6", role="edge", token=API_KEY)
        await edge.connect()
        await edge.user_message("hi")
        async with asyncio.timeout(20):
            while client.view.state.turns_completed < 1:
                await asyncio.sleep(0.02)
        await edge.close()
        url = f"{master.http_url}/v1/sessions/agui-e6/ag-ui?until=run_end"
        everything = await _log_events(master, "agui-e6")
        run = everything[next(k for k, (_, t) in enumerate(everything) if t == "RUN_STARTED") :]
        for cut in range(len(run) - 1):
            last_id = run[cut][0]
            assert last_id is not None
            status, body = await _sse(url, API_KEY, **{"Last-Event-ID": last_id})
            assert status == 200
            assert _ids_and_types(body) == run[cut + 1 :], last_id


@pytest.mark.parametrize("last_id", ["500", "500.2"])
async def test_a_cursor_past_the_head_gets_the_snapshot_then_the_next_run(
    master: Master, last_id: str
) -> None:
    """Last-Event-ID past the log's head: a late joiner's snapshot run, then the next turn."""
    async with rawp_agent(master, "agui-ahead", _answer) as client:
        edge = RawpClient(master.ws_url, "agui-ahead", role="edge", token=API_KEY)
        await edge.connect()
        await edge.user_message("hi")
        async with asyncio.timeout(20):
            while client.view.state.turns_completed < 1:
                await asyncio.sleep(0.02)
        url = f"{master.http_url}/v1/sessions/agui-ahead/ag-ui"
        headers = {"Authorization": f"Bearer {API_KEY}", "Last-Event-ID": last_id}
        async with aiohttp.ClientSession() as http, http.get(url, headers=headers) as response:
            assert response.status == 200
            seen: list[str] = []
            asked = False
            async with asyncio.timeout(20):
                async for line in response.content:
                    if not line.startswith(b"data: "):
                        continue
                    seen.append(json.loads(line[6:])["type"])
                    if seen[-1] == "RUN_FINISHED" and not asked:
                        asked = True
                        await edge.user_message("again")
                    elif seen[-1] == "RUN_FINISHED":
                        break
        assert seen[:3] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
        assert seen[3] == "RUN_STARTED"
        assert "TEXT_MESSAGE_CONTENT" in seen[3:]
        await edge.close()


async def _logged(master: Master, session_id: str, wanted: Callable[[Any], Any]) -> None:
    """Wait (bounded) until the session's log holds a frame ``wanted`` accepts."""
    async with asyncio.timeout(20):
        while not any(wanted(json.loads(e.data)) for e in await master.store.read(session_id)):
            await asyncio.sleep(0.02)


async def test_agent_drop_and_reattach_keeps_the_agui_run_whole(
    master: Master, node_harness: Path, tmp_path: Path
) -> None:
    """§7.8 behind the endpoint: finalized, then unfinalized — the client sees one whole run."""

    async def dropping(client: RawpClient, text: str, _inbox: asyncio.Queue[Any]) -> None:
        turn = await client.turn_start()
        await client.text_delta("b1", "before ")
        await client.tool_request("c1", "slow", {})
        client.abort_connection()
        # Waits read the log, not session.state: the client may reattach (and unfinalize)
        # between two looks at a flag that is true only meanwhile.
        await _logged(master, "agui-e7", lambda f: f.get("metadata", {}).get("synthetic"))
        await client.text_delta("b1", "after")  # buffered, or live if already back
        await client.wait_status(ConnectionStatus.CONNECTED, timeout=20)
        # the client's history takes the finalization back (§7.8.3)
        await _logged(master, "agui-e7", lambda f: f["type"] == "session.history")
        await client.tool_result("c1", "ok", "done")
        await client.text_done("b1")
        await client.turn_end(turn.payload.turn_id)
        await client.usage(input_tokens=1, output_tokens=1)

    async with rawp_agent(master, "agui-e7", dropping):
        steps = [{"kind": "run", "id": "u-1", "text": "go"}]
        report = await run_harness(node_harness, _scenario(master, "agui-e7", steps), tmp_path)
    assert report["errors"] == [], report["stderr"]
    log = [json.loads(e.data) for e in await master.store.read("agui-e7")]
    assert any(f.get("metadata", {}).get("synthetic") for f in log)
    types = [e["type"] for e in report["runs"][0]["events"]]
    assert types.count("RUN_STARTED") == 1
    assert types[-1] == "RUN_FINISHED"
    assert "RUN_ERROR" not in types
    results = [e for e in report["runs"][0]["events"] if e["type"] == "TOOL_CALL_RESULT"]
    assert [r["content"] for r in results] == ["done"]  # never the synthetic "Connection lost"
    assert _pairs(report["messages"]) == [
        ("user", "go"),
        ("assistant", "before after"),
        ("tool_call", "slow {}"),
        ("tool", "done"),
    ]


# --- archived sessions (notes §16.1) and revoked credentials (§16.9) ----------------------


async def _archived(master: Master, session_id: str) -> None:
    """Wait (bounded) until the session's header says archived."""
    async with asyncio.timeout(20):
        while True:
            header = await master.store.get_session(session_id)
            if header is not None and header.archived:
                return
            await asyncio.sleep(0.05)


async def _post_run(url: str, token: str, message_id: str, text: str) -> tuple[int, Any]:
    """POST one RunAgentInput; (status, JSON body or None for an event stream)."""
    body = {
        "threadId": "t",
        "runId": "r",
        "state": {},
        "messages": [{"id": message_id, "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    async with aiohttp.ClientSession() as http, http.post(url, json=body, headers=headers) as r:
        if r.content_type == "text/event-stream":
            await r.read()
            return r.status, None
        return r.status, await r.json(content_type=None)


async def test_archived_by_fatal_error_replays_and_ends_and_post_is_409(
    master: Master, node_harness: Path, tmp_path: Path
) -> None:
    """The client's fatal error archives the session: GET replays and ends, POST answers 409."""

    async def fatal(client: RawpClient, text: str, _inbox: asyncio.Queue[Any]) -> None:
        await client.turn_start()
        await client.text_delta("b1", f"partial {text}")
        await client.tool_request("c1", "search", {"q": text})
        await client.error("agent_crashed", "cannot go on", fatal=True)

    async with rawp_agent(master, "agui-e8", fatal):
        edge = RawpClient(master.ws_url, "agui-e8", role="edge", token=API_KEY)
        await edge.connect()
        await edge.user_message("go")
        await _archived(master, "agui-e8")
        await edge.close()
    header = await master.store.get_session("agui-e8")
    assert header is not None
    assert header.reason == "error"
    url = f"{master.http_url}/v1/sessions/agui-e8/ag-ui"
    # Through the real client: a snapshot tail, a follow tail (no ?until), then a run.
    steps = [
        {"kind": "connect"},
        {"kind": "connect", "follow": True},
        {"kind": "run", "id": "u-2", "text": "more"},
    ]
    report = await run_harness(node_harness, _scenario(master, "agui-e8", steps), tmp_path)
    snapshot_tail, follow_tail, run = report["runs"]
    assert len(report["errors"]) == 1, report["stderr"]
    assert "409" in report["errors"][0]
    assert run["events"] == []
    for tail in (snapshot_tail, follow_tail):
        assert [e["type"] for e in tail["events"]] == [
            "RUN_STARTED",
            "MESSAGES_SNAPSHOT",
            "RUN_FINISHED",
        ]
        assert _pairs(tail["messages"]) == [
            ("user", "go"),
            ("assistant", "partial go"),
            ("tool_call", 'search {"q": "go"}'),
            ("tool", _tool_output(await master.store.read("agui-e8"))),
        ]
    # Replay from inside the run: the rest of the log's events, exactly, then the end.
    everything = await _log_events(master, "agui-e8")
    assert everything[-1][1] == "RUN_ERROR"
    first = next(k for k, (_, t) in enumerate(everything) if t == "RUN_STARTED")
    last_id = everything[first][0]
    assert last_id is not None
    status, body = await asyncio.wait_for(_sse(url, API_KEY, **{"Last-Event-ID": last_id}), 20)
    assert status == 200
    assert _ids_and_types(body) == everything[first + 1 :]
    # the §9 turn.end error, with the master's code for it
    assert json.loads(body.rsplit("data: ", 1)[1])["code"] == "session_ended"
    status, problem = await _post_run(url, API_KEY, "u-3", "again")
    assert (status, problem["code"]) == (409, "archived")
    log = [json.loads(e.data) for e in await master.store.read("agui-e8")]
    assert [f["payload"]["text"] for f in log if f["type"] == "user.message"] == ["go"]


def _tool_output(entries: list[Any]) -> str:
    """The output of the log's one tool result, as AG-UI's string content."""
    results = [json.loads(e.data) for e in entries if e.type == "tool.invoke.result"]
    assert len(results) == 1
    output = results[0]["payload"].get("output", "")
    return output if isinstance(output, str) else json.dumps(output)


async def test_archived_by_expiry_replays_the_finalization_as_final(
    make_master: Callable[..., Any],
) -> None:
    """The agent left mid-turn and never came back: the replay ends its run disconnected."""
    master: Master = await make_master(reattach_window_s=0.5)
    client = RawpClient(master.ws_url, "agui-e9", role="client", token=API_KEY, create=True)
    await client.connect()
    await client.turn_start()
    await client.text_delta("b1", "half")
    await client.tool_request("c1", "slow", {})
    url = f"{master.http_url}/v1/sessions/agui-e9/ag-ui"
    live = asyncio.create_task(_sse(url, API_KEY))  # a tail open while the session ends
    async with asyncio.timeout(10):
        while not master.hub.sessions["agui-e9"].listeners:
            await asyncio.sleep(0.02)
    await client.close()
    await _archived(master, "agui-e9")
    status, live_body = await asyncio.wait_for(live, 20)
    assert status == 200
    header = await master.store.get_session("agui-e9")
    assert header is not None
    assert header.reason == "timeout"
    status, body = await asyncio.wait_for(_sse(url, API_KEY, **{"Last-Event-ID": "1"}), 20)
    assert status == 200
    events = [json.loads(line[6:]) for line in body.split("\n") if line.startswith("data: ")]
    types = [e["type"] for e in events]
    assert types[-4:] == ["TEXT_MESSAGE_END", "TOOL_CALL_RESULT", "CUSTOM", "RUN_ERROR"]
    assert events[-1]["code"] == "disconnected"
    assert events[-3]["content"] == "Connection lost"
    assert _ids_and_types(live_body)[-4:] == _ids_and_types(body)[-4:]  # the same end, live
    status, body = await asyncio.wait_for(_sse(url, API_KEY), 20)
    assert [t for _, t in _ids_and_types(body)] == [
        "RUN_STARTED",
        "MESSAGES_SNAPSHOT",
        "RUN_FINISHED",
    ]
    assert (await _post_run(url, API_KEY, "u-1", "hello?"))[0] == 409


async def _session_token(master: Master, session_id: str) -> tuple[str, str]:
    """A fresh session token for the session: (token_id, secret)."""
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{master.http_url}/v1/sessions/{session_id}/tokens",
            headers={"Authorization": f"Bearer {API_KEY}"},
            json={},
        ) as response,
    ):
        assert response.status in (200, 201)
        answer = await response.json()
    return answer["token_id"], answer["token"]


async def _revoke(master: Master, token_id: str) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.delete(
            f"{master.http_url}/v1/tokens/{token_id}",
            headers={"Authorization": f"Bearer {API_KEY}"},
        ) as response,
    ):
        assert response.status == 200


async def _stream_until_revoked(
    master: Master, session_id: str, method: str, token: str, token_id: str
) -> list[str]:
    """Open the AG-UI stream with ``token``; once it shows the open message, revoke the token
    and read on until the master ends the stream (bounded). The event types read."""
    url = f"{master.http_url}/v1/sessions/{session_id}/ag-ui"
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    body = {
        "threadId": "t",
        "runId": "r",
        "state": {},
        "messages": [{"id": "u-1", "role": "user", "content": "wait"}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    types: list[str] = []
    async with (
        aiohttp.ClientSession() as http,
        http.request(
            method, url, headers=headers, json=body if method == "POST" else None
        ) as response,
    ):
        assert response.status == 200
        async with asyncio.timeout(20):
            async for line in response.content:
                if line.startswith(b"data: "):
                    types.append(json.loads(line[6:])["type"])
                    if types[-1] == "TEXT_MESSAGE_START":
                        break
        await _revoke(master, token_id)
        async with asyncio.timeout(10):  # bounded: the watch checks every 0.5 s (§16.9)
            async for line in response.content:
                if line.startswith(b"data: "):
                    types.append(json.loads(line[6:])["type"])
    return types


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_revoked_session_token_ends_the_agui_stream(master: Master, method: str) -> None:
    """Revoking the session token over HTTP ends an open AG-UI tail (GET) or run (POST)."""
    sid = f"agui-rv-{method.lower()}"

    async def hang(client: RawpClient, text: str, _inbox: asyncio.Queue[Any]) -> None:
        await client.turn_start()
        await client.text_delta("b1", "thinking about it")

    async with rawp_agent(master, sid, hang) as client:
        token_id, token = await _session_token(master, sid)
        if method == "GET":  # a turn in progress, which the tail joins
            async with rawp_agent_edge(master, sid) as edge:
                await edge.user_message("wait")
                async with asyncio.timeout(10):
                    while client.view.state.open_text != {"b1"}:
                        await asyncio.sleep(0.02)
        types = await _stream_until_revoked(master, sid, method, token, token_id)
        assert master.hub.sessions[sid].state.turn_id is not None  # the turn is still open
    assert types[0] == "RUN_STARTED"
    assert "TEXT_MESSAGE_START" in types
    assert "RUN_FINISHED" not in types  # cut, never a false end
    assert "RUN_ERROR" not in types


@contextlib.asynccontextmanager
async def rawp_agent_edge(master: Master, session_id: str) -> AsyncIterator[RawpClient]:
    """An edge of the session (API key), closed afterwards."""
    edge = RawpClient(master.ws_url, session_id, role="edge", token=API_KEY)
    await edge.connect()
    try:
        yield edge
    finally:
        await edge.close()
