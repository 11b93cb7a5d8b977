"""A scripted ACP agent (the official ``agent-client-protocol`` package) behind ``rawp bridge
acp``: a real master, a real RAWP edge, the bridge in this process or as the ``rawp`` command;
every edge's frames pass ``rawp validate --sequence``. One test per row of docs/acp.md's table.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.interop.acp_support import (
    Edge,
    agent_command,
    library_bridge,
    payloads,
    records,
    refused_command,
    validate_log,
    validate_sequence,
)

pytestmark = pytest.mark.timeout(120)


def _ended(edge: Edge, count: int = 1) -> Callable[[list[Any]], bool]:
    return lambda fs: sum(f.type == "session.usage" for f in fs) >= count


async def test_a_prompt_turn_maps_every_update_kind(master: Master, tmp_path: Path) -> None:
    """Thought, message chunks, a tool call with updates and result, plan, mode, title, usage."""
    async with (
        library_bridge(master, "acp-b1", agent_command(tmp_path)),
        Edge(master, "acp-b1") as edge,
    ):
        await edge.wait_type("acp.available_commands_update")
        await edge.client.user_message("full please")
        await edge.wait(_ended(edge))
    types = [t for t in edge.types()]
    turn = types[types.index("session.turn.start") :]
    assert turn == [
        "session.turn.start",
        "agent.thinking.delta",
        "agent.thinking.done",
        "agent.text.delta",
        "agent.text.delta",
        "agent.text.done",
        "tool.invoke.request",
        "acp.tool_call",
        "acp.tool_call_update",
        "acp.tool_call_update",
        "tool.invoke.result",
        "acp.plan",
        "acp.current_mode_update",
        "session.renamed",
        "acp.usage_update",
        "agent.text.delta",
        "agent.text.done",
        "session.turn.end",
        "session.usage",
    ]
    deltas = payloads(edge, "agent.text.delta")
    assert [d["delta"] for d in deltas] == ["Hello ", "there", "Done."]
    assert deltas[0]["block_id"] == deltas[1]["block_id"] != deltas[2]["block_id"]
    assert payloads(edge, "agent.thinking.delta")[0]["delta"] == "thinking about it"
    assert payloads(edge, "tool.invoke.request") == [
        {"call_id": "call-1", "tool_name": "Read notes.md", "input": {"path": "notes.md"}}
    ]
    extra = payloads(edge, "acp.tool_call")[0]
    assert (extra["call_id"], extra["kind"], extra["status"]) == ("call-1", "read", "pending")
    assert payloads(edge, "tool.invoke.result") == [
        {"call_id": "call-1", "status": "ok", "output": {"lines": 3}}
    ]
    plan = payloads(edge, "acp.plan")[0]
    assert [e["content"] for e in plan["entries"]] == ["read the notes", "answer"]
    assert payloads(edge, "acp.current_mode_update")[0]["currentModeId"] == "code"
    assert payloads(edge, "session.renamed")[0]["name"] == "Notes review"
    commands = payloads(edge, "acp.available_commands_update")[0]["availableCommands"]
    assert commands[0]["name"] == "plan"
    end = payloads(edge, "session.turn.end")[0]
    assert (end["stop_reason"], end["tool_invocation_count"]) == ("end_turn", 1)
    usage = payloads(edge, "session.usage")[0]
    assert usage["token_usage"] == {"input_tokens": 12, "output_tokens": 18, "thinking_tokens": 4}
    assert usage["context_window"] == {"capacity": 200000, "used": 1200}
    # The agent got the edge's text as the prompt, and no fs/terminal capability.
    (init,) = records(tmp_path, "initialize")
    caps = init["params"]["client_capabilities"]
    assert caps["fs"] == {"readTextFile": False, "writeTextFile": False}
    assert caps["terminal"] is False
    assert [r["params"]["text"] for r in records(tmp_path, "session/prompt")] == ["full please"]
    await validate_sequence(edge.frames, tmp_path)


async def test_messages_become_prompts_one_at_a_time(master: Master, tmp_path: Path) -> None:
    """Three user messages sent at once: three prompts, each after the previous turn ended."""
    async with (
        library_bridge(master, "acp-b2", agent_command(tmp_path)),
        Edge(master, "acp-b2") as edge,
    ):
        for text in ("one", "two", "three"):
            await edge.client.user_message(text)
        await edge.wait(_ended(edge, 3))
    types = [t for t in edge.types() if t.startswith("session.turn")]
    assert types == ["session.turn.start", "session.turn.end"] * 3
    texts = [d["delta"] for d in payloads(edge, "agent.text.delta")]
    assert texts == ["echo: one", "echo: two", "echo: three"]
    await validate_sequence(edge.frames, tmp_path)


async def test_permission_request_is_answered_by_an_edge(master: Master, tmp_path: Path) -> None:
    """session/request_permission → a choice interaction; the edge's answer selects the option."""
    async with (
        library_bridge(master, "acp-b3", agent_command(tmp_path)),
        Edge(master, "acp-b3") as edge,
    ):
        await edge.client.user_message("permission")
        await edge.wait_type("agent.interaction.request")
        (ask,) = payloads(edge, "agent.interaction.request")
        assert ask["kind"] == "choice"
        assert ask["prompt"] == "Allow Run rm -rf build?"
        assert ask["options"] == [
            {"value": "allow", "label": "Allow once", "kind": "allow_once"},
            {"value": "reject", "label": "Reject", "kind": "reject_once"},
        ]
        (permission,) = payloads(edge, "acp.permission")
        assert permission["interaction_id"] == ask["interaction_id"]
        assert permission["toolCall"]["toolCallId"] == "call-p"
        await edge.client.interaction_response(ask["interaction_id"], "allow")
        await edge.wait(_ended(edge))
    assert [r["params"]["outcome"] for r in records(tmp_path, "permission_answer")] == [
        "selected allow"
    ]
    assert payloads(edge, "tool.invoke.result")[0]["status"] == "ok"
    await validate_sequence(edge.frames, tmp_path)


