"""ACP with the official npm package ``@agentclientprotocol/sdk`` (2.x): its client side (an
editor) drives ``rawp acp attach`` over the child's stdio, and a scripted agent on its agent
side runs behind ``rawp bridge acp``. A real master, real subprocesses; every RAWP edge's
frames pass ``rawp validate --sequence``. Skipped (loudly) only when node is missing."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.interop.acp_support import (
    Edge,
    agent_command,
    library_bridge,
    payloads,
    records,
    validate_sequence,
)
from tests.interop.conftest import run_harness
from tests.support.masters import MasterProcess

pytestmark = pytest.mark.timeout(180)
ROOT = Path(__file__).resolve().parents[2]


def _editor(master: Master, session: str, tmp_path: Path, **scenario: Any) -> dict[str, Any]:
    """The npm client's scenario: ``rawp acp attach SESSION`` as its agent."""
    return {
        "command": [sys.executable, "-m", "rawp.cli", "acp", "attach", session],
        "env": {"RAWP_API_KEY": API_KEY, "RAWP_WS_URL": master.ws_url, "PYTHONPATH": str(ROOT)},
        "session": session,
        "cwd": str(tmp_path),
        "choose": None,
        "prompts": [],
        **scenario,
    }


def _texts(updates: list[dict[str, Any]], kind: str = "agent_message_chunk") -> list[str]:
    return [u["content"]["text"] for u in updates if u["sessionUpdate"] == kind]


async def test_npm_client_loads_prompts_and_answers_a_permission(
    master: Master, acp_npm: Path, tmp_path: Path
) -> None:
    """The npm client side: initialize, session/load replays the log, a prompt's turn streams
    back with its stop reason, the agent's permission request is answered by the editor."""
    async with (
        library_bridge(master, "acp-n1", agent_command(tmp_path)),
        Edge(master, "acp-n1") as edge,
    ):
        await edge.client.user_message("full please")
        await edge.wait_type("session.usage")
        scenario = _editor(
            master, "acp-n1", tmp_path, choose="allow", prompts=["permission", "from node"]
        )
        report = await run_harness(acp_npm, scenario, tmp_path, "client.mjs")
        await edge.wait_type("session.usage", 3)
    assert report["errors"] == [], report["stderr"]
    assert report["initialize"]["agentCapabilities"]["loadSession"] is True
    assert report["initialize"]["agentInfo"]["name"] == "rawp-acp-attach"
    replayed = report["updates"][: report["replayed"]]
    assert [
        u["sessionUpdate"] for u in replayed if u["sessionUpdate"] != "available_commands_update"
    ] == [
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
    assert _texts(replayed, "user_message_chunk") == ["full please"]
    assert _texts(replayed) == ["Hello ", "there", "Done."]
    live = report["updates"][report["replayed"] :]
    assert _texts(live) == ["selected allow", "echo: from node"]
    assert report["stops"] == ["end_turn", "end_turn"]
    ((asked),) = report["asked"]
    assert asked["toolCall"]["toolCallId"] == "call-p"
    assert [(o["optionId"], o["name"], o["kind"]) for o in asked["options"]] == [
        ("allow", "Allow once", "allow_once"),
        ("reject", "Reject", "reject_once"),
    ]
    assert records(tmp_path, "permission_answer")[0]["params"]["outcome"] == "selected allow"
    assert [p["text"] for p in payloads(edge, "user.message")] == ["permission", "from node"]
    await validate_sequence(edge.frames, tmp_path)


async def test_npm_agent_behind_the_bridge_asks_an_npm_editor(
    master: Master, acp_npm: Path, tmp_path: Path
) -> None:
    """Both npm sides: an agent on its agent side behind the bridge streams, starts a tool call
    and asks permission; the npm editor attached through ``rawp acp attach`` answers it."""
    command = ["node", str(acp_npm / "agent.mjs")]
    async with (
        library_bridge(master, "acp-n2", command),
        Edge(master, "acp-n2") as edge,
    ):
        await edge.wait_type("acp.session")
        scenario = _editor(master, "acp-n2", tmp_path, choose="no", prompts=["ask now", "hi"])
        report = await run_harness(acp_npm, scenario, tmp_path, "client.mjs")
        await edge.wait_type("session.usage", 2)
    assert report["errors"] == [], report["stderr"]
    assert report["stops"] == ["end_turn", "end_turn"]
    assert _texts(report["updates"]) == ["Let me check.", "chosen: no", "npm echo: hi"]
    ((asked),) = report["asked"]
    assert asked["toolCall"]["toolCallId"] == "npm-call"
    assert [o["optionId"] for o in asked["options"]] == ["yes", "no"]
    (session,) = payloads(edge, "acp.session")
    assert session["agentInfo"]["name"] == "npm-scripted-agent"
    assert payloads(edge, "tool.invoke.request") == [
        {"call_id": "npm-call", "tool_name": "Delete build/", "input": {"path": "build"}}
    ]
    (ask,) = payloads(edge, "agent.interaction.request")
    assert [o["value"] for o in ask["options"]] == ["yes", "no"]
    assert payloads(edge, "control.interaction.response")[0]["response"] == "no"
    assert payloads(edge, "tool.invoke.result") == [
        {"call_id": "npm-call", "status": "error", "output": {"chosen": "no"}}
    ]
    await validate_sequence(edge.frames, tmp_path)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MasterProcess]:
    """A real ``rawp serve`` (memory store) for the module's all-subprocess tests."""
    master = MasterProcess(
        "acp-npm", "memory", api_key=API_KEY, log_dir=tmp_path_factory.mktemp("rawp-serve")
    )
    master.spawn()
    try:
        master.wait_ready()
        yield master
    finally:
        master.stop()


