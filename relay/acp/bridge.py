"""An ACP agent as a RAWP client: ``rawp bridge acp`` and :class:`AcpBridge` (notes §17.11).

The bridge starts the ACP agent (a command speaking JSON-RPC on stdio) and attaches to the
relay as the session's **client** with the Python client library, so drops, resume,
buffering and §7.8 finalization work as for any client. It ``initialize``\\ s the agent,
opens its session (``session/load`` of the session it opened before, when the agent can load
sessions, else ``session/new``), and then, one at a time, turns every ``user.message`` from the
edges into a ``session/prompt``; the agent's ``session/update``\\ s become frames as they
arrive (:class:`protocol.acp.AcpIngest`), a ``session/request_permission`` becomes a ``choice``
interaction the first edge answers, ``control.cancel`` becomes ``session/cancel``, and the
prompt's answer ends the turn. docs/acp.md has the whole table.

Never a half-open turn: an agent that exits mid-turn, answers the prompt with an error, or
does not stop within ``cancel_grace`` after ``session/cancel`` ends the turn (``error``, or
``cancelled``) with a ``session.error`` saying why; a hung or dead agent is stopped and started
again for the next prompt. An agent that does not answer ``initialize`` within
``init_timeout`` is stopped and reported. The bridge advertises no client capabilities (no
``fs/*``, no ``terminal/*``): the agent reads and writes files and runs commands itself.

With ``state_path`` the client is saved after every batch of frames, and the agent's session
id beside it (``STATE.acp.json``), so a bridge killed mid-turn and started again resumes the
same participant — the master's finalization is taken back by the client's history (§7.8.3) —
ends the turn nobody can finish (``acp_bridge_restarted``) and loads the agent's session.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import structlog
from acp import PROTOCOL_VERSION, RequestError, text_block
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    FileSystemCapabilities,
    Implementation,
    PermissionOption,
    PromptResponse,
    RequestPermissionResponse,
    ToolCallUpdate,
)

from protocol import codec
from protocol.acp import AcpIngest, AcpOp, SessionUpdate, answer_outcome, permission_problem
from protocol.client import ClientClosed, RawpClient
from protocol.errors import ProtocolError
from protocol.frames import (
    Cancel,
    ContextWindow,
    Frame,
    GenericFrame,
    History,
    InteractionResponse,
    SessionError,
    UserMessage,
)

from .link import DEFAULT_MAX_MESSAGE_BYTES
from .process import AgentProcess

__all__ = ["AcpBridge"]

_log = structlog.get_logger("rawp.acp")
_PROBLEM_EVERY_S: Final = 5.0


class _Permission:
    """One ``session/request_permission`` waiting for the edges."""

    def __init__(self, interaction_id: str, options: list[PermissionOption], rpc_id: Any) -> None:
        self.interaction_id = interaction_id
        self.options = options
        self.rpc_id = rpc_id
        self.answer: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self.refusal: str | None = None  # the master refused to relay the question


class _AgentClient:
    """What the agent may call on us (the ACP ``Client``): updates and permission requests.

    No ``fs/*`` or ``terminal/*``: they are not advertised, and answered "method not found".
    """

    def __init__(self, bridge: AcpBridge) -> None:
        self.bridge = bridge

    async def session_update(self, session_id: str, update: SessionUpdate, **_: Any) -> None:
        self.bridge.on_update(session_id, update)

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **_: Any
    ) -> RequestPermissionResponse:
        return await self.bridge.on_permission(session_id, tool_call, options)

    def _unsupported(self, name: str) -> RequestError:
        return RequestError.method_not_found(name)

    async def write_text_file(self, **_: Any) -> None:
        raise self._unsupported("fs/write_text_file")

    async def read_text_file(self, **_: Any) -> None:
        raise self._unsupported("fs/read_text_file")

    async def create_terminal(self, **_: Any) -> None:
        raise self._unsupported("terminal/create")

    async def terminal_output(self, **_: Any) -> None:
        raise self._unsupported("terminal/output")

    async def release_terminal(self, **_: Any) -> None:
        raise self._unsupported("terminal/release")

    async def wait_for_terminal_exit(self, **_: Any) -> None:
        raise self._unsupported("terminal/wait_for_exit")

    async def kill_terminal(self, **_: Any) -> None:
        raise self._unsupported("terminal/kill")


class AcpBridge:
    """One ACP agent (``command``) behind one RAWP session (see the module's docstring).

    ``ws_url`` is the master's WebSocket URL; ``token`` needs the client grant. ``cwd`` is the
    agent's working directory and the ``cwd`` of its ACP session (default: ours).
    """

    def __init__(
        self,
        ws_url: str,
        session_id: str,
        command: Sequence[str],
        *,
        token: str,
        state_path: str | os.PathLike[str] | None = None,
        create: bool = True,
        cwd: str | None = None,
        init_timeout: float = 30.0,
        cancel_grace: float = 10.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        if not command:
            raise ValueError("the agent's command is empty")
        self.session_id = session_id
        self.command = list(command)
        self.cwd = os.path.abspath(cwd or os.getcwd())
        self.init_timeout = init_timeout
        self.cancel_grace = cancel_grace
        self.max_message_bytes = max_message_bytes
        self.state_path = state_path
        self.client = RawpClient(
            ws_url,
            session_id,
            role="client",
            token=token,
            create=create or None,
            state_path=state_path,
        )
        self.agent: AgentProcess | None = None
        self.agent_session_id: str | None = self._load_agent_session()
        self.load_session = False
        self.prompts = 0
        self.ingest = AcpIngest()
        self._work: asyncio.Queue[UserMessage] = asyncio.Queue()
        self._cancel = asyncio.Event()
        self._closed = asyncio.Event()
        self._out: deque[AcpOp] = deque()
        self._out_ready = asyncio.Event()
        self._out_idle = asyncio.Event()
        self._out_idle.set()
        self._permissions: dict[str, _Permission] = {}
        self._problems = 0
        self._problem_at = 0.0
        self.ingest_loading = False
        self._early: list[tuple[str, SessionUpdate]] = []

    # --- lifecycle -----------------------------------------------------------------------

    async def run(self) -> None:
        """Attach and serve until the session ends or :meth:`close` is called."""
        await self.client.connect()
        state = self.client.view.state
        self.ingest = AcpIngest(set(state.closed_blocks) | set(state.call_ids))
        tasks = [
            asyncio.create_task(self._sender()),
            asyncio.create_task(self._worker()),
            asyncio.create_task(self._read()),
            asyncio.create_task(self._closed.wait()),
        ]
        try:
            self._end_orphaned_turn()
            await asyncio.wait(tasks[1:], return_when=asyncio.FIRST_COMPLETED)
            for task in tasks[1:3]:
                failure = task.exception() if task.done() else None
                if failure is not None and not isinstance(failure, ClientClosed):
                    raise failure
        finally:
            # The worker first: a turn cut short here is left to the session's finalization
            # (and ended by the next start, above), not ended as if the agent had failed.
            for task in tasks[1:3]:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            for permission in self._permissions.values():
                if not permission.answer.done():
                    permission.answer.set_result(None)
            if self.agent is not None:
                await self.agent.stop()
                self.agent = None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._flushed(), 5)
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await self.client.close()

    def close(self) -> None:
        """Stop serving (the current turn is left to the session's finalization)."""
        self._closed.set()

    # --- frames out, in order --------------------------------------------------------------

    def emit(self, ops: list[AcpOp]) -> None:
        """Queue ``ops`` to be sent in order (callers never interleave: this does not wait)."""
        if ops:
            self._out.extend(ops)
            self._out_idle.clear()
            self._out_ready.set()

    async def _flushed(self) -> None:
        await self._out_idle.wait()

    async def _sender(self) -> None:
        while True:
            await self._out_ready.wait()
            self._out_ready.clear()
            sent = False
            while self._out:
                op = self._out.popleft()
                try:
                    await self._post(op)
                    sent = True
                except ClientClosed:
                    raise
                except (ProtocolError, ValueError, TypeError) as exc:
                    _log.warning("frame_not_sent", kind=op.kind, error=str(exc)[:300])
                    if op.kind == "interaction_request":
                        self._not_asked(op.args["interaction_id"], str(exc)[:300])
            if sent and self.state_path is not None:
                with contextlib.suppress(OSError):
                    self.client.save()
            if not self._out:
                self._out_idle.set()

    async def _post(self, op: AcpOp) -> None:
        c, a = self.client, op.args
        if op.kind == "turn_start":
            await c.turn_start(a["turn_id"])
        elif op.kind == "text_delta":
            await c.text_delta(a["block_id"], a["delta"])
        elif op.kind == "text_done":
            await c.text_done(a["block_id"])
        elif op.kind == "thinking_delta":
            await c.thinking_delta(a["block_id"], a["delta"])
        elif op.kind == "thinking_done":
            await c.thinking_done(a["block_id"])
        elif op.kind == "tool_request":
            await c.tool_request(a["call_id"], a["tool_name"], a["input"])
        elif op.kind == "tool_result":
            await c.tool_result(a["call_id"], a["status"], a["output"])
        elif op.kind == "interaction_request":
            await c.interaction_request(a["interaction_id"], a["kind"], a["prompt"], a["options"])
        elif op.kind == "interaction_cancel":
            await c.interaction_cancel(a["interaction_id"], a.get("reason"))
        elif op.kind == "turn_end":
            await c.turn_end(
                a["turn_id"], a["stop_reason"], tool_invocation_count=a["tool_invocation_count"]
            )
        elif op.kind == "usage":
            window = a.pop("context_window", None)
            if window is not None:
                a["context_window"] = ContextWindow(**window)
            await c.usage(**a)
        elif op.kind == "error":
            await c.error(a["error_code"], a["message"])
        elif op.kind == "rename":
            if a["name"] != c.view.name:
                await c.rename(a["name"])
        elif op.kind == "ignorable":
            await c.ignorable(a["type"], a["payload"])

    def _not_asked(self, interaction_id: str, why: str) -> None:
        """The question never reached the edges: the agent is refused, not left waiting."""
        permission = self._permissions.pop(interaction_id, None)
        if permission is not None and not permission.answer.done():
            permission.refusal = f"the relay did not accept it ({why})"
            permission.answer.set_result(None)

    def _report(self, code: str, message: str) -> None:
        self.emit([AcpOp("error", {"error_code": code, "message": message[:1000]})])

    def on_problem(self, what: str) -> None:
        """The agent wrote something that is not a JSON-RPC message: dropped, and said (at
        most one ``session.error`` every few seconds, with the count)."""
        self._problems += 1
        _log.warning("agent_output_dropped", what=what)
        now = time.monotonic()
        if now - self._problem_at >= _PROBLEM_EVERY_S:
            self._problem_at = now
            self._report(
                "acp_bad_output",
                f"the agent wrote {what}; dropped ({self._problems} dropped so far)",
            )

    # --- the RAWP side -----------------------------------------------------------------

    async def _read(self) -> None:
        async for frame in self.client:
            self._dispatch(frame)

    def _dispatch(self, frame: Frame | GenericFrame) -> None:
        if isinstance(frame, History):
            for raw in frame.payload.frames:
                try:
                    self._dispatch(codec.decode(bytes(raw)))
                except ProtocolError:
                    continue
            return
        if isinstance(frame, UserMessage):
            self._work.put_nowait(frame)
        elif isinstance(frame, InteractionResponse):
            self._answered(frame)
        elif isinstance(frame, Cancel):
            if self.ingest.in_turn:
                self._cancel.set()
        elif (
            isinstance(frame, SessionError)
            and frame.sender is not None
            and frame.sender.role == "master"
        ):
            _log.warning(
                "relay_refused",
                code=frame.payload.error_code,
                message=frame.payload.message[:300],
            )

    def _answered(self, frame: InteractionResponse) -> None:
        interaction_id = frame.payload.interaction_id
        permission = self._permissions.get(interaction_id)
        if permission is None or permission.answer.done():
            return
        option_id, named = answer_outcome(permission.options, frame.payload.response)
        if not named:
            self._report(
                "acp_answer_unmatched",
                f"the answer to {interaction_id} names none of the agent's options; "
                + ("rejected" if option_id else "cancelled"),
            )
        permission.answer.set_result(option_id)

    def _end_orphaned_turn(self) -> None:
        """A turn left open by a bridge that died mid-turn: nobody can finish it; end it."""
        state = self.client.view.state
        ops: list[AcpOp] = [
            AcpOp("interaction_cancel", {"interaction_id": i, "reason": "the bridge restarted"})
            for i in state.pending_interactions
        ]
        if state.turn_id is not None:
            ops += [AcpOp("text_done", {"block_id": b}) for b in sorted(state.open_text)]
            ops += [AcpOp("thinking_done", {"block_id": b}) for b in sorted(state.open_thinking)]
            ops += [
                AcpOp(
                    "tool_result",
                    {"call_id": c, "status": "cancelled", "output": "the bridge restarted"},
                )
                for c in state.open_calls
            ]
            self.ingest.turn_id = state.turn_id
            _log.warning("orphaned_turn", session_id=self.session_id, turn_id=state.turn_id)
            ops += self.ingest.abort(
                "the bridge restarted while the agent's turn ran; the turn is lost",
                code="acp_bridge_restarted",
            )
        self.emit(ops)

    # --- the agent -----------------------------------------------------------------------

    def _agent_state_file(self) -> Path | None:
        return None if self.state_path is None else Path(f"{self.state_path}.acp.json")

    def _load_agent_session(self) -> str | None:
        path = self._agent_state_file()
        if path is None:
            return None
        try:
            value = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        session = value.get("session_id") if isinstance(value, dict) else None
        return session if isinstance(session, str) else None

    def _save_agent_session(self) -> None:
        path = self._agent_state_file()
        if path is None:
            return
        with contextlib.suppress(OSError):
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"session_id": self.agent_session_id}))
            tmp.replace(path)

    def on_cancel_request(self, params: Any) -> None:
        """The agent withdrew one of its requests (``$/cancel_request``)."""
        request_id = params.get("requestId") if isinstance(params, dict) else None
        for permission in list(self._permissions.values()):
            if permission.rpc_id == request_id and not permission.answer.done():
                permission.answer.set_result(None)
                self._withdraw(permission, "the agent withdrew the request")

    def _withdraw(self, permission: _Permission, reason: str) -> None:
        if self._permissions.pop(permission.interaction_id, None) is not None:
            self.emit(
                [
                    AcpOp(
                        "interaction_cancel",
                        {"interaction_id": permission.interaction_id, "reason": reason},
                    )
                ]
            )

    def _withdraw_all(self, reason: str) -> None:
        for permission in list(self._permissions.values()):
            if not permission.answer.done():
                permission.answer.set_result(None)
            self._withdraw(permission, reason)

    async def _start_agent(self) -> AgentProcess | None:
        """Start the agent, initialize it, open its session; None (reported) on failure."""
        try:
            agent = await AgentProcess.start(
                self.command,
                _AgentClient(self),  # type: ignore[arg-type]
                cwd=self.cwd,
                max_message_bytes=self.max_message_bytes,
                on_problem=self.on_problem,
                on_cancel_request=self.on_cancel_request,
            )
        except OSError as exc:
            self._report("acp_agent_unavailable", f"the agent could not be started: {exc}")
            return None
        try:
            opened = await self._open(agent)
        except (TimeoutError, ConnectionError, RequestError, ValueError) as exc:
            why = (
                f"the agent did not answer {exc.args[0]} within {self.init_timeout:g} s"
                if isinstance(exc, TimeoutError) and exc.args
                else "the agent failed to start its session: "
                + (str(exc)[:300] or type(exc).__name__)
            )
            if agent.exited.done():
                why += f" ({agent.describe_exit()})"
            await agent.stop(grace=1.0)
            self._report("acp_agent_unavailable", why)
            return None
        return agent if opened else None

    async def _open(self, agent: AgentProcess) -> bool:
        async def step(name: str, call: Any) -> Any:
            pending = asyncio.ensure_future(call)
            done, _ = await asyncio.wait(
                {pending, agent.exited},
                timeout=self.init_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if pending in done:
                return pending.result()
            # No answer in time (or the agent exited): the call is withdrawn, not left to
            # fail unread when the connection closes.
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pending
            if agent.exited.done():
                raise ConnectionError(agent.describe_exit())
            raise TimeoutError(name)

        init = await step(
            "initialize",
            agent.conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=ClientCapabilities(
                    fs=FileSystemCapabilities(read_text_file=False, write_text_file=False),
                    terminal=False,
                ),
                client_info=Implementation(name="rawp-bridge", version="1"),
            ),
        )
        caps = init.agent_capabilities
        self.load_session = bool(caps is not None and caps.load_session)
        if self.agent_session_id is not None and self.load_session:
            self.ingest_loading = True
            self.agent = agent  # updates of the replay arrive now and are not relayed
            try:
                await step(
                    "session/load",
                    agent.conn.load_session(
                        cwd=self.cwd, session_id=self.agent_session_id, mcp_servers=[]
                    ),
                )
                return True
            except RequestError as exc:
                self._report(
                    "acp_session_lost",
                    "the agent could not load its session "
                    f"({str(exc)[:200]}); it starts a new one without the conversation",
                )
            finally:
                self.ingest_loading = False
        self.agent = agent
        started = await step("session/new", agent.conn.new_session(cwd=self.cwd, mcp_servers=[]))
        self.agent_session_id = started.session_id
        self._save_agent_session()
        early, self._early = self._early, []
        for session_id, update in early:
            self.on_update(session_id, update)
        info = init.agent_info
        payload: dict[str, Any] = {"sessionId": started.session_id}
        if info is not None:
            payload["agentInfo"] = info.model_dump(mode="json", by_alias=True, exclude_none=True)
        self.emit([AcpOp("ignorable", {"type": "acp.session", "payload": payload})])
        return True

    def on_update(self, session_id: str, update: SessionUpdate) -> None:
        """A ``session/update`` from the agent: its frames, in arrival order."""
        if self.ingest_loading:
            return  # the replay of a loaded session: the log has it already
        if self.agent_session_id is None and len(self._early) < 256:
            # Before session/new's answer names the session (an agent may announce its
            # commands first): kept until the id is known.
            self._early.append((session_id, update))
            return
        if session_id != self.agent_session_id:
            self.on_problem(f"an update for a session it did not open ({session_id[:64]!r})")
            return
        self.emit(self.ingest.update(update))

    async def on_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> RequestPermissionResponse:
        """A ``session/request_permission``: asked of the edges, the first answer wins."""
        agent = self.agent
        rpc_id = (
            agent.link.permission_ids.popleft() if agent and agent.link.permission_ids else None
        )
        if session_id != self.agent_session_id or not self.ingest.in_turn or self._cancel.is_set():
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        problem = permission_problem(options)
        if problem is not None:
            raise self._refuse_permission(problem)
        interaction_id = f"acp-perm-{codec.new_message_id()}"
        permission = _Permission(interaction_id, options, rpc_id)
        self._permissions[interaction_id] = permission
        self.emit(self.ingest.permission(interaction_id, tool_call, options))
        option_id = await permission.answer
        self._permissions.pop(interaction_id, None)
        if permission.refusal is not None:
            raise self._refuse_permission(permission.refusal)
        if option_id is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=option_id)
        )

    def _refuse_permission(self, why: str) -> RequestError:
        """A permission request no UI can be asked: said to the edges, and the JSON-RPC error
        the agent is answered (it decides whether its turn goes on)."""
        self._report("acp_permission_refused", f"the agent's permission request: {why}")
        return RequestError(-32602, f"the relay cannot ask this permission request: {why}")

    async def _agent_ready(self) -> AgentProcess | None:
        if self.agent is not None and not self.agent.exited.done():
            return self.agent
        if self.agent is not None:
            await self.agent.stop(grace=0.5)
            self.agent = None
        return await self._start_agent()

    async def _worker(self) -> None:
        # Started before the first prompt so the agent's commands and modes reach the edges.
        if self.agent is None:
            await self._agent_ready()
        while True:
            message = await self._next_message()
            agent = await self._agent_ready()
            if agent is None:
                continue  # reported; the next message tries again
            await self._one_prompt(agent, message)
            await self._flushed()

    async def _next_message(self) -> UserMessage:
        """The next user message; an agent that exits meanwhile is reported (and started
        again for that message)."""
        getter = asyncio.ensure_future(self._work.get())
        try:
            while True:
                agent = self.agent
                waiters: set[asyncio.Future[Any]] = {getter}
                if agent is not None:
                    waiters.add(agent.exited)
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    return getter.result()
                if agent is not None and agent is self.agent:
                    await agent.stop(grace=0.5)
                    self.agent = None
                    self._report(
                        "acp_agent_exited",
                        f"{agent.describe_exit()}; it starts again for the next message",
                    )
        finally:
            getter.cancel()

    async def _one_prompt(self, agent: AgentProcess, message: UserMessage) -> None:
        self._cancel.clear()
        self.prompts += 1
        self.emit(self.ingest.begin())
        assert self.agent_session_id is not None
        prompt = asyncio.ensure_future(
            agent.conn.prompt(
                session_id=self.agent_session_id, prompt=[text_block(message.payload.text)]
            )
        )
        cancel = asyncio.ensure_future(self._cancel.wait())
        waiters: set[asyncio.Future[Any]] = {prompt, cancel, agent.exited}
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            if not prompt.done() and not agent.exited.done() and self._cancel.is_set():
                self._withdraw_all("cancelled")
                with contextlib.suppress(Exception):
                    await agent.conn.cancel(session_id=self.agent_session_id)
                stopping: set[asyncio.Future[Any]] = {prompt, agent.exited}
                await asyncio.wait(
                    stopping,
                    timeout=self.cancel_grace,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if not prompt.done() and not agent.exited.done():
                    self.emit(self.ingest.cancelled())
                    self._report(
                        "acp_cancel_timeout",
                        f"the agent did not stop within {self.cancel_grace:g} s of "
                        "session/cancel; it was stopped and starts again for the next message",
                    )
                    await agent.stop(grace=1.0)
                    self.agent = None
                    return
        finally:
            cancel.cancel()
        self._withdraw_all("the agent's turn ended")
        if prompt.done() and not prompt.cancelled() and prompt.exception() is None:
            response: PromptResponse = prompt.result()
            self.emit(self.ingest.end(response))
            return
        if not prompt.done() and agent.exited.done():
            # Updates written just before the exit may still be on their way in.
            with contextlib.suppress(asyncio.TimeoutError, Exception):
                await asyncio.wait_for(asyncio.shield(prompt), 1.0)
        prompt.cancel()
        failure = None if prompt.cancelled() else prompt.exception()
        if agent.exited.done() or isinstance(failure, ConnectionError):
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(agent.exited), 2.0)
            self.emit(self.ingest.abort(agent.describe_exit(), code="acp_agent_exited"))
            await agent.stop(grace=0.5)
            self.agent = None
            return
        why = str(failure)[:500] if failure is not None else "the prompt failed"
        self.emit(
            self.ingest.abort(
                f"the agent answered the prompt with an error: {why}", code="acp_prompt_failed"
            )
        )
