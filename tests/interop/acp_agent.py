"""A scripted ACP agent on the official ``agent-client-protocol`` package (``acp.run_agent``).

Run as ``python -m tests.interop.acp_agent [--record FILE] [--sessions FILE] [--load]
[--no-init]``. What a prompt does is named by its text's first word (see ``Scripted.prompt``);
every request it receives is appended to ``--record`` as one JSON line, so a test can read what
the bridge sent. ``--load`` advertises ``loadSession`` (sessions are kept in ``--sessions``
across processes); ``--no-init`` never answers ``initialize``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    plan_entry,
    run_agent,
    start_tool_call,
    text_block,
    tool_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_plan,
    update_tool_call,
    update_user_message_text,
)
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    AvailableCommand,
    AvailableCommandsUpdate,
    CurrentModeUpdate,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    SessionInfoUpdate,
    ToolCallUpdate,
    Usage,
    UsageUpdate,
)


def _line(obj: Any) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def _raw(fd: int, data: bytes) -> None:
    """Write ``data`` whole, now (the event loop's pipe is non-blocking: block it meanwhile, so
    nothing the connection writes lands inside it)."""
    os.set_blocking(fd, True)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.set_blocking(fd, False)


class Scripted:
    """The agent (the ACP ``Agent`` interface)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.conn: Client | None = None
        self.cancelled = asyncio.Event()

    def on_connect(self, conn: Client) -> None:
        self.conn = conn

    def record(self, method: str, **params: Any) -> None:
        if self.args.record:
            with open(self.args.record, "a") as f:
                f.write(json.dumps({"method": method, "params": params}, default=str) + "\n")

    def keep(self, sessions: dict[str, list[str]]) -> None:
        with open(self.args.sessions, "w") as f:
            f.write(json.dumps(sessions))

    def sessions(self) -> dict[str, list[str]]:
        path = self.args.sessions
        if path and Path(path).exists():
            data: dict[str, list[str]] = json.loads(Path(path).read_text())
            return data
        return {}

    async def initialize(
        self, protocol_version: int, client_capabilities: Any = None, **kw: Any
    ) -> InitializeResponse:
        self.record(
            "initialize",
            protocol_version=protocol_version,
            client_capabilities=client_capabilities.model_dump(by_alias=True, exclude_none=True)
            if client_capabilities
            else None,
        )
        if self.args.no_init:
            await asyncio.Event().wait()
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(load_session=self.args.load),
        )

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kw: Any) -> NewSessionResponse:
        session_id = f"agent-{uuid.uuid4().hex[:8]}"
        self.record("session/new", cwd=cwd, session_id=session_id)
        if self.args.sessions:
            sessions = self.sessions()
            sessions[session_id] = []
            self.keep(sessions)
        assert self.conn is not None
        commands = AvailableCommandsUpdate(
            session_update="available_commands_update",
            available_commands=[AvailableCommand(name="plan", description="make a plan")],
        )
        if self.args.early:  # announced before session/new's answer names the session
            await self.conn.session_update(session_id, commands)
        else:
            asyncio.get_running_loop().call_later(
                0.05,
                lambda: asyncio.ensure_future(self.conn.session_update(session_id, commands)),  # type: ignore[union-attr]
            )
        return NewSessionResponse(session_id=session_id)

    async def load_session(
        self, cwd: str, session_id: str, mcp_servers: Any = None, **kw: Any
    ) -> LoadSessionResponse | None:
        self.record("session/load", cwd=cwd, session_id=session_id)
        sessions = self.sessions()
        if session_id not in sessions:
            from acp import RequestError

            raise RequestError.invalid_params({"sessionId": "unknown"})
        assert self.conn is not None
        for text in sessions[session_id]:  # the replay a loading client must not relay again
            await self.conn.session_update(session_id, update_user_message_text(text))
            await self.conn.session_update(
                session_id, update_agent_message_text(f"replayed {text}")
            )
        return LoadSessionResponse()

    async def cancel(self, session_id: str, **kw: Any) -> None:
        self.record("session/cancel", session_id=session_id)
        self.cancelled.set()

    async def prompt(self, prompt: list[Any], session_id: str, **kw: Any) -> PromptResponse:
        text = " ".join(getattr(b, "text", "") for b in prompt)
        self.record("session/prompt", session_id=session_id, text=text)
        if self.args.sessions:
            sessions = self.sessions()
            sessions.setdefault(session_id, []).append(text)
            self.keep(sessions)
        self.cancelled.clear()
        word = text.split()[0] if text.split() else ""
        handler = getattr(self, f"do_{word.replace('-', '_')}", None)
        if handler is None:
            return await self.do_echo(session_id, text)
        result: PromptResponse = await handler(session_id, text)
        return result

    async def send(self, session_id: str, update: Any) -> None:
        assert self.conn is not None
        await self.conn.session_update(session_id, update)

    async def do_echo(self, sid: str, text: str) -> PromptResponse:
        await self.send(sid, update_agent_message_text(f"echo: {text}"))
        return PromptResponse(stop_reason="end_turn")

    async def do_full(self, sid: str, text: str) -> PromptResponse:
        await self.send(sid, update_agent_thought_text("thinking about it"))
        await self.send(sid, update_agent_message_text("Hello "))
        await self.send(sid, update_agent_message_text("there"))
        await self.send(
            sid,
            start_tool_call(
                "call-1",
                "Read notes.md",
                kind="read",
                status="pending",
                raw_input={"path": "notes.md"},
            ),
        )
        await self.send(
            sid,
            update_tool_call(
                "call-1", status="in_progress", content=[tool_content(text_block("reading"))]
            ),
        )
        await self.send(
            sid, update_tool_call("call-1", status="completed", raw_output={"lines": 3})
        )
        await self.send(
            sid,
            update_plan([plan_entry("read the notes", status="completed"), plan_entry("answer")]),
        )
        await self.send(
            sid, CurrentModeUpdate(session_update="current_mode_update", current_mode_id="code")
        )
        await self.send(
            sid, SessionInfoUpdate(session_update="session_info_update", title="Notes review")
        )
        await self.send(sid, UsageUpdate(session_update="usage_update", used=1200, size=200000))
        await self.send(sid, update_agent_message_text("Done."))
        return PromptResponse(
            stop_reason="end_turn",
            usage=Usage(total_tokens=30, input_tokens=12, output_tokens=18, thought_tokens=4),
        )

    async def ask(self, sid: str) -> Any:
        assert self.conn is not None
        await self.send(
            sid, start_tool_call("call-p", "Run rm -rf build", kind="execute", status="pending")
        )
        return await self.conn.request_permission(
            session_id=sid,
            tool_call=ToolCallUpdate(tool_call_id="call-p", title="Run rm -rf build"),
            options=[
                PermissionOption(option_id="allow", name="Allow once", kind="allow_once"),
                PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
            ],
        )

    async def do_permission(self, sid: str, text: str) -> PromptResponse:
        answer = await self.ask(sid)
        outcome = answer.outcome
        said = f"selected {outcome.option_id}" if outcome.outcome == "selected" else "cancelled"
        self.record("permission_answer", outcome=said)
        await self.send(
            sid,
            update_tool_call(
                "call-p", status="completed" if "allow" in said else "failed", raw_output=said
            ),
        )
        await self.send(sid, update_agent_message_text(said))
        return PromptResponse(stop_reason="cancelled" if said == "cancelled" else "end_turn")

    async def ask_refused(self, sid: str, options: list[PermissionOption]) -> PromptResponse:
        """A permission request the relay should refuse: the refusal recorded, the turn goes
        on (a message, a normal end)."""
        from acp import RequestError

        assert self.conn is not None
        try:
            answer = await self.conn.request_permission(
                session_id=sid,
                tool_call=ToolCallUpdate(tool_call_id="call-x", title="Odd request"),
                options=options,
            )
            said = f"answered {answer.outcome.outcome}"
        except RequestError as exc:
            said = f"refused {exc.code}: {exc}"
        self.record("permission_answer", outcome=said)
        await self.send(sid, update_agent_message_text("went on"))
        return PromptResponse(stop_reason="end_turn")

    async def do_permission_many(self, sid: str, text: str) -> PromptResponse:
        options = [
            PermissionOption(option_id=f"o{i}", name=f"Option {i}", kind="allow_once")
            for i in range(10_000)
        ]
        return await self.ask_refused(sid, options)

    async def do_permission_name(self, sid: str, text: str) -> PromptResponse:
        options = [
            PermissionOption(option_id="allow", name="A" * (2 << 20), kind="allow_once"),
            PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
        ]
        return await self.ask_refused(sid, options)

    async def do_permission_id(self, sid: str, text: str) -> PromptResponse:
        options = [
            PermissionOption(option_id="i" * 5000, name="Allow", kind="allow_once"),
            PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
        ]
        return await self.ask_refused(sid, options)

    async def do_permission_wide(self, sid: str, text: str) -> PromptResponse:
        options = [
            PermissionOption(option_id=f"o{i}", name=f"{i} " + "w" * 900, kind="allow_once")
            for i in range(40)
        ]
        return await self.ask_refused(sid, options)

    async def do_withdraw(self, sid: str, text: str) -> PromptResponse:
        asking = asyncio.ensure_future(self.ask(sid))
        await asyncio.sleep(0.3)
        asking.cancel()  # the agent moves on without an answer
        await self.send(sid, update_tool_call("call-p", status="failed", raw_output="skipped"))
        return PromptResponse(stop_reason="end_turn")

    async def do_retract(self, sid: str, text: str) -> PromptResponse:
        # JSON-RPC's $/cancel_request for our own permission request (the package has no
        # helper for it: its connection's next id and raw notification, test-only).
        raw: Any = self.conn._conn  # type: ignore[union-attr]
        asking = asyncio.ensure_future(self.ask(sid))
        await asyncio.sleep(0.3)
        await raw.send_notification("$/cancel_request", {"requestId": raw._next_request_id - 1})
        answer = await asking
        self.record("permission_answer", outcome=answer.outcome.outcome)
        await self.send(sid, update_tool_call("call-p", status="failed", raw_output="retracted"))
        return PromptResponse(stop_reason="end_turn")

    async def do_cancel(self, sid: str, text: str) -> PromptResponse:
        await self.send(sid, update_agent_message_text("working"))
        await self.cancelled.wait()
        return PromptResponse(stop_reason="cancelled")

    async def do_hang(self, sid: str, text: str) -> PromptResponse:
        await self.send(sid, update_agent_message_text("working"))
        await asyncio.Event().wait()
        raise AssertionError

    async def do_crash(self, sid: str, text: str) -> PromptResponse:
        await self.send(sid, update_agent_message_text("half a"))
        await self.send(
            sid, start_tool_call("call-c", "Build", kind="execute", status="in_progress")
        )
        await asyncio.sleep(0.2)
        _raw(2, b"boom: the agent fell over\n")
        os._exit(3)

    async def do_fail(self, sid: str, text: str) -> PromptResponse:
        from acp import RequestError

        raise RequestError.internal_error({"details": "model unavailable"})

    async def do_garbage(self, sid: str, text: str) -> PromptResponse:
        await asyncio.sleep(0.05)
        for raw in (
            b"this is not json\n",
            b"[1, 2, 3]\n",
            b'{"jsonrpc":"2.0","method":5}\n',
            b'{"jsonrpc":"2.0","id":[1],"result":{}}\n',
            b"\xff\xfe\n",
            b'{"a":' * 5000 + b"\n",
            _line({"jsonrpc": "2.0", "id": 0, "result": {"reused": True}}),
            _line(
                {
                    "jsonrpc": "2.0",
                    "method": "session/update",
                    "params": {
                        "sessionId": "someone-else",
                        "update": {
                            "sessionUpdate": "agent_message_chunk",
                            "content": {"type": "text", "text": "not yours"},
                        },
                    },
                }
            ),
        ):
            _raw(1, raw)
        await asyncio.sleep(0.05)
        await self.send(sid, update_agent_message_text("after garbage"))
        return PromptResponse(stop_reason="end_turn")

    async def do_big(self, sid: str, text: str) -> PromptResponse:
        update = {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "x" * (50 << 20)},
        }
        await asyncio.sleep(0.05)
        _raw(
            1,
            _line(
                {
                    "jsonrpc": "2.0",
                    "method": "session/update",
                    "params": {"sessionId": sid, "update": update},
                }
            ),
        )
        await self.send(sid, update_agent_message_text("after big"))
        return PromptResponse(stop_reason="end_turn")

    async def do_split(self, sid: str, text: str) -> PromptResponse:
        update = {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "split line"},
        }
        data = _line(
            {
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {"sessionId": sid, "update": update},
            }
        )
        await asyncio.sleep(0.05)
        _raw(1, data[:20])
        await asyncio.sleep(0.2)
        _raw(1, data[20:])
        return PromptResponse(stop_reason="end_turn")

    async def do_stderr(self, sid: str, text: str) -> PromptResponse:
        line = b"noise " * 30 + b"\n"
        for _ in range(200):
            _raw(2, line * 100)  # about 3.6 MB in all, far past a pipe's buffer
        await self.send(sid, update_agent_message_text("after flood"))
        return PromptResponse(stop_reason="end_turn")

    async def do_exit(self, sid: str, text: str) -> PromptResponse:
        await self.send(sid, update_agent_message_text("bye"))
        asyncio.get_running_loop().call_later(0.3, os._exit, 0)  # after the answer, idle
        return PromptResponse(stop_reason="end_turn")

    async def do_costly(self, sid: str, text: str) -> PromptResponse:
        # "costly WHAT": a usage_update whose cost is WHAT, written raw (NaN and Infinity are
        # what Python's json writes for them; no SDK would send them on purpose).
        cost = {
            "nan": b'{"amount": NaN, "currency": "USD"}',
            "inf": b'{"amount": Infinity, "currency": "USD"}',
            "big": b'{"amount": 1e400, "currency": "USD"}',
            "newline": b'{"amount": 2.5, "currency": "USD\\n\\u001b[31mrm -rf"}',
            "long": b'{"amount": 2.5, "currency": "' + b"X" * 5000 + b'"}',
            "ok": b'{"amount": 0.25, "currency": "EUR"}',
        }[text.split()[1]]
        line = (
            b'{"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": '
            + json.dumps(sid).encode()
            + b', "update": {"sessionUpdate": "usage_update", "used": 10, "size": 100, '
            + b'"cost": '
            + cost
            + b"}}}\n"
        )
        await asyncio.sleep(0.05)
        _raw(1, line)
        await self.send(sid, update_agent_message_text(f"cost {text.split()[1]}"))
        return PromptResponse(stop_reason="end_turn")

    async def do_kinds(self, sid: str, text: str) -> PromptResponse:
        """Every update kind and shape the "full" turn leaves out, in one turn."""
        from acp import schema

        def chunk(kind: str, content: dict[str, Any], message_id: str | None = None) -> Any:
            model = {
                "user_message_chunk": schema.UserMessageChunk,
                "agent_message_chunk": schema.AgentMessageChunk,
                "agent_thought_chunk": schema.AgentThoughtChunk,
            }[kind]
            update = {"sessionUpdate": kind, "content": content}
            if message_id is not None:
                update["messageId"] = message_id
            return model.model_validate(update)

        for update in (
            chunk("user_message_chunk", {"type": "text", "text": "what the user said"}),
            chunk("agent_message_chunk", {"type": "text", "text": "one "}, "m-1"),
            chunk("agent_message_chunk", {"type": "text", "text": "block"}, "m-1"),
            chunk("agent_message_chunk", {"type": "text", "text": "next"}, "m-2"),
            chunk(
                "agent_message_chunk", {"type": "image", "data": "iVBO", "mimeType": "image/png"}
            ),
            chunk("agent_message_chunk", {"type": "text", "text": "y" * 250_000}),
            chunk(
                "agent_thought_chunk", {"type": "audio", "data": "UklG", "mimeType": "audio/wav"}
            ),
            start_tool_call("t-str", "Run ls", kind="execute", raw_input="ls -la"),
            update_tool_call("t-str", status="completed", raw_output="a b c"),
            update_tool_call(
                "t-new",
                title="Read gone.txt",
                status="failed",
                content=[tool_content(text_block("no such file"))],
            ),
            schema.AgentPlanContentUpdate.model_validate(
                {
                    "sessionUpdate": "plan_update",
                    "plan": {"type": "items", "planId": "p1", "entries": []},
                }
            ),
            schema.AgentPlanRemovedUpdate(session_update="plan_removed", plan_id="p1"),
            schema.ConfigOptionUpdate.model_validate(
                {
                    "sessionUpdate": "config_option_update",
                    "configOptions": [
                        {
                            "type": "select",
                            "id": "model",
                            "name": "Model",
                            "currentValue": "fast",
                            "options": [{"value": "fast", "name": "Fast"}],
                        }
                    ],
                }
            ),
            SessionInfoUpdate(
                session_update="session_info_update", title="Bad\x1b[31m " + "t" * 300
            ),
            SessionInfoUpdate(
                session_update="session_info_update", updated_at="2026-12-08T00:00:00Z"
            ),
        ):
            await self.send(sid, update)
        return PromptResponse(
            stop_reason="end_turn",
            usage=Usage(
                total_tokens=9,
                input_tokens=5,
                output_tokens=4,
                cached_read_tokens=3,
                cached_write_tokens=2,
            ),
        )

    async def do_stop(self, sid: str, text: str) -> PromptResponse:
        await self.send(sid, update_agent_message_text("stopping"))
        return PromptResponse(stop_reason=text.split()[1])  # type: ignore[arg-type]

    async def do_fs(self, sid: str, text: str) -> PromptResponse:
        """Asks for what the bridge does not advertise: every call must be refused."""
        from acp import RequestError

        conn = self.conn
        assert conn is not None
        for name, call in (
            (
                "fs/read_text_file",
                lambda: conn.read_text_file(path="/etc/hostname", session_id=sid),
            ),
            (
                "fs/write_text_file",
                lambda: conn.write_text_file(path="/tmp/x", content="x", session_id=sid),
            ),
            ("terminal/create", lambda: conn.create_terminal(command="ls", session_id=sid)),
        ):
            try:
                await call()
                said = "allowed"
            except RequestError as exc:
                said = f"refused {exc.code}"
            except Exception as exc:  # what a refusal must not be
                said = f"failed {type(exc).__name__}: {exc}"
            self.record("client_call", call=name, outcome=said)
        await self.send(sid, update_agent_message_text("did it myself"))
        return PromptResponse(stop_reason="end_turn")

    async def do_late(self, sid: str, text: str) -> PromptResponse:
        """Asks permission after its turn ended: answered cancelled at once."""

        async def later() -> None:
            await asyncio.sleep(0.2)
            answer = await self.ask(sid)
            self.record("permission_answer", outcome=answer.outcome.outcome)

        asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(later()))
        await self.send(sid, update_agent_message_text("done early"))
        return PromptResponse(stop_reason="end_turn")

    async def do_refuse(self, sid: str, text: str) -> PromptResponse:
        await self.send(sid, update_agent_message_text("no"))
        return PromptResponse(stop_reason="refusal")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--record")
    parser.add_argument("--sessions")
    parser.add_argument("--load", action="store_true")
    parser.add_argument("--no-init", action="store_true")
    parser.add_argument("--early", action="store_true")
    args = parser.parse_args()
    asyncio.run(run_agent(Scripted(args)))  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