async def test_an_answer_naming_no_option_rejects(master: Master, tmp_path: Path) -> None:
    """A hostile or mistyped answer never allows: the reject option, and a session.error."""
    async with (
        library_bridge(master, "acp-b4", agent_command(tmp_path)),
        Edge(master, "acp-b4") as edge,
    ):
        await edge.client.user_message("permission")
        await edge.wait_type("agent.interaction.request")
        (ask,) = payloads(edge, "agent.interaction.request")
        await edge.client.interaction_response(ask["interaction_id"], {"value": "allow-all\n"})
        await edge.wait(_ended(edge))
    assert records(tmp_path, "permission_answer")[0]["params"]["outcome"] == "selected reject"
    assert [e["error_code"] for e in payloads(edge, "session.error")] == ["acp_answer_unmatched"]
    await validate_sequence(edge.frames, tmp_path)


async def test_agent_moving_on_withdraws_its_question(master: Master, tmp_path: Path) -> None:
    """The agent ends its turn while a permission is pending: agent.interaction.cancel."""
    async with (
        library_bridge(master, "acp-b5", agent_command(tmp_path)),
        Edge(master, "acp-b5") as edge,
    ):
        await edge.client.user_message("withdraw")
        await edge.wait(_ended(edge))
    (ask,) = payloads(edge, "agent.interaction.request")
    (withdrawn,) = payloads(edge, "agent.interaction.cancel")
    assert withdrawn["interaction_id"] == ask["interaction_id"]
    assert edge.client.view.state.pending_interactions == {}
    await validate_sequence(edge.frames, tmp_path)


async def test_agent_cancel_request_withdraws_its_question(master: Master, tmp_path: Path) -> None:
    """$/cancel_request for a pending permission request: withdrawn from the edges, and the
    agent's request answered cancelled."""
    async with (
        library_bridge(master, "acp-b20", agent_command(tmp_path)),
        Edge(master, "acp-b20") as edge,
    ):
        await edge.client.user_message("retract")
        await edge.wait(_ended(edge))
    (ask,) = payloads(edge, "agent.interaction.request")
    (withdrawn,) = payloads(edge, "agent.interaction.cancel")
    assert withdrawn == {
        "interaction_id": ask["interaction_id"],
        "reason": "the agent withdrew the request",
    }
    assert records(tmp_path, "permission_answer")[0]["params"]["outcome"] == "cancelled"
    await validate_sequence(edge.frames, tmp_path)


async def test_control_cancel_becomes_session_cancel(master: Master, tmp_path: Path) -> None:
    """control.cancel → session/cancel; the agent's cancelled answer ends the turn cancelled."""
    async with (
        library_bridge(master, "acp-b6", agent_command(tmp_path)),
        Edge(master, "acp-b6") as edge,
    ):
        await edge.client.user_message("cancel")
        await edge.wait_type("agent.text.delta")
        await edge.client.cancel()
        await edge.wait(_ended(edge))
    assert len(records(tmp_path, "session/cancel")) == 1
    assert payloads(edge, "session.turn.end")[0]["stop_reason"] == "cancelled"
    await validate_sequence(edge.frames, tmp_path)


