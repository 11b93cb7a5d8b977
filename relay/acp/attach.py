"""``rawp acp attach SESSION``: an ACP agent on stdio, attached to a remote session as an edge.

An editor launches it as it launches any ACP agent. ``initialize`` says it can load sessions;
``session/load`` (or ``session/new``: editors that only create sessions get the same session)
attaches to SESSION with the Python client library and replays its log as ``session/update``
notifications (:class:`protocol.acp.AcpEgress`); from then on every frame the edge is
delivered is streamed the same way, whoever's turn it is. ``session/prompt`` sends a
``user.message`` and answers when the turn that message started ends (under one run at a
time, §17.3, that is the first turn to start after it); the master's ``busy`` refusal is a
JSON-RPC error. ``session/cancel`` sends ``control.cancel``. A pending interaction is asked of
the editor as a ``session/request_permission`` and its answer sent back; when someone else
answers first or the agent withdraws the question, the editor's request is withdrawn with
``$/cancel_request``. A dropped connection is resumed by the client library; frames are
forwarded by seq, so nothing is sent to the editor twice.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Final

import structlog
from acp import PROTOCOL_VERSION, RequestError
from acp.agent.connection import AgentSideConnection
from acp.schema import (
    AgentCapabilities,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
)
from acp.stdio import stdio_streams

from protocol import codec
from protocol.acp import AcpEgress, Ask, Out
from protocol.client import ClientClosed, FrameRefused, RawpClient
from protocol.errors import ProtocolError
from protocol.frames import Frame, GenericFrame, History

from .link import DEFAULT_MAX_MESSAGE_BYTES, NdjsonLink

__all__ = ["AcpAttach"]

_log = structlog.get_logger("rawp.acp")
_BUSY: Final = -32000
_TURNS_KEPT: Final = 64


class _Prompt:
    """One ``session/prompt`` of the editor: its message's seq, then its turn's."""

    def __init__(self) -> None:
        self.seq: int | None = None
        self.turn_seq: int | None = None
        self.done: asyncio.Future[Out] = asyncio.get_running_loop().create_future()


class _Editor:
    """What the editor may call on us (the ACP ``Agent``)."""

    def __init__(self, attach: AcpAttach) -> None:
        self.attach = attach

    async def initialize(self, protocol_version: int, **_: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(load_session=True),
            agent_info=Implementation(name="rawp-acp-attach", version="1"),
        )

    async def new_session(self, cwd: str, **_: Any) -> NewSessionResponse:
        await self.attach.open()
        # The replay follows the answer: the editor learns the session's id first.
        asyncio.get_running_loop().call_soon(self.attach.go_live)
        return NewSessionResponse(session_id=self.attach.session_id)

    async def load_session(self, cwd: str, session_id: str, **_: Any) -> LoadSessionResponse:
        if session_id != self.attach.session_id:
            raise RequestError.invalid_params(
                {"sessionId": f"this agent serves {self.attach.session_id} only"}
            )
        await self.attach.open()
        await self.attach.replay()
        return LoadSessionResponse()

    async def prompt(self, prompt: list[Any], session_id: str, **_: Any) -> PromptResponse:
        text = "".join(getattr(block, "text", "") or "" for block in prompt)
        return await self.attach.prompt(session_id, text)

    async def cancel(self, session_id: str, **_: Any) -> None:
        await self.attach.cancel()

    async def authenticate(self, method_id: str, **_: Any) -> None:
        return None


class AcpAttach:
    """The editor-facing side of one session (see the module's docstring).

    ``streams`` (reader, writer) replace stdin/stdout (tests, embedding).
    """

    def __init__(
        self,
        ws_url: str,
        session_id: str,
        *,
        token: str,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None,
    ) -> None:
        self.session_id = session_id
        self.max_message_bytes = max_message_bytes
        self.streams = streams
        self.client = RawpClient(ws_url, session_id, role="edge", token=token, from_start=True)
        self.egress = AcpEgress()
        self.link: NdjsonLink | None = None
        self.conn: AgentSideConnection | None = None
        self.live = False
        self.forwarded = 0
        self._held: list[Out] = []
        self._last_seq = 0
        self._caught_up = asyncio.Event()
        self._open_lock = asyncio.Lock()
        self._pump: asyncio.Task[None] | None = None
        self._prompt: _Prompt | None = None
        self._turns: dict[int, Out | None] = {}  # a recent turn's start seq -> its end
        self._asks: dict[str, asyncio.Task[None]] = {}
        self._closed = asyncio.Event()
        self._replaying: asyncio.Future[None] | None = None

    # --- lifecycle -----------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the editor until it closes our stdin, the session ends, or :meth:`close`.

        Attaches at once, while the editor is served: a refusal of the master (credential,
        unknown session) is raised (the command exits with it) before the editor waits on
        it; a master that cannot be reached yet is retried meanwhile."""
        connecting = asyncio.create_task(self._attach())
        reader, writer = self.streams or await stdio_streams(limit=1 << 16)
        self.link = NdjsonLink(
            reader,
            writer,
            max_message_bytes=self.max_message_bytes,
            on_problem=lambda what: _log.warning("editor_output_dropped", what=what),
        )
        self.conn = AgentSideConnection(_Editor(self), self.link, listening=False)  # type: ignore[arg-type]
        listening = asyncio.create_task(self.conn.listen())
        closed = asyncio.create_task(self._closed.wait())
        try:
            waiting: set[asyncio.Task[Any]] = {listening, closed, connecting}
            while True:
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if connecting in done:
                    connecting.result()  # a refusal ends the command
                    waiting.discard(connecting)
                if done - {connecting}:
                    break
        finally:
            for task in (connecting, listening, closed, self._pump, *self._asks.values()):
                if task is not None:
                    task.cancel()
            for task in (connecting, listening, closed, self._pump):
                if task is not None:
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            await self.client.close()
            with contextlib.suppress(Exception):
                await self.conn.close()

    def close(self) -> None:
        """Stop serving."""
        self._closed.set()

    async def open(self) -> None:
        """Attach (once) and read the backlog up to the head the welcome named."""
        await self._attach()
        welcome = self.client.welcome
        head = welcome.payload.session.head_seq if welcome is not None else 0
        if self._last_seq >= head:
            self._caught_up.set()
        await self._caught_up.wait()

    async def _attach(self) -> None:
        async with self._open_lock:
            if self._pump is None:
                await self.client.connect()
                self._pump = asyncio.create_task(self._read())

    async def replay(self) -> None:
        """Send what the backlog says, in order, then stream live."""
        await self._flush_held()

    def go_live(self) -> None:
        """Replay and stream live, from a task of its own (after ``session/new``'s answer)."""
        self._replaying = asyncio.ensure_future(self._flush_held())

    async def _flush_held(self) -> None:
        while self._held:
            held, self._held = self._held, []
            for out in held:
                await self._deliver(out, replaying=True)
        self.live = True
        for ask in list(self.egress.pending.values()):
            self._start_ask(ask)

    # --- the session's frames ----------------------------------------------------------

    async def _read(self) -> None:
        try:
            async for frame in self.client:
                await self._frame(frame)
        except ClientClosed:
            pass
        finally:
            self._closed.set()

    async def _frame(self, frame: Frame | GenericFrame) -> None:
        if isinstance(frame, History) and frame.seq is None:
            # The master's backlog: its frames carry their seqs.
            for raw in frame.payload.frames:
                try:
                    inner = codec.decode(bytes(raw))
                except ProtocolError:
                    continue
                await self._frame(inner)
            self._check_caught_up()
            return
        if frame.seq is None or frame.seq <= self._last_seq:
            return  # our own view's finalization, or seen before a drop
        self._last_seq = frame.seq
        if isinstance(frame, History):
            # A client's history (its frames while it was away): new to the editor.
            for raw in frame.payload.frames:
                try:
                    inner = codec.decode(bytes(raw))
                except ProtocolError:
                    continue
                for out in self.egress.frame(inner):
                    await self._out(out, frame.seq)
        else:
            for out in self.egress.frame(frame):
                await self._out(out, frame.seq)
        self._check_caught_up()

    def _check_caught_up(self) -> None:
        welcome = self.client.welcome
        if welcome is not None and self._last_seq >= welcome.payload.session.head_seq:
            self._caught_up.set()

    async def _out(self, out: Out, seq: int) -> None:
        if out.kind in ("turn_start", "turn_end"):
            self._turn(out, seq)
            return
        if not self.live:
            if out.kind == "update":
                self._held.append(out)
            return  # questions: those still pending are asked when the replay is done
        await self._deliver(out)

    async def _deliver(self, out: Out, *, replaying: bool = False) -> None:
        conn = self.conn
        if conn is None:
            return
        if out.kind == "update" and out.update is not None:
            try:
                await conn.session_update(session_id=self.session_id, update=out.update)
                self.forwarded += 1
            except ConnectionError:
                self._closed.set()
        elif out.kind == "ask" and out.ask is not None and not replaying:
            self._start_ask(out.ask)
        elif out.kind == "settled":
            await self._withdraw(out.interaction_id)

    # --- turns and prompts -------------------------------------------------------------

    def _turn(self, out: Out, seq: int) -> None:
        if out.kind == "turn_start":
            self._turns[seq] = None
            while len(self._turns) > _TURNS_KEPT:
                self._turns.pop(next(iter(self._turns)))
        else:
            open_starts = [s for s, end in self._turns.items() if end is None]
            if open_starts:
                self._turns[open_starts[-1]] = out
        self._settle_prompt()

    def _settle_prompt(self) -> None:
        prompt = self._prompt
        if prompt is None or prompt.seq is None or prompt.done.done():
            return
        if prompt.turn_seq is None:
            later = [s for s in self._turns if s > prompt.seq]
            if not later:
                return
            prompt.turn_seq = min(later)
        end = self._turns.get(prompt.turn_seq)
        if end is not None:
            prompt.done.set_result(end)

    async def prompt(self, session_id: str, text: str) -> PromptResponse:
        """The editor's prompt: a user message, answered when its turn ends."""
        if session_id != self.session_id:
            raise RequestError.invalid_params({"sessionId": "unknown session"})
        if self._prompt is not None:
            raise RequestError(_BUSY, "busy: this editor's previous prompt is still running")
        await self.open()
        if not self.live:
            await self._flush_held()
        prompt = self._prompt = _Prompt()
        try:
            frame = await self.client.user_message(text)
            try:
                prompt.seq = await self.client.committed(frame)
            except FrameRefused as exc:
                code = getattr(exc, "code", "") or str(exc)
                if "busy" in code:
                    raise RequestError(_BUSY, f"busy: {exc}") from None
                raise RequestError.internal_error({"details": str(exc)[:500]}) from None
            self._settle_prompt()
            end = await prompt.done
        finally:
            self._prompt = None
        if end.stop_reason is None:
            raise RequestError.internal_error({"details": end.error or "the turn failed"})
        return PromptResponse(stop_reason=end.stop_reason)  # type: ignore[arg-type]

    async def cancel(self) -> None:
        """The editor cancels its prompt: ``control.cancel``; a prompt whose turn has not
        started yet answers ``cancelled`` at once."""
        prompt = self._prompt
        with contextlib.suppress(ClientClosed, ProtocolError):
            await self.client.cancel()
        if prompt is not None and prompt.turn_seq is None and not prompt.done.done():
            prompt.done.set_result(Out("turn_end", stop_reason="cancelled"))

    # --- questions -----------------------------------------------------------------------

    def _start_ask(self, ask: Ask) -> None:
        if ask.interaction_id not in self._asks:
            self._asks[ask.interaction_id] = asyncio.create_task(self._ask(ask))

    async def _ask(self, ask: Ask) -> None:
        conn = self.conn
        if conn is None:
            return
        try:
            answer = await conn.request_permission(
                session_id=self.session_id,
                tool_call=ask.tool_call,
                options=ask.options,
                rawp_interaction_id=ask.interaction_id,
            )
        except (RequestError, ConnectionError, ValueError) as exc:
            _log.warning("editor_permission_failed", error=str(exc)[:300])
            return
        finally:
            self._asks.pop(ask.interaction_id, None)
        outcome = answer.outcome
        if outcome.outcome != "selected" or ask.interaction_id not in self.egress.pending:
            return  # the editor's prompt was cancelled, or someone answered first
        value = ask.values.get(outcome.option_id)
        if outcome.option_id not in ask.values:
            _log.warning("editor_answer_unknown", interaction_id=ask.interaction_id)
            return
        with contextlib.suppress(ClientClosed, ProtocolError):
            await self.client.interaction_response(ask.interaction_id, value)

    async def _withdraw(self, interaction_id: str) -> None:
        task = self._asks.pop(interaction_id, None)
        if task is None:
            return
        request_id = self.link.sent_permission_ids.pop(interaction_id, None) if self.link else None
        task.cancel()
        if request_id is not None and self.link is not None:
            with contextlib.suppress(ConnectionError):
                await self.link.send(
                    {
                        "jsonrpc": "2.0",
                        "method": "$/cancel_request",
                        "params": {"requestId": request_id},
                    }
                )
