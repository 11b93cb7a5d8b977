"""What the AG-UI ``POST`` takes (relay/http/agui.py; docs/ag-ui.md "Input and its bounds").

The whole ``RunAgentInput`` is read (up to its limit, 413 past it) whatever chunks it comes
in, it must be declared JSON (415), it is taken all or nothing, and the runs it leaves open
for a session whose agent never comes are bounded in number and in time. Inputs are built
with the ``ag-ui-protocol`` package, and the long chat is sent by ``@ag-ui/client`` itself.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from ag_ui.core import AssistantMessage, ResumeEntry, RunAgentInput, UserMessage

from relay.http import agui
from relay.server import Master
from tests.interop.conftest import API_KEY, run_harness
from tests.interop.test_agui_egress import _answer, _scenario, rawp_agent
from tests.support.wire import Peer

pytestmark = pytest.mark.timeout(120)

_AUTH = {"Authorization": f"Bearer {API_KEY}", "Accept": "text/event-stream"}


def _input(messages: list[Any], resume: list[ResumeEntry] | None = None) -> bytes:
    """A RunAgentInput as ``@ag-ui/client`` sends it (camelCase JSON)."""
    run = RunAgentInput(
        thread_id="t",
        run_id="r",
        state={},
        messages=messages,
        tools=[],
        context=[],
        forwarded_props={},
        resume=resume,
    )
    return run.model_dump_json(by_alias=True, exclude_none=True).encode()


def _long_chat(count: int, size: int) -> list[Any]:
    """``count`` earlier assistant messages and one new user message at the end."""
    earlier: list[Any] = [
        AssistantMessage(id=f"h-{i}", role="assistant", content="x" * size) for i in range(count)
    ]
    return [*earlier, UserMessage(id="u-new", role="user", content="and now?")]


async def _create(master: Master, session_id: str) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{master.http_url}/v1/sessions",
            json={"session_id": session_id},
            headers={"Authorization": f"Bearer {API_KEY}"},
        ) as r,
    ):
        assert r.status == 201, await r.text()


async def _post(
    master: Master, session_id: str, body: bytes, content_type: str | None = "application/json"
) -> tuple[int, Any]:
    """POST ``body``; (status, the problem body) — a stream is closed as soon as it starts."""
    headers = dict(_AUTH)
    if content_type is not None:
        headers["Content-Type"] = content_type
    url = f"{master.http_url}/v1/sessions/{session_id}/ag-ui"
    async with aiohttp.ClientSession() as http, http.post(url, data=body, headers=headers) as r:
        if r.content_type == "text/event-stream":
            return r.status, None
        return r.status, await r.json(content_type=None)


async def _user_messages(master: Master, session_id: str) -> list[str]:
    entries = await master.store.read(session_id)
    return [json.loads(e.data)["message_id"] for e in entries if e.type == "user.message"]


async def test_a_long_chat_is_read_whole(master: Master) -> None:
    """A valid input of 8,000 messages (~420 KB, many TCP chunks) is taken, not cut at 64 KB."""
    await _create(master, "agui-long")
    body = _input(_long_chat(8000, 40))
    assert len(body) > 400_000
    status, problem = await _post(master, "agui-long", body)
    assert status == 200, problem
    assert await _user_messages(master, "agui-long") == ["u-new"]


async def test_the_real_client_sends_a_long_chat(
    master: Master, node_harness: Path, tmp_path: Path
) -> None:
    """``@ag-ui/client`` with 6,000 earlier messages (~330 KB) runs like a short chat."""
    async with rawp_agent(master, "agui-long-js", _answer):
        steps = [
            {"kind": "history", "count": 6000, "size": 40},
            {"kind": "run", "id": "u-1", "text": "hello"},
        ]
        report = await run_harness(node_harness, _scenario(master, "agui-long-js", steps), tmp_path)
    assert report["errors"] == [], report["stderr"]
    run = report["runs"][1]
    assert run["events"][0]["type"] == "RUN_STARTED"
    assert run["events"][-1]["type"] == "RUN_FINISHED"
    assert await _user_messages(master, "agui-long-js") == ["u-1"]


async def test_an_input_past_the_limit_is_413(master: Master) -> None:
    """An input over the documented 4 MiB is refused 413 ``too_large``, nothing appended."""
    await _create(master, "agui-huge")
    body = _input(_long_chat(1, agui.MAX_INPUT_BYTES))
    status, problem = await _post(master, "agui-huge", body)
    assert (status, problem["code"]) == (413, "too_large")
    assert await _user_messages(master, "agui-huge") == []


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
async def test_a_body_not_declared_json_is_415(master: Master, content_type: str | None) -> None:
    """A valid input sent as text/plain, a form or with no type is refused 415, not taken."""
    await _create(master, "agui-type")
    body = _input([UserMessage(id="u-1", role="user", content="hi")])
    status, problem = await _post(master, "agui-type", body, content_type)
    assert (status, problem["code"]) == (415, "unsupported_media_type")
    assert await _user_messages(master, "agui-type") == []


async def test_one_bad_message_appends_none(master: Master) -> None:
    """Two valid messages before one with an over-long id: 400 and none of them appended."""
    await _create(master, "agui-atomic")
    messages: list[Any] = [
        UserMessage(id="u-1", role="user", content="one"),
        UserMessage(id="u-2", role="user", content="two"),
        UserMessage(id="u-" + "x" * 300, role="user", content="three"),
    ]
    status, problem = await _post(master, "agui-atomic", _input(messages))
    assert (status, problem["code"]) == (400, "invalid_body")
    assert await _user_messages(master, "agui-atomic") == []


async def test_an_unknown_resume_appends_no_message(master: Master) -> None:
    """A new message beside a resume for no pending interrupt: 409, the message not appended."""
    await _create(master, "agui-resume")
    messages: list[Any] = [UserMessage(id="u-1", role="user", content="one")]
    resume = [ResumeEntry(interrupt_id="nope", status="resolved", payload={"ok": True})]
    status, problem = await _post(master, "agui-resume", _input(messages, resume))
    assert (status, problem["code"]) == (409, "interaction_state")
    assert await _user_messages(master, "agui-resume") == []


async def test_runs_waiting_for_an_absent_agent_are_bounded(master: Master) -> None:
    """Past the per-session bound, a run for a session whose agent never comes is 429."""
    await _create(master, "agui-many")
    url = f"{master.http_url}/v1/sessions/agui-many/ag-ui"
    headers = {**_AUTH, "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as http:
        held = []
        for i in range(agui.RUNS_PER_SESSION):
            body = _input([UserMessage(id=f"u-{i}", role="user", content="hi")])
            response = await http.post(url, data=body, headers=headers)
            assert response.status == 200
            held.append(response)
        body = _input([UserMessage(id="u-last", role="user", content="hi")])
        async with http.post(url, data=body, headers=headers) as refused:
            assert refused.status == 429
            assert (await refused.json(content_type=None))["code"] == "too_many_runs"
        for response in held:
            response.close()
    assert "u-last" not in await _user_messages(master, "agui-many")


async def test_a_run_nobody_starts_ends_with_run_error(
    master: Master, node_harness: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no agent, the run ends RUN_ERROR ``agent_absent``; the message stays in the log."""
    monkeypatch.setattr(agui, "RUN_START_TIMEOUT_S", 1.0)
    await _create(master, "agui-absent")
    steps = [{"kind": "run", "id": "u-1", "text": "anyone?"}]
    async with asyncio.timeout(30):
        report = await run_harness(node_harness, _scenario(master, "agui-absent", steps), tmp_path)
    types = [e["type"] for e in report["runs"][0]["events"]]
    assert report["errors"] == [], report["stderr"]  # the client takes RUN_ERROR as the run
    assert types == ["RUN_ERROR"]
    assert report["runs"][0]["events"][-1]["code"] == "agent_absent"
    assert await _user_messages(master, "agui-absent") == ["u-1"]


async def test_a_message_id_another_frame_holds_is_409(master: Master) -> None:
    """A user message under the id of a frame that is no user message: 409, none appended."""
    client = await Peer.open(master.ws_url, "agui-taken", token=API_KEY, create=True)
    await client.send("agent.state", {"state": "idle"}, message_id="taken")
    async with asyncio.timeout(10):
        while await master.store.message_seq("agui-taken", "taken") is None:
            await asyncio.sleep(0.02)
    messages: list[Any] = [
        UserMessage(id="u-1", role="user", content="one"),
        UserMessage(id="taken", role="user", content="two"),
    ]
    status, problem = await _post(master, "agui-taken", _input(messages))
    assert (status, problem["code"]) == (409, "message_id_conflict")
    assert await _user_messages(master, "agui-taken") == []
    await client.close()