async def test_agent_hanging_on_cancel_is_stopped(master: Master, tmp_path: Path) -> None:
    """No answer within the grace after session/cancel: turn cancelled, agent restarted."""
    command = agent_command(tmp_path)
    async with (
        library_bridge(master, "acp-b7", command, cancel_grace=1.0),
        Edge(master, "acp-b7") as edge,
    ):
        await edge.client.user_message("hang")
        await edge.wait_type("agent.text.delta")
        await edge.client.cancel()
        await edge.wait(_ended(edge))
        await edge.client.user_message("again")
        await edge.wait(_ended(edge, 2))
    ends = [p["stop_reason"] for p in payloads(edge, "session.turn.end")]
    assert ends == ["cancelled", "end_turn"]
    assert [e["error_code"] for e in payloads(edge, "session.error")] == ["acp_cancel_timeout"]
    assert len(records(tmp_path, "initialize")) == 2  # a fresh agent for the next message
    await validate_sequence(edge.frames, tmp_path)


async def test_agent_exiting_mid_turn_ends_the_turn(master: Master, tmp_path: Path) -> None:
    """The agent dies mid-turn: blocks closed, its tool call cancelled, the turn ends with an
    error saying how it exited; the next message starts it again."""
    async with (
        library_bridge(master, "acp-b8", agent_command(tmp_path)),
        Edge(master, "acp-b8") as edge,
    ):
        await edge.client.user_message("crash")
        await edge.wait(_ended(edge))
        await edge.client.user_message("again")
        await edge.wait(_ended(edge, 2))
    # The agent announces its commands right after session/new, at a moment of its choosing.
    types = [t for t in edge.types() if t != "acp.available_commands_update"]
    first = types[types.index("session.turn.start") : types.index("session.usage") + 1]
    assert first == [
        "session.turn.start",
        "agent.text.delta",
        "agent.text.done",
        "tool.invoke.request",
        "acp.tool_call",
        "tool.invoke.result",
        "session.error",
        "session.turn.end",
        "session.usage",
    ]
    (error,) = payloads(edge, "session.error")
    assert error["error_code"] == "acp_agent_exited"
    assert "exit code 3" in error["message"]
    assert "boom: the agent fell over" in error["message"]
    assert payloads(edge, "tool.invoke.result")[0]["status"] == "cancelled"
    assert [p["stop_reason"] for p in payloads(edge, "session.turn.end")] == ["error", "end_turn"]
    await validate_sequence(edge.frames, tmp_path)


async def test_agent_exiting_between_turns_is_reported_and_restarted(
    master: Master, tmp_path: Path
) -> None:
    """An agent that exits while idle: a session.error says so at once; the next message
    starts it again."""
    async with (
        library_bridge(master, "acp-b18", agent_command(tmp_path)),
        Edge(master, "acp-b18") as edge,
    ):
        await edge.client.user_message("exit")
        await edge.wait_type("session.error")
        await edge.client.user_message("again")
        await edge.wait(_ended(edge, 2))
    (error,) = payloads(edge, "session.error")
    assert error["error_code"] == "acp_agent_exited"
    assert "exit code 0" in error["message"]
    assert [d["delta"] for d in payloads(edge, "agent.text.delta")] == ["bye", "echo: again"]
    assert len(records(tmp_path, "initialize")) == 2
    await validate_sequence(edge.frames, tmp_path)


async def test_updates_before_session_new_answers_are_kept(master: Master, tmp_path: Path) -> None:
    """An update the agent sends before session/new's answer names the session is relayed
    once the id is known, not reported as one for an unknown session."""
    command = agent_command(tmp_path, "--early")
    async with library_bridge(master, "acp-b19", command), Edge(master, "acp-b19") as edge:
        await edge.wait_type("acp.available_commands_update")
        await edge.client.user_message("hello")
        await edge.wait(_ended(edge))
    assert payloads(edge, "session.error") == []


async def test_prompt_answered_with_an_error(master: Master, tmp_path: Path) -> None:
    """A JSON-RPC error for session/prompt ends the turn with error and says why."""
    async with (
        library_bridge(master, "acp-b9", agent_command(tmp_path)),
        Edge(master, "acp-b9") as edge,
    ):
        await edge.client.user_message("fail")
        await edge.wait(_ended(edge))
    (error,) = payloads(edge, "session.error")
    assert error["error_code"] == "acp_prompt_failed"
    assert payloads(edge, "session.turn.end")[0]["stop_reason"] == "error"
    await validate_sequence(edge.frames, tmp_path)


