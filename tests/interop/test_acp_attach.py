"""``rawp acp attach`` driven by the official ``agent-client-protocol`` package's client side (an
editor), on a session whose agent is a scripted ACP agent behind ``rawp bridge acp``: a real
master, real subprocesses, every RAWP edge's frames valid in sequence."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from pathlib import Path

import aiohttp
import pytest
from acp import PROTOCOL_VERSION, RequestError, text_block
from acp.client.connection import ClientSideConnection

from protocol.client import RawpClient
from relay.acp.attach import AcpAttach
from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.interop.acp_support import (
    Edge,
    Editor,
    agent_command,
    attached,
    library_bridge,
    payloads,
    records,
    refused_command,
    validate_sequence,
)

pytestmark = pytest.mark.timeout(180)


async def test_load_replays_the_log_and_a_prompt_streams_its_turn(
    master: Master, tmp_path: Path
) -> None:
    """session/load replays every frame kind as updates; session/prompt is a user message whose
    turn streams back and whose stop reason answers the prompt."""
    async with (
        library_bridge(master, "acp-a1", agent_command(tmp_path)),
        Edge(master, "acp-a1") as edge,
    ):
        await edge.client.user_message("full please")
        await edge.wait_type("session.usage")
        editor = Editor()
        async with attached(master, "acp-a1", editor) as (conn, _):
            await conn.load_session(cwd=str(tmp_path), session_id="acp-a1", mcp_servers=[])
            replayed = list(editor.kinds())
            response = await conn.prompt(
                session_id="acp-a1", prompt=[text_block("from the editor")]
            )
            assert response.stop_reason == "end_turn"
            await editor.wait(lambda e: "echo: from the editor" in e.texts())
        await edge.wait_type("session.usage", 2)
    assert [k for k in replayed if k != "available_commands_update"] == [
        "user_message_chunk",
        "agent_thought_chunk",
        "agent_message_chunk",
        "agent_message_chunk",
        "tool_call",
        "tool_call_update",
        "tool_call_update",
        "tool_call_update",
        "plan",
        "current_mode_update",
        "session_info_update",
        "usage_update",
        "agent_message_chunk",
        "usage_update",
    ]
    assert "available_commands_update" in replayed
    updates = editor.updates
    assert updates[replayed.index("user_message_chunk")].content.text == "full please"
    call = next(u for u in updates if u.session_update == "tool_call")
    assert (call.tool_call_id, call.title, call.raw_input) == (
        "call-1",
        "Read notes.md",
        {"path": "notes.md"},
    )
    kinds = [u.kind for u in updates if u.session_update == "tool_call_update"]
    assert "read" in kinds  # the acp.tool_call frame gave the ACP kind back
    done = [u for u in updates if u.session_update == "tool_call_update" and u.status]
    assert done[-1].status == "completed"
    assert done[-1].raw_output == {"lines": 3}
    title = next(u for u in updates if u.session_update == "session_info_update")
    assert title.title == "Notes review"
    # The prompt reached the agent through the relay as a user message (an edge is not sent
    # its own frames back: the RAWP edge sees only the editor's).
    assert [p["text"] for p in payloads(edge, "user.message")] == ["from the editor"]
    assert records(tmp_path, "session/prompt")[-1]["params"]["text"] == "from the editor"
    await validate_sequence(edge.frames, tmp_path)


async def test_permission_is_asked_of_the_editor(master: Master, tmp_path: Path) -> None:
    """The agent's permission request reaches the editor as session/request_permission with
    the agent's tool call and options; the editor's answer goes back to the agent."""
    async with (
        library_bridge(master, "acp-a2", agent_command(tmp_path)),
        Edge(master, "acp-a2") as edge,
    ):
        editor = Editor(choose="allow")
        async with attached(master, "acp-a2", editor) as (conn, _):
            await conn.load_session(cwd=str(tmp_path), session_id="acp-a2", mcp_servers=[])
            response = await conn.prompt(session_id="acp-a2", prompt=[text_block("permission")])
        assert response.stop_reason == "end_turn"
        await edge.wait_type("session.usage")
    ((tool_call, options),) = editor.asked
    assert tool_call.tool_call_id == "call-p"
    assert [(o.option_id, o.name, o.kind) for o in options] == [
        ("allow", "Allow once", "allow_once"),
        ("reject", "Reject", "reject_once"),
    ]
    assert records(tmp_path, "permission_answer")[0]["params"]["outcome"] == "selected allow"
    assert payloads(edge, "control.interaction.response")[0]["response"] == "allow"
    await validate_sequence(edge.frames, tmp_path)


async def test_two_editors_and_a_dashboard_edge_on_one_agent(
    master: Master, tmp_path: Path
) -> None:
    """Both editors see every update; the first answer wins, the other editor's question is
    withdrawn; the session outlives both editors."""
    async with (
        library_bridge(master, "acp-a3", agent_command(tmp_path)),
        Edge(master, "acp-a3") as dashboard,
    ):
        first, second = Editor(), Editor(choose="reject")
        async with (
            attached(master, "acp-a3", first) as (one, _),
            attached(master, "acp-a3", second) as (two, _),
        ):
            await one.load_session(cwd=str(tmp_path), session_id="acp-a3", mcp_servers=[])
            await two.load_session(cwd=str(tmp_path), session_id="acp-a3", mcp_servers=[])
            # The second editor answers at once; the first waits and is told it is settled.
            response = await one.prompt(session_id="acp-a3", prompt=[text_block("permission")])
            assert response.stop_reason == "end_turn"
            await first.wait(lambda e: e.withdrawn)
            await second.wait(lambda e: "selected reject" in e.texts())
            await first.wait(lambda e: "selected reject" in e.texts())
        # Every editor gone: the agent and the session go on for the dashboard.
        await dashboard.client.user_message("still here")
        await dashboard.wait_type("session.usage", 2)
    assert records(tmp_path, "permission_answer")[0]["params"]["outcome"] == "selected reject"
    assert len(first.asked) == len(second.asked) == 1
    responses = payloads(dashboard, "control.interaction.response")
    assert [r["response"] for r in responses] == ["reject"]
    # Both editors saw the turn's every update, in the same order; the prompt itself only
    # the other one (an editor shows its own prompt already).
    skip = ("available_commands_update", "user_message_chunk")
    assert [k for k in first.kinds() if k not in skip] == [
        k for k in second.kinds() if k not in skip
    ]
    assert second.texts("user_message_chunk") == ["permission"]
    assert first.texts("user_message_chunk") == []
    assert payloads(dashboard, "agent.text.delta")[-1]["delta"] == "echo: still here"
    await validate_sequence(dashboard.frames, tmp_path)


async def test_attach_survives_a_drop_without_doubled_updates(
    master: Master, tmp_path: Path
) -> None:
    """The attach's connection to the relay drops mid-session: it resumes, the editor gets
    what happened meanwhile once, and nothing twice."""
    near, far = socket.socketpair()
    async with (
        library_bridge(master, "acp-a4", agent_command(tmp_path)),
        Edge(master, "acp-a4") as edge,
    ):
        attach_streams = await asyncio.open_connection(sock=far)
        attach = AcpAttach(master.ws_url, "acp-a4", token=API_KEY, streams=attach_streams)
        serving = asyncio.create_task(attach.run())
        editor = Editor()
        reader, writer = await asyncio.open_connection(sock=near)
        conn = ClientSideConnection(editor, writer, reader)
        try:
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            await conn.load_session(cwd=str(tmp_path), session_id="acp-a4", mcp_servers=[])
            await edge.client.user_message("one")
            await editor.wait(lambda e: "echo: one" in e.texts())
            attach.client.abort_connection()
            await edge.client.user_message("two")
            await edge.wait_type("session.usage", 2)
            await editor.wait(lambda e: "echo: two" in e.texts())
            await edge.client.user_message("three")
            await editor.wait(lambda e: "echo: three" in e.texts())
        finally:
            await conn.close()
            attach.close()
            await asyncio.wait_for(serving, 30)
    assert editor.texts("user_message_chunk") == ["one", "two", "three"]
    assert editor.texts() == ["echo: one", "echo: two", "echo: three"]
    assert attach.client.status.value in ("closed",)
    await validate_sequence(edge.frames, tmp_path)


async def test_load_of_another_session_is_refused(master: Master, tmp_path: Path) -> None:
    """session/load and session/prompt name the attached session only; another id is an
    invalid-params error and sends nothing."""
    async with (
        library_bridge(master, "acp-a5", agent_command(tmp_path)),
        Edge(master, "acp-a5") as edge,
    ):
        editor = Editor()
        async with attached(master, "acp-a5", editor) as (conn, _):
            with pytest.raises(RequestError) as refused:
                await conn.load_session(cwd=str(tmp_path), session_id="other", mcp_servers=[])
            with pytest.raises(RequestError) as prompted:
                await conn.prompt(session_id="other", prompt=[text_block("hello")])
    assert refused.value.code == prompted.value.code == -32602
    assert "acp-a5" in str(refused.value.data)
    assert payloads(edge, "user.message") == []


async def test_an_unreachable_master_does_not_keep_the_editor_waiting(tmp_path: Path) -> None:
    """The master is not up (yet): initialize is answered at once while the attach retries;
    the editor closing stdin ends it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens there once closed
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rawp.cli",
        "acp",
        "attach",
        "acp-a14",
        env={**os.environ, "RAWP_API_KEY": API_KEY, "RAWP_WS_URL": f"ws://127.0.0.1:{port}/v1/ws"},
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        process.stdin.write(
            b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n'
        )
        await process.stdin.drain()
        line = await asyncio.wait_for(process.stdout.readline(), 60)
    finally:
        process.stdin.close()
        code = await asyncio.wait_for(process.wait(), 30)
    assert json.loads(line)["result"]["agentInfo"]["name"] == "rawp-acp-attach"
    assert code == 0


