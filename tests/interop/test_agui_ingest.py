"""An AG-UI agent (scripted, ``ag-ui-protocol``'s encoder) behind ``rawp bridge ag-ui``.

A real master, a real RAWP edge (the client library) and the bridge, in-process as the
library class or as the ``rawp`` command; the edge's frames are checked with
``rawp validate --sequence``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import (
    CustomEvent,
    Interrupt,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from protocol import codec
from protocol.client import RawpClient
from protocol.frames import Frame, GenericFrame
from relay.agui import AguiBridge
from relay.server import Master
from tests.interop.agui_agent import Hold, ScriptedAgent, Step
from tests.interop.conftest import API_KEY, run_harness

pytestmark = pytest.mark.timeout(120)

RUN = RunStartedEvent(thread_id="t", run_id="r")
DONE = RunFinishedEvent(thread_id="t", run_id="r")


@contextlib.asynccontextmanager
async def scripted_agent() -> AsyncIterator[ScriptedAgent]:
    """The scripted AG-UI agent server on a free loopback port."""
    agent = ScriptedAgent()
    await agent.start()
    try:
        yield agent
    finally:
        await agent.stop()


class Edge:
    """A RAWP edge that records every frame it is delivered."""

    def __init__(self, master: Master, session_id: str) -> None:
        self.client = RawpClient(master.ws_url, session_id, role="edge", token=API_KEY)
        self.frames: list[Frame | GenericFrame] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Edge:
        await self.client.connect()
        self._task = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.client.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _read(self) -> None:
        async for frame in self.client:
            self.frames.append(frame)

    def types(self) -> list[str]:
        """Types of the frames delivered (connection frames aside)."""
        return [f.type for f in self.frames if not f.type.startswith("connection.")]

    async def wait(self, predicate: Callable[[list[Frame | GenericFrame]], bool]) -> None:
        """Until ``predicate(frames)``; the timeout only guards a hang."""
        async with asyncio.timeout(30):
            while not predicate(self.frames):
                await asyncio.sleep(0.02)

    async def wait_type(self, frame_type: str, count: int = 1) -> None:
        """Until ``count`` frames of ``frame_type`` arrived."""
        await self.wait(lambda fs: sum(f.type == frame_type for f in fs) >= count)


@contextlib.asynccontextmanager
async def library_bridge(
    master: Master, session_id: str, agent: ScriptedAgent, **options: Any
) -> AsyncIterator[AguiBridge]:
    """The bridge as the library class, in this process, attached before it yields."""
    bridge = AguiBridge(master.ws_url, session_id, agent.url, token=API_KEY, **options)
    task = asyncio.create_task(bridge.run())
    async with asyncio.timeout(30):
        while not bridge.client.connected:
            await asyncio.sleep(0.02)
    try:
        yield bridge
    finally:
        bridge.close()
        await asyncio.wait_for(task, 30)


async def validate_sequence(frames: list[Frame | GenericFrame], tmp_path: Path) -> dict[str, Any]:
    """``rawp validate --sequence --json`` on the frames (JSON Lines); its parsed report."""
    path = tmp_path / "frames.jsonl"
    path.write_bytes(b"".join(codec.encode(f) + b"\n" for f in frames))  # type: ignore[arg-type]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rawp.cli",
        "validate",
        str(path),
        "--sequence",
        "--json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, out.decode() + err.decode()
    return {"stdout": out.decode()}


def _payloads(edge: Edge, frame_type: str) -> list[dict[str, Any]]:
    return [
        codec.decode_object(codec.encode(f))["payload"]  # type: ignore[arg-type]
        for f in edge.frames
        if f.type == frame_type
    ]


def _full_run() -> list[Step]:
    return [
        RUN,
        StepStartedEvent(step_name="plan"),
        ReasoningStartEvent(message_id="r1"),
        ReasoningMessageStartEvent(message_id="r1", role="reasoning"),
        ReasoningMessageContentEvent(message_id="r1", delta="thinking hard"),
        ReasoningMessageEndEvent(message_id="r1"),
        ReasoningEndEvent(message_id="r1"),
        StepFinishedEvent(step_name="plan"),
        TextMessageStartEvent(message_id="m1", role="assistant"),
        TextMessageContentEvent(message_id="m1", delta="Hello "),
        TextMessageContentEvent(message_id="m1", delta="there"),
        TextMessageEndEvent(message_id="m1"),
        ToolCallStartEvent(tool_call_id="c1", tool_call_name="weather"),
        ToolCallArgsEvent(tool_call_id="c1", delta='{"city":'),
        ToolCallArgsEvent(tool_call_id="c1", delta='"Oslo"}'),
        ToolCallEndEvent(tool_call_id="c1"),
        ToolCallResultEvent(message_id="t1", tool_call_id="c1", content="rain"),
        CustomEvent(name="progress", value={"pct": 100}),
        RunFinishedEvent(
            thread_id="t",
            run_id="r",
            usage=[TokenUsage(input_tokens=7, output_tokens=9, reasoning_tokens=3)],
        ),
    ]


async def test_bridge_turns_an_agui_run_into_rawp_frames_that_validate(
    master: Master, tmp_path: Path
) -> None:
    """Reasoning, text, a tool call and its result, usage: RAWP frames, valid in sequence."""
    async with scripted_agent() as agent:
        agent.scripts.extend([_full_run(), _full_run_second()])
        async with library_bridge(master, "agui-i1", agent), Edge(master, "agui-i1") as edge:
            await edge.client.user_message("What's the weather?")
            await edge.wait_type("session.usage")
            await edge.client.user_message("And tomorrow?")
            await edge.wait_type("session.usage", 2)
    types = edge.types()
    first = types[types.index("session.turn.start") : types.index("session.usage") + 1]
    assert [t for t in first if t not in ("session.presence", "session.status")] == [
        "session.turn.start",
        "agent.thinking.delta",
        "agent.thinking.done",
        "agent.text.delta",
        "agent.text.delta",
        "agent.text.done",
        "tool.invoke.request",
        "tool.invoke.result",
        "session.turn.end",
        "session.usage",
    ]
    assert _payloads(edge, "tool.invoke.request")[0] == {
        "call_id": "c1",
        "tool_name": "weather",
        "input": {"city": "Oslo"},
    }
    assert _payloads(edge, "tool.invoke.result")[0] == {
        "call_id": "c1",
        "status": "ok",
        "output": "rain",
    }
    assert _payloads(edge, "session.turn.end")[0]["stop_reason"] == "end_turn"
    usage = _payloads(edge, "session.usage")[0]["token_usage"]
    assert usage == {"input_tokens": 7, "output_tokens": 9, "thinking_tokens": 3}
    # The agent got the session's transcript as its run input, the new user message last.
    first_input, second_input = agent.inputs
    assert first_input.thread_id == "agui-i1"
    assert [(m.role, m.content) for m in first_input.messages] == [("user", "What's the weather?")]
    roles = [m.role for m in second_input.messages]
    assert roles == ["user", "reasoning", "assistant", "assistant", "tool", "user"]
    await validate_sequence(edge.frames, tmp_path)


def _full_run_second() -> list[Step]:
    return [
        RUN,
        TextMessageStartEvent(message_id="m2", role="assistant"),
        TextMessageContentEvent(message_id="m2", delta="Sun."),
        TextMessageEndEvent(message_id="m2"),
        DONE,
    ]


async def test_interrupt_becomes_an_interaction_and_its_answer_resumes(
    master: Master, tmp_path: Path
) -> None:
    """RUN_FINISHED with an interrupt asks the edges; the answer is the next run's resume."""
    ask = RunFinishedEvent(
        thread_id="t",
        run_id="r",
        outcome=RunFinishedInterruptOutcome(
            interrupts=[
                Interrupt(
                    id="ok-1",
                    reason="choice",
                    message="Which one?",
                    metadata={"options": ["a", "b"]},
                )
            ]
        ),
    )
    after = [
        RUN,
        TextMessageStartEvent(message_id="m2", role="assistant"),
        TextMessageContentEvent(message_id="m2", delta="Took b."),
        TextMessageEndEvent(message_id="m2"),
        DONE,
    ]
    async with scripted_agent() as agent:
        agent.scripts.extend([[RUN, ask], after])
        async with library_bridge(master, "agui-i2", agent), Edge(master, "agui-i2") as edge:
            await edge.client.user_message("pick")
            await edge.wait_type("agent.interaction.request")
            request = _payloads(edge, "agent.interaction.request")[0]
            assert request == {
                "interaction_id": "ok-1",
                "kind": "choice",
                "prompt": "Which one?",
                "options": ["a", "b"],
            }
            await edge.client.interaction_response("ok-1", "b")
            await edge.wait_type("session.usage")
    assert agent.inputs[1].resume is not None
    resume = agent.inputs[1].resume[0]
    assert (resume.interrupt_id, resume.status, resume.payload) == ("ok-1", "resolved", "b")
    assert edge.types().count("session.turn.start") == 1
    assert _payloads(edge, "session.turn.end")[0]["stop_reason"] == "end_turn"
    await validate_sequence(edge.frames, tmp_path)