async def test_refusal_keeps_the_acp_stop_reason(master: Master, tmp_path: Path) -> None:
    """A stop reason RAWP has no word for: the nearest one, the ACP one in acp.stop_reason."""
    async with (
        library_bridge(master, "acp-b10", agent_command(tmp_path)),
        Edge(master, "acp-b10") as edge,
    ):
        await edge.client.user_message("refuse")
        await edge.wait(_ended(edge))
    assert payloads(edge, "acp.stop_reason") == [{"stopReason": "refusal"}]
    assert payloads(edge, "session.turn.end")[0]["stop_reason"] == "end_turn"
    await validate_sequence(edge.frames, tmp_path)


async def test_garbage_on_stdout_is_dropped_and_reported(master: Master, tmp_path: Path) -> None:
    """Lines that are not JSON-RPC, a reused id, an update for another session: dropped, said
    once in a session.error; the turn goes on."""
    async with (
        library_bridge(master, "acp-b11", agent_command(tmp_path)),
        Edge(master, "acp-b11") as edge,
    ):
        await edge.client.user_message("garbage")
        await edge.wait(_ended(edge))
    texts = [d["delta"] for d in payloads(edge, "agent.text.delta")]
    assert texts == ["after garbage"]
    errors = payloads(edge, "session.error")
    assert [e["error_code"] for e in errors] == ["acp_bad_output"]
    assert payloads(edge, "session.turn.end")[0]["stop_reason"] == "end_turn"
    await validate_sequence(edge.frames, tmp_path)


async def test_a_50_mib_update_is_dropped_not_held(master: Master, tmp_path: Path) -> None:
    """A line past --max-message-bytes is dropped as it streams in and reported."""
    async with (
        library_bridge(master, "acp-b12", agent_command(tmp_path)),
        Edge(master, "acp-b12") as edge,
    ):
        await edge.client.user_message("big")
        await edge.wait(_ended(edge))
    assert [d["delta"] for d in payloads(edge, "agent.text.delta")] == ["after big"]
    (error,) = payloads(edge, "session.error")
    assert error["error_code"] == "acp_bad_output"
    assert "longer than 8388608 bytes" in error["message"]
    await validate_sequence(edge.frames, tmp_path)


async def test_a_line_split_across_writes_arrives_whole(master: Master, tmp_path: Path) -> None:
    """A JSON-RPC line written in two pieces is one update."""
    async with (
        library_bridge(master, "acp-b13", agent_command(tmp_path)),
        Edge(master, "acp-b13") as edge,
    ):
        # Nothing else is written between the two pieces (the agent's commands came first).
        await edge.wait_type("acp.available_commands_update")
        await edge.client.user_message("split")
        await edge.wait(_ended(edge))
    assert [d["delta"] for d in payloads(edge, "agent.text.delta")] == ["split line"]
    assert payloads(edge, "session.error") == []


async def test_stderr_flood_does_not_block_the_agent(master: Master, tmp_path: Path) -> None:
    """Megabytes on stderr: drained, the agent goes on."""
    async with (
        library_bridge(master, "acp-b14", agent_command(tmp_path)),
        Edge(master, "acp-b14") as edge,
    ):
        await edge.client.user_message("stderr")
        await edge.wait(_ended(edge))
    assert [d["delta"] for d in payloads(edge, "agent.text.delta")] == ["after flood"]


async def test_agent_that_never_answers_initialize(master: Master, tmp_path: Path) -> None:
    """initialize is bounded: the agent is stopped and the edges are told."""
    command = agent_command(tmp_path, "--no-init")
    async with (
        library_bridge(master, "acp-b15", command, init_timeout=1.0),
        Edge(master, "acp-b15") as edge,
    ):
        await edge.wait_type("session.error")
    (error,) = payloads(edge, "session.error")
    assert error["error_code"] == "acp_agent_unavailable"
    assert "did not answer initialize within 1 s" in error["message"]


async def test_initialize_timing_out_cancels_its_call(master: Master, tmp_path: Path) -> None:
    """The initialize call that timed out is cancelled, not left pending until the agent's
    connection closes under it (a failure nobody reads, reported by the event loop)."""
    loop = asyncio.get_running_loop()
    unread: list[str] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: unread.append(context["message"]))
    try:
        command = agent_command(tmp_path, "--no-init")
        async with (
            library_bridge(master, "acp-b25", command, init_timeout=0.5) as bridge,
            Edge(master, "acp-b25") as edge,
        ):
            await edge.wait_type("session.error")
            conn = bridge.agent.conn if bridge.agent is not None else None
        assert conn is None  # stopped, and its calls settled
        for _ in range(3):
            gc.collect()
            await asyncio.sleep(0.05)
    finally:
        loop.set_exception_handler(previous)
    assert [m for m in unread if "never retrieved" in m] == []


