"""An AG-UI agent as a RAWP client: ``rawp bridge ag-ui`` and :class:`AguiBridge` (notes §16.5).

The bridge attaches to the relay as the session's **client** with the Python client library
(:class:`protocol.client.RawpClient`), so drops, resume, buffering and §7.8 finalization work
as for any client. For every ``user.message`` from the edges it POSTs a ``RunAgentInput`` (the
session's transcript as AG-UI messages, :func:`protocol.agui.messages_from_view`) to the AG-UI
agent and turns the streamed events into RAWP frames with :class:`protocol.agui.AguiIngest`.
An interrupt becomes an ``agent.interaction.request``; the edges' ``control.interaction.response``
goes back to the agent as the next run's ``resume``. ``control.cancel`` stops the run.

Never a crash, never a half-open turn: a stream that breaks AG-UI's rules, an agent that
answers an error or cannot be reached, a run that never finishes (``run_timeout``) all end the
turn with ``error`` and a ``session.error``.

With ``state_path`` the client is saved after every batch of frames it sends, so a bridge that
is killed mid-run and started again resumes the same participant: the master's finalization
(§7.8.1) is taken back by the client's history (§7.8.3), and the run the dead process was
streaming — which nobody can continue — is then ended cleanly (``error``, ``session.error``
``agui_bridge_restarted``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Final

import aiohttp
import structlog
from ag_ui.core import ResumeEntry
from ag_ui.core.events import BaseEvent

from protocol import codec
from protocol.agui import AguiIngest, RawpOp, decode_event, messages_from_view, run_input
from protocol.client import ClientClosed, RawpClient
from protocol.errors import ProtocolError
from protocol.frames import Cancel, Frame, GenericFrame, History, InteractionResponse, UserMessage

__all__ = ["AguiBridge", "sse_events"]

_MAX_EVENT_BYTES: Final = 4 << 20
_log = structlog.get_logger("rawp.agui")


class _StreamBroken(Exception):
    """The agent's HTTP answer is not an AG-UI event stream (the message says why)."""


async def sse_events(response: aiohttp.ClientResponse) -> AsyncIterator[BaseEvent]:
    """The AG-UI events of an SSE body: ``data:`` lines joined, ``id:``/comments ignored.

    Events are separated by a blank line (``\\n\\n``; ``\\r\\n`` is tolerated). A ``data:``
    payload that is not one AG-UI event, or an event larger than 4 MiB, raises
    :class:`_StreamBroken`.
    """
    buffer = b""
    async for chunk in response.content.iter_any():
        buffer = (buffer + chunk).replace(b"\r\n", b"\n")
        while b"\n\n" in buffer:
            block, buffer = buffer.split(b"\n\n", 1)
            event = _block_event(block)
            if event is not None:
                yield event
        if len(buffer) > _MAX_EVENT_BYTES:
            raise _StreamBroken("an SSE event is larger than 4 MiB")
    if buffer.strip():
        event = _block_event(buffer)
        if event is not None:
            yield event