BROKEN: dict[str, list[Step]] = {
    "content for an unknown message": [
        RUN,
        TextMessageStartEvent(message_id="m1", role="assistant"),
        TextMessageContentEvent(message_id="m1", delta="ok"),
        TextMessageContentEvent(message_id="ghost", delta="boo"),
        DONE,
    ],
    "stream ends before RUN_FINISHED": [
        RUN,
        ToolCallStartEvent(tool_call_id="c1", tool_call_name="x"),
        ToolCallArgsEvent(tool_call_id="c1", delta="{}"),
        ToolCallEndEvent(tool_call_id="c1"),
    ],
    "not JSON": [RUN, b"data: {not json\n\n"],
    "not an AG-UI event": [RUN, b'data: {"type": "NOPE"}\n\n'],
    "first event not RUN_STARTED": [TextMessageStartEvent(message_id="m1"), DONE],
    "run finished with a message open": [
        RUN,
        ReasoningStartEvent(message_id="r1"),
        ReasoningMessageStartEvent(message_id="r1", role="reasoning"),
        ReasoningMessageContentEvent(message_id="r1", delta="hm"),
        DONE,
    ],
    "events after RUN_FINISHED": [RUN, DONE, TextMessageStartEvent(message_id="late")],
    "run that never finishes": [RUN, TextMessageStartEvent(message_id="m1"), Hold()],
}