async def test_a_command_that_cannot_start(master: Master, tmp_path: Path) -> None:
    """A missing executable is reported, not a crash of the bridge."""
    command = [str(tmp_path / "no-such-agent")]
    async with (
        library_bridge(master, "acp-b16", command),
        Edge(master, "acp-b16", from_start=True) as edge,
    ):
        await edge.wait_type("session.error")
    assert payloads(edge, "session.error")[0]["error_code"] == "acp_agent_unavailable"


async def _spawn_bridge(master: Master, tmp_path: Path, session: str) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if k not in ("RAWP_TOKEN", "RAWP_WS_URL")}
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rawp.cli",
        "bridge",
        "acp",
        "--session",
        session,
        "--ws-url",
        master.ws_url,
        "--state",
        str(tmp_path / "bridge-state.json"),
        "--",
        *agent_command(tmp_path, "--load", "--sessions", str(tmp_path / "sessions.json")),
        env={**env, "RAWP_API_KEY": API_KEY},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )


async def test_bridge_killed_mid_turn_reattaches_and_loads_the_agent_session(
    make_master: Callable[..., Any], tmp_path: Path
) -> None:
    """SIGKILL mid-turn: the master finalizes; the restarted bridge's history takes it back,
    ends the lost turn, and loads the agent's session (its replay is not relayed again)."""
    master: Master = await make_master(reattach_window_s=60.0)
    first = await _spawn_bridge(master, tmp_path, "acp-b17")
    second: asyncio.subprocess.Process | None = None
    try:
        async with asyncio.timeout(30):
            while await master.store.get_session("acp-b17") is None:
                await asyncio.sleep(0.05)
        async with Edge(master, "acp-b17") as edge:
            await edge.client.user_message("hello")
            await edge.wait(_ended(edge))
            await edge.client.user_message("hang")
            await edge.wait_type("agent.text.delta", 2)
            first.send_signal(signal.SIGKILL)
            await first.wait()
            await edge.wait(
                lambda fs: any(f.type == "session.turn.end" and f.synthetic for f in fs)
            )
            second = await _spawn_bridge(master, tmp_path, "acp-b17")
            await edge.wait_type("session.history")
            await edge.wait(_ended(edge, 2))
            await edge.client.user_message("after restart")
            await edge.wait(_ended(edge, 3))
    finally:
        for process in (first, second):
            if process is not None and process.returncode is None:
                process.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(process.wait(), 30)
                except TimeoutError:
                    process.kill()
                    await process.wait()
    ends = [
        p["stop_reason"]
        for f, p in zip(
            [f for f in edge.frames if f.type == "session.turn.end" and not f.synthetic],
            [
                p
                for f, p in zip(edge.frames, _all(edge), strict=True)
                if f.type == "session.turn.end" and not f.synthetic
            ],
            strict=True,
        )
    ]
    assert ends == ["end_turn", "error", "end_turn"]
    codes = [e["error_code"] for e in payloads(edge, "session.error")]
    assert codes == ["acp_bridge_restarted"]
    (new,) = records(tmp_path, "session/new")
    (load,) = records(tmp_path, "session/load")
    assert load["params"]["session_id"] == new["params"]["session_id"]
    texts = [d["delta"] for d in payloads(edge, "agent.text.delta")]
    assert not any(t.startswith("replayed") for t in texts)
    assert texts[-1] == "echo: after restart"
    session = master.hub.sessions["acp-b17"]
    assert session.state.turn_id is None
    assert not session.state.finalized
    await validate_sequence(edge.frames, tmp_path)
    await validate_log(master, "acp-b17")


def _all(edge: Edge) -> list[dict[str, Any]]:
    from protocol import codec

    return [codec.decode_object(codec.encode(f)).get("payload", {}) for f in edge.frames]