def _block_event(block: bytes) -> BaseEvent | None:
    lines = [
        line[5:].removeprefix(b" ") for line in block.split(b"\n") if line.startswith(b"data:")
    ]
    if not lines:
        return None
    try:
        return decode_event(b"\n".join(lines).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _StreamBroken(f"malformed AG-UI event: {str(exc)[:300]}") from None


class AguiBridge:
    """One AG-UI agent behind one RAWP session.

    ``relay_url`` is the master's WebSocket URL, ``agent_url`` the AG-UI agent's HTTP endpoint
    (it receives ``RunAgentInput`` and answers an AG-UI SSE stream). ``token`` needs the
    ``client`` grant. ``run_timeout`` bounds one AG-UI run (seconds).
    """

    def __init__(
        self,
        relay_url: str,
        session_id: str,
        agent_url: str,
        *,
        token: str,
        state_path: str | os.PathLike[str] | None = None,
        create: bool = True,
        run_timeout: float = 300.0,
        agent_headers: dict[str, str] | None = None,
    ) -> None:
        self.session_id = session_id
        self.agent_url = agent_url
        self.run_timeout = run_timeout
        self.agent_headers = dict(agent_headers or {})
        self.state_path = state_path
        self.client = RawpClient(
            relay_url,
            session_id,
            role="client",
            token=token,
            create=create or None,
            state_path=state_path,
        )
        self.runs = 0
        self._work: asyncio.Queue[UserMessage] = asyncio.Queue()
        self._answers: asyncio.Queue[InteractionResponse] = asyncio.Queue()
        self._cancel = asyncio.Event()
        self._closed = asyncio.Event()

    async def run(self) -> None:
        """Attach and serve until the session ends or :meth:`close` is called."""
        _log.info(
            "starting",
            session_id=self.session_id,
            relay_url=self.client.url,
            agent_url=self.agent_url,
        )
        await self.client.connect()
        welcome = self.client.welcome
        _log.info(
            "attached",
            session_id=self.session_id,
            participant_id=self.client.participant_id,
            resumed=welcome.payload.resumed if welcome is not None else False,
            head_seq=welcome.payload.session.head_seq if welcome is not None else None,
        )
        await self._end_orphaned_turn()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as http:
            worker = asyncio.create_task(self._worker(http))
            reader = asyncio.create_task(self._read())
            closer = asyncio.create_task(self._wait_closed())
            tasks = (worker, reader, closer)
            try:
                await asyncio.wait({worker, reader, closer}, return_when=asyncio.FIRST_COMPLETED)
                for task in (worker, reader):
                    failure = task.exception() if task.done() else None
                    if failure is not None and not isinstance(failure, ClientClosed):
                        raise failure
            finally:
                for task in tasks:
                    task.cancel()
                for task in tasks:
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
                await self.client.close()

    async def _wait_closed(self) -> None:
        await self._closed.wait()

    def close(self) -> None:
        """Stop serving (the current run is left to the session's finalization)."""
        self._closed.set()

    # --- the RAWP side --------------------------------------------------------------------

    async def _read(self) -> None:
        async for frame in self.client:
            self._dispatch(frame)

    def _dispatch(self, frame: Frame | GenericFrame) -> None:
        if isinstance(frame, History):
            # The backlog of a reattach: what the edges sent while this bridge was away.
            for raw in frame.payload.frames:
                try:
                    self._dispatch(codec.decode(bytes(raw)))
                except ProtocolError:
                    continue
            return
        if isinstance(frame, UserMessage):
            self._work.put_nowait(frame)
        elif isinstance(frame, InteractionResponse):
            self._answers.put_nowait(frame)
        elif isinstance(frame, Cancel):
            self._cancel.set()

    async def _send(self, ops: list[RawpOp]) -> None:
        """Send each op as its frame, then save the client (a restart resumes from here)."""
        c = self.client
        for op in ops:
            a = op.args
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
                await c.interaction_request(
                    a["interaction_id"], a["kind"], a["prompt"], a.get("options")
                )
            elif op.kind == "turn_end":
                await c.turn_end(
                    a["turn_id"], a["stop_reason"], tool_invocation_count=a["tool_invocation_count"]
                )
            elif op.kind == "usage":
                await c.usage(**a)
            elif op.kind == "error":
                await c.error(a["error_code"], a["message"])
        if ops and self.state_path is not None:
            with contextlib.suppress(OSError):
                c.save()

    async def _end_orphaned_turn(self) -> None:
        """A turn left open by a bridge that died mid-run: nobody streams it now; end it."""
        state = self.client.view.state
        turn_id = state.turn_id
        if turn_id is None:
            return
        ingest = AguiIngest(turn_id, turn_open=True)
        ingest.text = set(state.open_text)
        ingest.thinking = set(state.open_thinking)
        ingest.unresolved_calls = set(state.open_calls)
        _log.warning("orphaned_turn", session_id=self.session_id, turn_id=turn_id)
        await self._send(
            ingest.abort(
                "the bridge restarted while the AG-UI run was streaming; the run is lost",
                code="agui_bridge_restarted",
            )
        )

    # --- the AG-UI side -------------------------------------------------------------------

    async def _worker(self, http: aiohttp.ClientSession) -> None:
        while True:
            await self._work.get()
            self._cancel.clear()
            state = self.client.view.state
            taken = set(state.closed_blocks) | set(state.call_ids)
            ingest = AguiIngest(taken_ids=taken)
            resume: list[ResumeEntry] = []
            while not ingest.turn_ended:
                ingest.begin_run()
                await self._one_run(http, ingest, resume)
                if ingest.turn_ended or not ingest.interrupts:
                    if not ingest.turn_ended:
                        await self._send(ingest.abort("the run ended without ending the turn"))
                    break
                resume = await self._wait_answers(ingest)
                if not resume:
                    await self._send(ingest.cancel())

    async def _wait_answers(self, ingest: AguiIngest) -> list[ResumeEntry]:
        """The edges' answers to every interrupt of the run (empty when cancelled)."""
        wanted = {i.id for i in ingest.interrupts}
        answers: list[ResumeEntry] = []
        while wanted:
            getter = asyncio.ensure_future(self._answers.get())
            canceller = asyncio.ensure_future(self._cancel.wait())
            try:
                await asyncio.wait({getter, canceller}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                canceller.cancel()
                if not getter.done():
                    getter.cancel()
            if not getter.done() or getter.cancelled():
                return []
            answer = getter.result()
            interaction_id = answer.payload.interaction_id
            if interaction_id in wanted:
                wanted.discard(interaction_id)
                answers.append(
                    ResumeEntry(
                        interrupt_id=interaction_id,
                        status="resolved",
                        payload=answer.payload.response,
                    )
                )
        return answers

    async def _one_run(
        self, http: aiohttp.ClientSession, ingest: AguiIngest, resume: list[ResumeEntry]
    ) -> None:
        """POST one RunAgentInput and fold its stream; every way it can fail ends the turn."""
        self.runs += 1
        run_id = ingest.turn_id if not resume else f"{ingest.turn_id}.{self.runs}"
        body = run_input(
            self.session_id, run_id, messages_from_view(self.client.view.blocks), resume=resume
        )
        _log.info(
            "run_started",
            session_id=self.session_id,
            run_id=run_id,
            agent_url=self.agent_url,
            resumed_interrupts=len(resume),
        )
        streaming = asyncio.create_task(
            self._stream(http, ingest, body.model_dump_json(by_alias=True))
        )
        canceller = asyncio.ensure_future(self._cancel.wait())
        try:
            done, _ = await asyncio.wait(
                {streaming, canceller},
                timeout=self.run_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            canceller.cancel()
        if streaming in done:
            exc = streaming.exception()
            if exc is not None:
                await self._send(ingest.abort(f"the bridge failed: {exc!r}"[:500]))
            _log.info(
                "run_ended",
                run_id=run_id,
                outcome="failed" if exc is not None else "streamed",
                turn_ended=ingest.turn_ended,
            )
            return
        streaming.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await streaming
        _log.info(
            "run_ended",
            run_id=run_id,
            outcome="cancelled" if self._cancel.is_set() else "timed out",
        )
        if self._cancel.is_set():
            await self._send(ingest.cancel())
        else:
            await self._send(
                ingest.abort(f"the AG-UI run did not finish within {self.run_timeout:g} s")
            )

    async def _stream(self, http: aiohttp.ClientSession, ingest: AguiIngest, body: str) -> None:
        headers = {
            **self.agent_headers,
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
        }
        try:
            async with http.post(self.agent_url, data=body, headers=headers) as response:
                if response.status != 200:
                    await self._send(
                        ingest.abort(
                            f"the AG-UI agent answered HTTP {response.status}",
                            code="agui_agent_error",
                        )
                    )
                    return
                try:
                    async for event in sse_events(response):
                        await self._send(ingest.feed(event))
                        if ingest.turn_ended or ingest.run_done:
                            break
                except _StreamBroken as exc:
                    await self._send(ingest.abort(str(exc)))
                    return
        except (aiohttp.ClientError, OSError) as exc:
            await self._send(
                ingest.abort(
                    f"the AG-UI agent is unreachable: {exc!r}"[:500], code="agui_agent_error"
                )
            )
            return
        await self._send(ingest.end_of_stream())