@pytest.mark.parametrize("case", sorted(BROKEN))
async def test_a_stream_breaking_agui_rules_ends_the_turn_cleanly(
    master: Master, tmp_path: Path, case: str
) -> None:
    """A broken AG-UI stream: the turn ends error with usage and a session.error, no crash."""
    async with scripted_agent() as agent:
        agent.scripts.extend([BROKEN[case], _full_run_second()])
        options = {"run_timeout": 0.5} if case == "run that never finishes" else {}
        async with (
            library_bridge(master, "agui-i3", agent, **options) as bridge,
            Edge(master, "agui-i3") as edge,
        ):
            await edge.client.user_message("go")
            if case != "events after RUN_FINISHED":  # read no further: the run has ended
                await edge.wait_type("session.error")
            await edge.wait_type("session.usage")
            # The bridge goes on: the next message is a normal turn.
            await edge.client.user_message("again")
            await edge.wait_type("session.usage", 2)
            assert bridge.runs == 2
    ends = _payloads(edge, "session.turn.end")
    assert [e["stop_reason"] for e in ends] == (
        ["end_turn", "end_turn"] if case == "events after RUN_FINISHED" else ["error", "end_turn"]
    )
    if case != "events after RUN_FINISHED":
        error = _payloads(edge, "session.error")[0]
        assert error["error_code"] == "agui_stream_invalid"
        assert error["fatal"] is False
    state = master.hub.sessions["agui-i3"].state
    assert state.turn_id is None
    assert not state.open_calls
    await validate_sequence(edge.frames, tmp_path)


async def test_run_error_ends_the_turn_error(master: Master, tmp_path: Path) -> None:
    """RUN_ERROR: the turn ends error with usage and a session.error carrying the message."""
    async with scripted_agent() as agent:
        agent.scripts.append([RUN, RunErrorEvent(message="model overloaded", code="503")])
        async with library_bridge(master, "agui-i4", agent), Edge(master, "agui-i4") as edge:
            await edge.client.user_message("go")
            await edge.wait_type("session.error")
    assert _payloads(edge, "session.turn.end")[0]["stop_reason"] == "error"
    error = _payloads(edge, "session.error")[0]
    assert (error["error_code"], error["message"]) == ("agui_run_error", "model overloaded")
    await validate_sequence(edge.frames, tmp_path)