async def test_bridge_command_line_needs_a_credential(tmp_path: Path) -> None:
    """``rawp bridge acp`` without any credential exits 2 with a message, no traceback."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAWP_TOKEN", "RAWP_API_KEY")}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rawp.cli",
        "bridge",
        "acp",
        "--session",
        "s",
        "--",
        "true",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2
    assert b"needs --token" in err
    assert b"Traceback" not in err


@pytest.mark.parametrize(
    ("token", "flags", "said"),
    [
        ("rk_not_a_key", (), "unknown credential"),
        (API_KEY, ("--no-create",), "no session acp-b21"),
    ],
    ids=["bad-token", "unknown-session"],
)
async def test_bridge_refused_by_the_master_exits_1_with_one_line(
    master: Master, tmp_path: Path, token: str, flags: tuple[str, ...], said: str
) -> None:
    """The master refuses the bridge: exit 1, one line on stderr saying why, no traceback,
    and the agent is never started."""
    code, err = await refused_command(
        master,
        "bridge",
        "acp",
        "--session",
        "acp-b21",
        *flags,
        "--",
        *agent_command(tmp_path),
        token=token,
    )
    assert code == 1
    (line,) = err.splitlines()
    assert line.startswith("rawp bridge acp: the relay refused the session: ")
    assert said in line
    assert records(tmp_path) == []


async def test_a_cost_that_is_not_a_number_or_has_no_one_line_currency_is_dropped(
    master: Master, tmp_path: Path
) -> None:
    """usage_update's cost NaN, ±Infinity, or with a currency that is not one short line: no
    cost in acp.usage_update and 0 in session.usage; a sane cost is kept (maps usage_update)."""
    kinds = ("nan", "inf", "big", "newline", "long", "ok")
    async with (
        library_bridge(master, "acp-b22", agent_command(tmp_path)),
        Edge(master, "acp-b22") as edge,
    ):
        for kind in kinds:
            await edge.client.user_message(f"costly {kind}")
        await edge.wait(_ended(edge, len(kinds)))
    updates = payloads(edge, "acp.usage_update")
    assert len(updates) == len(kinds)
    assert ["cost" in u for u in updates] == [False] * 5 + [True]
    assert updates[-1]["cost"] == {"amount": 0.25, "currency": "EUR"}
    costs = [
        (u["cost_usage"]["used"], u["cost_usage"]["unit"]) for u in payloads(edge, "session.usage")
    ]
    assert costs == [(0.0, "USD")] * 5 + [(0.25, "EUR")]
    assert [u["context_window"] for u in payloads(edge, "session.usage")] == [
        {"used": 10, "capacity": 100}
    ] * len(kinds)
    assert payloads(edge, "session.error") == []
    await validate_sequence(edge.frames, tmp_path)


async def test_a_permission_request_past_the_bounds_is_refused_to_the_agent(
    master: Master, tmp_path: Path
) -> None:
    """10,000 options, a 2 MiB option name, a 5,000-character optionId: never asked of the
    edges; the agent gets a JSON-RPC error saying why, the edges a session.error, and the turn
    goes on and ends normally."""
    prompts = ("permission-many", "permission-name", "permission-id")
    async with (
        library_bridge(master, "acp-b23", agent_command(tmp_path)),
        Edge(master, "acp-b23") as edge,
    ):
        for text in prompts:
            await edge.client.user_message(text)
        await edge.wait(_ended(edge, len(prompts)))
        # The bridge and the session go on.
        await edge.client.user_message("permission")
        await edge.wait_type("agent.interaction.request")
        (ask,) = payloads(edge, "agent.interaction.request")
        await edge.client.interaction_response(ask["interaction_id"], "allow")
        await edge.wait(_ended(edge, len(prompts) + 1))
    answers = [r["params"]["outcome"] for r in records(tmp_path, "permission_answer")]
    assert [a.split(":")[0] for a in answers] == ["refused -32602"] * 3 + ["selected allow"]
    assert "10000 options; at most 64" in answers[0]
    assert "name has 2097152 characters" in answers[1]
    assert "optionId has 5000 characters" in answers[2]
    errors = payloads(edge, "session.error")
    assert [e["error_code"] for e in errors] == ["acp_permission_refused"] * 3
    assert [p["stop_reason"] for p in payloads(edge, "session.turn.end")] == ["end_turn"] * 4
    assert [d["delta"] for d in payloads(edge, "agent.text.delta")][:3] == ["went on"] * 3
    await validate_sequence(edge.frames, tmp_path)


async def test_a_question_the_master_refuses_is_refused_to_the_agent(
    make_master: Callable[..., Any], tmp_path: Path
) -> None:
    """Within the bridge's bounds but past the master's frame size: the agent is refused
    rather than left waiting for an answer nobody was asked; the turn ends normally."""
    master: Master = await make_master(max_frame_bytes=32 * 1024)
    async with (
        library_bridge(master, "acp-b24", agent_command(tmp_path)),
        Edge(master, "acp-b24") as edge,
    ):
        await edge.client.user_message("permission-wide")
        await edge.wait(_ended(edge))
    (answer,) = [r["params"]["outcome"] for r in records(tmp_path, "permission_answer")]
    assert answer.startswith("refused -32602")
    assert "the relay did not accept it" in answer
    assert [e["error_code"] for e in payloads(edge, "session.error")] == ["acp_permission_refused"]
    assert payloads(edge, "agent.interaction.request") == []
    assert payloads(edge, "session.turn.end")[0]["stop_reason"] == "end_turn"
    await validate_sequence(edge.frames, tmp_path)


async def test_every_other_update_kind_and_shape_is_mapped(master: Master, tmp_path: Path) -> None:
    """user_message_chunk, messageId blocks, non-text chunks, a 250,000-character chunk, a
    non-object rawInput, an update for an unannounced call that failed, plan_update,
    plan_removed, config_option_update, a hostile title, a title-less session_info_update,
    cached token counts."""
    async with (
        library_bridge(master, "acp-b26", agent_command(tmp_path)),
        Edge(master, "acp-b26") as edge,
    ):
        await edge.client.user_message("kinds")
        await edge.wait(_ended(edge))
    types = edge.types()
    turn = types[types.index("session.turn.start") : types.index("session.usage") + 1]
    assert turn == [
        "session.turn.start",
        "acp.user_message_chunk",
        "agent.text.delta",
        "agent.text.delta",
        "agent.text.done",
        "agent.text.delta",
        "agent.text.done",
        "acp.agent_message_chunk",
        "agent.text.delta",
        "agent.text.delta",
        "agent.text.delta",
        "agent.text.done",
        "acp.agent_thought_chunk",
        "tool.invoke.request",
        "acp.tool_call",
        "acp.tool_call_update",
        "tool.invoke.result",
        "tool.invoke.request",
        "acp.tool_call_update",
        "tool.invoke.result",
        "acp.plan_update",
        "acp.plan_removed",
        "acp.config_option_update",
        "session.renamed",
        "acp.session_info_update",
        "session.turn.end",
        "session.usage",
    ]
    (said,) = payloads(edge, "acp.user_message_chunk")
    assert said["content"] == {"type": "text", "text": "what the user said"}
    deltas = payloads(edge, "agent.text.delta")
    assert [d["block_id"] for d in deltas[:3]] == ["m-1", "m-1", "m-2"]
    assert [len(d["delta"]) for d in deltas[3:]] == [100_000, 100_000, 50_000]
    image = payloads(edge, "acp.agent_message_chunk")[0]["content"]
    assert (image["type"], image["mimeType"]) == ("image", "image/png")
    assert payloads(edge, "acp.agent_thought_chunk")[0]["content"]["type"] == "audio"
    requests = payloads(edge, "tool.invoke.request")
    assert requests == [
        {"call_id": "t-str", "tool_name": "Run ls", "input": {"value": "ls -la"}},
        {"call_id": "t-new", "tool_name": "Read gone.txt", "input": {}},
    ]
    assert payloads(edge, "tool.invoke.result") == [
        {"call_id": "t-str", "status": "ok", "output": "a b c"},
        {"call_id": "t-new", "status": "error", "output": "no such file"},
    ]
    assert payloads(edge, "acp.plan_update")[0]["plan"]["planId"] == "p1"
    assert payloads(edge, "acp.plan_removed")[0]["planId"] == "p1"
    options = payloads(edge, "acp.config_option_update")[0]["configOptions"]
    assert options[0]["currentValue"] == "fast"
    (renamed,) = payloads(edge, "session.renamed")
    assert renamed["name"].startswith("Bad\\x1b[31m tttt")
    assert len(renamed["name"]) == 200
    assert "\x1b" not in renamed["name"]
    assert payloads(edge, "acp.session_info_update")[0]["updatedAt"] == "2026-12-08T00:00:00Z"
    (usage,) = payloads(edge, "session.usage")
    assert usage["token_usage"] == {
        "input_tokens": 5,
        "output_tokens": 4,
        "cache_read_tokens": 3,
        "cache_write_tokens": 2,
    }
    await validate_sequence(edge.frames, tmp_path)


@pytest.mark.parametrize(
    ("acp_reason", "rawp_reason"),
    [("max_tokens", "max_tokens"), ("max_turn_requests", "max_tokens"), ("cancelled", "cancelled")],
)
async def test_stop_reasons_map(
    master: Master, tmp_path: Path, acp_reason: str, rawp_reason: str
) -> None:
    """Each ACP stop reason ends the turn with its RAWP one; one RAWP has no word for is kept
    in acp.stop_reason."""
    async with (
        library_bridge(master, "acp-b27", agent_command(tmp_path)),
        Edge(master, "acp-b27") as edge,
    ):
        await edge.client.user_message(f"stop {acp_reason}")
        await edge.wait(_ended(edge))
    assert payloads(edge, "session.turn.end")[0]["stop_reason"] == rawp_reason
    kept = [] if acp_reason == rawp_reason else [{"stopReason": acp_reason}]
    assert payloads(edge, "acp.stop_reason") == kept


async def test_fs_and_terminal_requests_are_refused(master: Master, tmp_path: Path) -> None:
    """fs/* and terminal/* (not advertised): "method not found" to the agent, which goes on."""
    async with (
        library_bridge(master, "acp-b28", agent_command(tmp_path)),
        Edge(master, "acp-b28") as edge,
    ):
        await edge.client.user_message("fs")
        await edge.wait(_ended(edge))
    calls = [
        (r["params"]["call"], r["params"]["outcome"]) for r in records(tmp_path, "client_call")
    ]
    assert calls == [
        ("fs/read_text_file", "refused -32601"),
        ("fs/write_text_file", "refused -32601"),
        ("terminal/create", "refused -32601"),
    ]
    assert [d["delta"] for d in payloads(edge, "agent.text.delta")] == ["did it myself"]


async def test_permission_outside_a_turn_is_cancelled_at_once(
    master: Master, tmp_path: Path
) -> None:
    """A permission request after the agent's turn ended is answered cancelled at once and
    never asked of the edges."""
    async with (
        library_bridge(master, "acp-b29", agent_command(tmp_path)),
        Edge(master, "acp-b29") as edge,
    ):
        await edge.client.user_message("late")
        await edge.wait(_ended(edge))
        async with asyncio.timeout(30):
            while not records(tmp_path, "permission_answer"):
                await asyncio.sleep(0.05)
    assert records(tmp_path, "permission_answer")[0]["params"]["outcome"] == "cancelled"
    assert payloads(edge, "agent.interaction.request") == []


@pytest.mark.parametrize(
    ("response", "chosen"),
    [
        (True, "selected allow"),
        (False, "selected reject"),
        ({"option_id": "allow"}, "selected allow"),
        ({"optionId": "reject"}, "selected reject"),
    ],
    ids=["true", "false", "option_id", "optionId"],
)
async def test_answer_forms_select_an_option(
    master: Master, tmp_path: Path, response: Any, chosen: str
) -> None:
    """true / false pick the first allow / reject option; an object names the optionId."""
    async with (
        library_bridge(master, "acp-b30", agent_command(tmp_path)),
        Edge(master, "acp-b30") as edge,
    ):
        await edge.client.user_message("permission")
        await edge.wait_type("agent.interaction.request")
        (ask,) = payloads(edge, "agent.interaction.request")
        await edge.client.interaction_response(ask["interaction_id"], response)
        await edge.wait(_ended(edge))
    assert records(tmp_path, "permission_answer")[0]["params"]["outcome"] == chosen
    assert payloads(edge, "session.error") == []


async def test_a_session_the_agent_cannot_load_is_replaced(master: Master, tmp_path: Path) -> None:
    """The agent refuses session/load of the session the bridge kept: acp_session_lost, then
    session/new, whose id is kept; prompts go on."""
    state = tmp_path / "bridge-state.json"
    _agent_state(state, '{"session_id": "agent-gone"}')
    command = agent_command(tmp_path, "--load", "--sessions", str(tmp_path / "sessions.json"))
    async with (
        library_bridge(master, "acp-b31", command, state_path=state),
        Edge(master, "acp-b31") as edge,
    ):
        await edge.wait_type("acp.session")
        await edge.client.user_message("hello")
        await edge.wait(_ended(edge))
    (load,) = records(tmp_path, "session/load")
    assert load["params"]["session_id"] == "agent-gone"
    (new,) = records(tmp_path, "session/new")
    (error,) = payloads(edge, "session.error")
    assert error["error_code"] == "acp_session_lost"
    assert payloads(edge, "acp.session")[0]["sessionId"] == new["params"]["session_id"]
    assert f'"{new["params"]["session_id"]}"' in _agent_state(state)
    assert [d["delta"] for d in payloads(edge, "agent.text.delta")] == ["echo: hello"]


def _agent_state(state: Path, text: str | None = None) -> str:
    """The bridge's saved agent session (``STATE.acp.json``), written first when ``text``."""
    path = Path(f"{state}.acp.json")
    if text is not None:
        path.write_text(text)
    return path.read_text()
