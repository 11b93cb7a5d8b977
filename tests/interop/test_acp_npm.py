"""ACP with the official npm package ``@agentclientprotocol/sdk`` (2.x): its client side (an
editor) drives ``rawp acp attach`` over the child's stdio, and a scripted agent on its agent
side runs behind ``rawp bridge acp``. A real master, real subprocesses; every RAWP edge's
frames pass ``rawp validate --sequence``. Skipped (loudly) only when node is missing."""

from __future__ import annotations

import sys
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
    validate_sequence,
)
from tests.interop.conftest import run_harness

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