async def test_cancel_from_an_edge_stops_the_run(master: Master, tmp_path: Path) -> None:
    """control.cancel: the bridge drops the agent's stream and ends the turn cancelled."""
    hold = Hold()
    async with scripted_agent() as agent:
        agent.scripts.append(
            [RUN, TextMessageStartEvent(message_id="m1"), _content("m1", "par"), hold]
        )
        async with library_bridge(master, "agui-i5", agent), Edge(master, "agui-i5") as edge:
            await edge.client.user_message("go")
            await edge.wait_type("agent.text.delta")
            await edge.client.cancel()
            await edge.wait_type("session.usage")
    assert [f.type for f in edge.frames if f.type.startswith("agent.text")] == [
        "agent.text.delta",
        "agent.text.done",
    ]
    assert _payloads(edge, "session.turn.end")[0]["stop_reason"] == "cancelled"
    await validate_sequence(edge.frames, tmp_path)


def _content(message_id: str, delta: str) -> TextMessageContentEvent:
    return TextMessageContentEvent(message_id=message_id, delta=delta)


async def _spawn_bridge(
    master: Master, agent: ScriptedAgent, state: Path, *, logs: bool = False
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rawp.cli",
        "bridge",
        "ag-ui",
        "--agent-url",
        agent.url,
        "--session",
        "agui-i6",
        "--relay-url",
        master.ws_url,
        "--state",
        str(state),
        "--agent-header",
        "X-Agent-Key: k-123",
        *(["--log-format", "json"] if logs else []),
        env={**os.environ, "RAWP_API_KEY": API_KEY},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE if logs else asyncio.subprocess.DEVNULL,
    )


async def test_the_bridge_says_what_it_does(master: Master, tmp_path: Path) -> None:
    """``rawp bridge ag-ui`` logs one line on start, one once attached and one per run's start
    and end (here as JSON lines, every one of them JSON)."""
    async with scripted_agent() as agent:
        agent.scripts.append(_full_run_second())
        bridge = await _spawn_bridge(master, agent, tmp_path / "state.json", logs=True)
        try:
            async with asyncio.timeout(30):  # the bridge creates the session
                while await master.store.get_session("agui-i6") is None:
                    await asyncio.sleep(0.05)
            async with Edge(master, "agui-i6") as edge:
                await edge.client.user_message("weather?")
                await edge.wait_type("session.usage")
        finally:
            bridge.send_signal(signal.SIGTERM)
            await asyncio.wait_for(bridge.wait(), 30)
    assert bridge.stderr is not None
    events = [json.loads(line) for line in (await bridge.stderr.read()).decode().splitlines()]
    names = [e["event"] for e in events if e.get("logger") is None]
    assert names == ["starting", "attached", "run_started", "run_ended"], events
    starting, attached, started, ended = (e for e in events if e.get("logger") is None)
    assert starting["relay_url"] == master.ws_url
    assert starting["agent_url"] == agent.url
    assert attached["resumed"] is False
    assert started["run_id"] == ended["run_id"]
    assert ended["outcome"] == "streamed"