async def _session_exists(http_url: str, session: str) -> None:
    async with aiohttp.ClientSession() as http, asyncio.timeout(60):
        while True:
            got = await http.get(
                f"{http_url}/v1/sessions/{session}",
                headers={"Authorization": f"Bearer {API_KEY}"},
            )
            if got.status == 200:
                return
            await asyncio.sleep(0.1)


async def test_all_processes_rawp_serve_bridge_and_attach_with_both_npm_sides(
    served: MasterProcess, acp_npm: Path, tmp_path: Path
) -> None:
    """Nothing in the test's process but a RAWP edge: ``rawp serve``, ``rawp bridge acp --
    node agent.mjs`` (the npm agent side) and ``rawp acp attach`` under the npm client side;
    the editor's prompt and permission answer cross every process; SIGTERM stops the bridge
    cleanly."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAWP_TOKEN", "RAWP_API_KEY")}
    bridge = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rawp.cli",
        "bridge",
        "acp",
        "--session",
        "acp-n3",
        "--",
        "node",
        str(acp_npm / "agent.mjs"),
        env={**env, "RAWP_API_KEY": API_KEY, "RAWP_WS_URL": served.ws_url},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        await _session_exists(served.http_url, "acp-n3")
        async with Edge(served, "acp-n3") as edge:  # type: ignore[arg-type]
            await edge.wait_type("acp.session")
            editor = _editor(served, "acp-n3", tmp_path, choose="yes", prompts=["ask it", "hi"])  # type: ignore[arg-type]
            report = await run_harness(acp_npm, editor, tmp_path, "client.mjs")
            await edge.wait_type("session.usage", 2)
    finally:
        if bridge.returncode is None:
            bridge.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(bridge.wait(), 30)
    assert code == 0
    assert report["errors"] == [], report["stderr"]
    assert report["stops"] == ["end_turn", "end_turn"]
    assert _texts(report["updates"]) == ["Let me check.", "chosen: yes", "npm echo: hi"]
    assert payloads(edge, "tool.invoke.result") == [
        {"call_id": "npm-call", "status": "ok", "output": {"chosen": "yes"}}
    ]
    assert [p["text"] for p in payloads(edge, "user.message")] == ["ask it", "hi"]
    await validate_sequence(edge.frames, tmp_path)