async def test_editor_garbage_is_dropped_and_the_attach_goes_on(
    master: Master, tmp_path: Path
) -> None:
    """Lines from the editor that are not JSON-RPC, and an over-long one, are dropped; the
    next request is answered."""
    async with library_bridge(master, "acp-a13", agent_command(tmp_path)):
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "rawp.cli",
            "acp",
            "attach",
            "acp-a13",
            "--max-message-bytes",
            "4096",
            env={**os.environ, "RAWP_API_KEY": API_KEY, "RAWP_WS_URL": master.ws_url},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        assert process.stdin is not None
        assert process.stdout is not None
        try:
            process.stdin.write(b"not json\n[1,2]\n\xff\xfe\n" + b"x" * 10_000 + b"\n")
            process.stdin.write(
                b'{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":1}}\n'
            )
            await process.stdin.drain()
            line = await asyncio.wait_for(process.stdout.readline(), 60)
        finally:
            process.stdin.close()
            code = await asyncio.wait_for(process.wait(), 30)
    answer = json.loads(line)
    assert answer["id"] == 7
    assert answer["result"]["agentCapabilities"]["loadSession"] is True
    assert code == 0


async def test_attach_command_line_needs_a_credential() -> None:
    """``rawp acp attach`` without a credential exits 2 with a message, no traceback."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAWP_TOKEN", "RAWP_API_KEY")}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rawp.cli",
        "acp",
        "attach",
        "s",
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2
    assert b"needs --token" in err
    assert out == b""
    assert b"Traceback" not in err


async def test_attach_killed_and_started_again_replays_the_whole_session(
    master: Master, tmp_path: Path
) -> None:
    """SIGKILL of the attach: the session goes on; a new attach's load replays everything,
    what happened while no editor was attached included, once."""
    async with (
        library_bridge(master, "acp-a6", agent_command(tmp_path)),
        Edge(master, "acp-a6") as edge,
    ):
        first = Editor()
        async with attached(master, "acp-a6", first) as (conn, process):
            await conn.load_session(cwd=str(tmp_path), session_id="acp-a6", mcp_servers=[])
            await conn.prompt(session_id="acp-a6", prompt=[text_block("one")])
            process.kill()
            await process.wait()
        await edge.client.user_message("two")
        await edge.wait_type("session.usage", 2)
        second = Editor()
        async with attached(master, "acp-a6", second) as (conn, _):
            await conn.load_session(cwd=str(tmp_path), session_id="acp-a6", mcp_servers=[])
    assert second.texts("user_message_chunk") == ["one", "two"]
    assert second.texts() == ["echo: one", "echo: two"]
    await validate_sequence(edge.frames, tmp_path)


@pytest.mark.parametrize(
    ("token", "said"),
    [("rk_not_a_key", "unknown credential"), (API_KEY, "no session acp-nowhere")],
    ids=["bad-token", "unknown-session"],
)
async def test_attach_refused_by_the_master_exits_1_with_one_line(
    master: Master, token: str, said: str
) -> None:
    """The master refuses the attach: exit 1 at once, one line on stderr, no traceback."""
    code, err = await refused_command(master, "acp", "attach", "acp-nowhere", token=token)
    assert code == 1
    (line,) = err.splitlines()
    assert line.startswith("rawp acp attach: the relay refused the session: ")
    assert said in line


async def test_new_session_names_the_attached_session_then_replays(
    master: Master, tmp_path: Path
) -> None:
    """session/new (an editor that only creates sessions): the answer is SESSION, the log's
    replay follows it."""
    async with (
        library_bridge(master, "acp-a7", agent_command(tmp_path)),
        Edge(master, "acp-a7") as edge,
    ):
        await edge.client.user_message("before")
        await edge.wait_type("session.usage")
        editor = Editor()
        async with attached(master, "acp-a7", editor) as (conn, _):
            created = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            assert created.session_id == "acp-a7"
            await editor.wait(lambda e: "echo: before" in e.texts())
    assert editor.texts("user_message_chunk") == ["before"]


async def test_prompts_while_a_turn_runs_are_busy_and_cancel_stops_it(
    master: Master, tmp_path: Path
) -> None:
    """While an editor's prompt runs, its second prompt and another editor's prompt (the
    master's busy) are JSON-RPC errors -32000; session/cancel becomes control.cancel and the
    running prompt answers cancelled."""
    async with (
        library_bridge(master, "acp-a8", agent_command(tmp_path)),
        Edge(master, "acp-a8") as edge,
    ):
        first, second = Editor(), Editor()
        async with (
            attached(master, "acp-a8", first) as (one, _),
            attached(master, "acp-a8", second) as (two, _),
        ):
            await one.load_session(cwd=str(tmp_path), session_id="acp-a8", mcp_servers=[])
            await two.load_session(cwd=str(tmp_path), session_id="acp-a8", mcp_servers=[])
            running = asyncio.create_task(
                one.prompt(session_id="acp-a8", prompt=[text_block("cancel")])
            )
            await first.wait(lambda e: "working" in e.texts())
            with pytest.raises(RequestError) as own:
                await one.prompt(session_id="acp-a8", prompt=[text_block("again")])
            with pytest.raises(RequestError) as other:
                await two.prompt(session_id="acp-a8", prompt=[text_block("me too")])
            await one.cancel(session_id="acp-a8")
            response = await asyncio.wait_for(running, 30)
        await edge.wait_type("session.usage")
    assert (own.value.code, other.value.code) == (-32000, -32000)
    assert "busy" in str(own.value)
    assert "busy" in str(other.value)
    assert response.stop_reason == "cancelled"
    assert len(payloads(edge, "control.cancel")) == 1
    assert len(records(tmp_path, "session/cancel")) == 1
    assert [r["params"]["text"] for r in records(tmp_path, "session/prompt")] == ["cancel"]
    await validate_sequence(edge.frames, tmp_path)


async def test_two_editors_answering_at_once_one_answer_wins(
    master: Master, tmp_path: Path
) -> None:
    """Both editors answer the same permission request at once, differently: one answer
    reaches the agent, the other is refused by the master and changes nothing; both editors
    see the same outcome and go on working."""
    async with (
        library_bridge(master, "acp-a9", agent_command(tmp_path)),
        Edge(master, "acp-a9") as edge,
    ):
        first, second = Editor(choose="allow"), Editor(choose="reject")
        async with (
            attached(master, "acp-a9", first) as (one, _),
            attached(master, "acp-a9", second) as (two, _),
        ):
            await one.load_session(cwd=str(tmp_path), session_id="acp-a9", mcp_servers=[])
            await two.load_session(cwd=str(tmp_path), session_id="acp-a9", mcp_servers=[])
            response = await one.prompt(session_id="acp-a9", prompt=[text_block("permission")])
            assert response.stop_reason == "end_turn"
            (outcome,) = [r["params"]["outcome"] for r in records(tmp_path, "permission_answer")]
            await first.wait(lambda e: outcome in e.texts())
            await second.wait(lambda e: outcome in e.texts())
            response = await two.prompt(session_id="acp-a9", prompt=[text_block("still")])
            assert response.stop_reason == "end_turn"
    assert len(first.asked) == len(second.asked) == 1
    answers = [r["response"] for r in payloads(edge, "control.interaction.response")]
    assert len(answers) == 1
    assert outcome == f"selected {answers[0]}"
    assert payloads(edge, "agent.text.delta")[-1]["delta"] == "echo: still"
    await validate_sequence(edge.frames, tmp_path)


async def test_questions_of_a_non_acp_agent_are_asked_of_the_editor(
    master: Master, tmp_path: Path
) -> None:
    """A plain RAWP client's confirmation (Yes / No) and choice (string options: their own
    ids) reach the editor as permission requests; its answers go back as the values."""
    agent = RawpClient(master.ws_url, "acp-a10", role="client", token=API_KEY, create=True)
    await agent.connect()
    try:
        async with Edge(master, "acp-a10") as edge:
            editor = Editor(choose="yes")
            async with attached(master, "acp-a10", editor) as (conn, _):
                await conn.load_session(cwd=str(tmp_path), session_id="acp-a10", mcp_servers=[])
                await agent.turn_start("turn-1")
                await agent.interaction_request("i-1", "confirmation", "Deploy now?")
                await edge.wait_type("control.interaction.response")
                editor.choose = "blue"
                await agent.interaction_request("i-2", "choice", "Colour?", ["red", "blue"])
                await edge.wait_type("control.interaction.response", 2)
            await agent.turn_end("turn-1", "end_turn")
            await agent.usage(input_tokens=0, output_tokens=0, turn_id="turn-1")
    finally:
        await agent.close()
    (confirm, choice) = editor.asked
    assert [(o.option_id, o.kind) for o in confirm[1]] == [
        ("yes", "allow_once"),
        ("no", "reject_once"),
    ]
    assert [o.option_id for o in choice[1]] == ["red", "blue"]
    responses = payloads(edge, "control.interaction.response")
    assert [(r["interaction_id"], r["response"]) for r in responses] == [
        ("i-1", True),
        ("i-2", "blue"),
    ]


async def test_a_deleted_session_ends_the_attach(master: Master, tmp_path: Path) -> None:
    """session.deleted: the attach exits (the editor sees its agent process end)."""
    async with library_bridge(master, "acp-a11", agent_command(tmp_path)):
        editor = Editor()
        async with attached(master, "acp-a11", editor) as (conn, process):
            await conn.load_session(cwd=str(tmp_path), session_id="acp-a11", mcp_servers=[])
            async with aiohttp.ClientSession() as http:
                deleted = await http.delete(
                    f"{master.http_url}/v1/sessions/acp-a11",
                    headers={"Authorization": f"Bearer {API_KEY}"},
                )
                assert deleted.status in (200, 202, 204)
            code = await asyncio.wait_for(process.wait(), 30)
    assert code == 0


async def test_withdrawals_failures_and_the_other_update_kinds_reach_the_editor(
    master: Master, tmp_path: Path
) -> None:
    """agent.interaction.cancel withdraws the editor's question ($/cancel_request); a tool call
    cancelled by a crash is failed; plan_update, plan_removed, config_option_update, non-text
    chunks and the session's title come through as the same ACP updates."""
    async with (
        library_bridge(master, "acp-a12", agent_command(tmp_path)),
        Edge(master, "acp-a12") as edge,
    ):
        editor = Editor()  # never answers
        async with attached(master, "acp-a12", editor) as (conn, _):
            await conn.load_session(cwd=str(tmp_path), session_id="acp-a12", mcp_servers=[])
            await edge.client.user_message("withdraw")
            await editor.wait(lambda e: e.withdrawn)
            await edge.wait_type("session.usage")
            for text in ("crash", "kinds"):
                await edge.client.user_message(text)
            await edge.wait_type("session.usage", 3)
            await editor.wait(lambda e: "session_info_update" in e.kinds())
    assert len(editor.asked) == 1
    failed = [
        u
        for u in editor.updates
        if u.session_update == "tool_call_update" and u.tool_call_id == "call-c" and u.status
    ]
    assert failed[-1].status == "failed"
    kinds = editor.kinds()
    for kind in ("plan_update", "plan_removed", "config_option_update", "user_message_chunk"):
        assert kind in kinds
    images = [
        u
        for u in editor.updates
        if u.session_update == "agent_message_chunk" and u.content.type == "image"
    ]
    assert images[0].content.mime_type == "image/png"
    title = [u.title for u in editor.updates if u.session_update == "session_info_update"]
    assert title[0].startswith("Bad\\x1b[31m")
    await validate_sequence(edge.frames, tmp_path)