async def test_bridge_killed_mid_run_finalizes_then_unfinalizes(
    make_master: Callable[..., Any], tmp_path: Path
) -> None:
    """SIGKILL mid-run: the master finalizes; the restarted bridge's history takes it back."""
    master: Master = await make_master(reattach_window_s=60.0)
    hold = Hold()
    state = tmp_path / "bridge-state.json"
    async with scripted_agent() as agent:
        agent.scripts.append(
            [RUN, TextMessageStartEvent(message_id="m1"), _content("m1", "half a"), hold]
        )
        agent.scripts.append(_full_run_second())
        first = await _spawn_bridge(master, agent, state)
        try:
            async with asyncio.timeout(30):  # the bridge creates the session
                while await master.store.get_session("agui-i6") is None:
                    await asyncio.sleep(0.05)
            async with Edge(master, "agui-i6") as edge:
                await edge.client.user_message("start")
                await edge.wait_type("agent.text.delta")
                first.send_signal(signal.SIGKILL)
                await first.wait()
                # §7.8.1: the master finalizes the open block and turn with synthetic frames.
                await edge.wait(
                    lambda fs: any(f.type == "session.turn.end" and f.synthetic for f in fs)
                )
                second = await _spawn_bridge(master, agent, state)
                try:
                    # §7.8.3: the client's history retracts them; the lost run then ends cleanly.
                    await edge.wait_type("session.history")
                    await edge.wait(
                        lambda fs: any(f.type == "session.turn.end" and not f.synthetic for f in fs)
                    )
                    await edge.wait_type("session.usage")
                    await edge.client.user_message("again")
                    await edge.wait_type("session.usage", 2)
                finally:
                    second.send_signal(signal.SIGTERM)
                    await asyncio.wait_for(second.wait(), 30)
        finally:
            if first.returncode is None:
                first.kill()
                await first.wait()
    history = next(f for f in edge.frames if f.type == "session.history")
    assert history.sender is not None
    assert history.sender.role == "client"
    real_ends = [
        p
        for f, p in zip(edge.frames, _all_payloads(edge), strict=True)
        if f.type == "session.turn.end" and not f.synthetic
    ]
    assert [p["stop_reason"] for p in real_ends] == ["error", "end_turn"]
    errors = _payloads(edge, "session.error")
    assert errors[0]["error_code"] == "agui_bridge_restarted"
    assert all(h.get("X-Agent-Key") == "k-123" for h in agent.headers)
    session = master.hub.sessions["agui-i6"]
    assert session.state.turn_id is None
    assert not session.state.finalized
    await validate_sequence(edge.frames, tmp_path)


def _all_payloads(edge: Edge) -> list[dict[str, Any]]:
    return [codec.decode_object(codec.encode(f)).get("payload", {}) for f in edge.frames]  # type: ignore[arg-type]


async def test_bridge_command_line_needs_a_credential(tmp_path: Path) -> None:
    """``rawp bridge ag-ui`` without any credential exits 2 with a message, no traceback."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAWP_TOKEN", "RAWP_API_KEY")}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rawp.cli",
        "bridge",
        "ag-ui",
        "--agent-url",
        "http://127.0.0.1:9/agent",
        "--session",
        "s",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2
    assert err.decode() == (
        "rawp bridge ag-ui: needs --token (or $RAWP_TOKEN or $RAWP_API_KEY) "
        "(see rawp bridge ag-ui --help)\n"
    )


async def test_agui_frontend_to_agui_agent_through_the_relay(
    master: Master, node_harness: Path, tmp_path: Path
) -> None:
    """HttpAgent → relay egress → RAWP session → bridge → AG-UI agent, and all the way back."""
    async with scripted_agent() as agent:
        agent.scripts.append(_full_run())
        async with library_bridge(master, "agui-i7", agent):
            scenario = {
                "url": f"{master.http_url}/v1/sessions/agui-i7/ag-ui",
                "token": API_KEY,
                "threadId": "ui-thread",
                "steps": [{"kind": "run", "id": "ui-1", "text": "Weather in Oslo?"}],
            }
            report = await run_harness(node_harness, scenario, tmp_path)
    assert report["errors"] == [], report["stderr"]
    messages = report["messages"]
    assert [(m["id"], m["role"]) for m in messages] == [
        ("ui-1", "user"),
        ("r1", "reasoning"),
        ("m1", "assistant"),
        ("c1", "assistant"),
        (messages[4]["id"], "tool"),
    ]
    assert messages[2]["content"] == "Hello there"
    assert messages[3]["toolCalls"][0]["function"] == {
        "name": "weather",
        "arguments": '{"city":"Oslo"}',
    }
    assert messages[4]["content"] == "rain"
    assert agent.inputs[0].messages[0].id == "ui-1"
    finished = report["runs"][0]["events"][-1]
    assert finished["usage"] == [{"inputTokens": 7, "outputTokens": 9, "reasoningTokens": 3}]
