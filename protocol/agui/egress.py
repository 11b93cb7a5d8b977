"""Egress: a RAWP session log, entry by entry, as AG-UI events (notes §16.5).

See :mod:`protocol.agui` for the rules it keeps."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
from ag_ui.core import (
    CustomEvent,
    Interrupt,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    ResumeEntry,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.core.events import BaseEvent

from .. import codec
from ..errors import ProtocolError
from ..finalize import unfinalizes
from ..frames import (
    Cancel,
    Deleted,
    Frame,
    GenericFrame,
    History,
    InteractionRequest,
    InteractionResponse,
    SessionStatus,
    TextDelta,
    TextDone,
    ThinkingDelta,
    ThinkingDone,
    ToolRequest,
    ToolResult,
    TurnEnd,
    TurnStart,
    Usage,
    UserMessage,
)
from .messages import MessageFold
from .wire import AguiMessage, as_text, millis, payload_of

__all__ = ["AguiEgress", "EmittedEvent"]

_SUCCESS_REASONS: Final = frozenset({"end_turn", "tool_use", "max_tokens", "awaiting_input"})


@dataclass(frozen=True)
class EmittedEvent:
    """An AG-UI event and its SSE id; ``run_end`` for ``RUN_FINISHED`` / ``RUN_ERROR``."""

    event: BaseEvent
    event_id: str | None
    run_end: bool = False


@dataclass
class _Turn:
    turn_id: str
    run_id: str | None  # the AG-UI run open now; None while suspended by an interrupt
    continuations: int = 0
    text: dict[str, str] = field(default_factory=dict)  # open in AG-UI: id -> text so far
    thinking: dict[str, str] = field(default_factory=dict)
    suspended_text: dict[str, str] = field(default_factory=dict)  # open in RAWP only
    suspended_thinking: dict[str, str] = field(default_factory=dict)
    calls: set[str] = field(default_factory=set)
    interactions: dict[str, InteractionRequest] = field(default_factory=dict)
    answers: list[ResumeEntry] = field(default_factory=list)


class AguiEgress:
    """A session's log, entry by entry, as AG-UI events (notes §16.5)."""

    def __init__(self, session_id: str) -> None:
        self.thread_id = session_id
        self.fold = MessageFold()
        self.ended = False  # the session was deleted: nothing more is emitted
        self.turn: _Turn | None = None
        self._pending_users: list[AguiMessage] = []
        self._held_end: TurnEnd | None = None
        self._held_synthetic: list[Frame] = []
        self._user_ids: set[str] = set()

    # --- public ---------------------------------------------------------------------------

    @property
    def known_message_ids(self) -> set[str]:
        """Ids the session already has as AG-UI messages (user messages included)."""
        return self._user_ids | {m["id"] for m in self.fold.messages}

    @property
    def in_run(self) -> bool:
        """Is an AG-UI run open (its end not emitted yet)?"""
        return self.turn is not None and self.turn.run_id is not None

    @property
    def holding(self) -> bool:
        """Is a run's end waiting for the turn's ``session.usage``?"""
        return self._held_end is not None

    def feed(self, frame: Frame | GenericFrame, seq: int, role: str) -> list[EmittedEvent]:
        """Fold log entry ``seq`` (sent by ``role``); the events it makes, with their ids."""
        events = self._map(frame, role)
        return self._stamp(events, seq)

    def flush(self, seq: int) -> list[EmittedEvent]:
        """End a run whose ``session.usage`` has not come (the agent broke §7.5.2's MUST)."""
        return self._stamp(self._finish(None), seq)

    def connect(self, label: str, seq: int) -> list[EmittedEvent]:
        """What a late joiner gets first: a run, the ``MESSAGES_SNAPSHOT``, open blocks reopened.

        With no turn open the run is a replay run (``runId`` ``label``) that ends at once (with
        the pending interrupts when a turn waits for answers); inside a turn it is the turn's
        run, and the live events continue it.
        """
        events: list[BaseEvent] = []
        turn = self.turn
        if turn is None or turn.run_id is None:
            run_id = label
            events.append(RunStartedEvent(thread_id=self.thread_id, run_id=run_id))
            events.append(self.fold.snapshot())
            outcome: RunFinishedSuccessOutcome | RunFinishedInterruptOutcome = (
                RunFinishedSuccessOutcome()
            )
            if turn is not None and turn.interactions:
                # A turn waiting for answers: the joiner learns the interrupts still pending.
                interrupts = [_interrupt_of(r) for r in turn.interactions.values()]
                outcome = RunFinishedInterruptOutcome(interrupts=interrupts)
            events.append(
                RunFinishedEvent(thread_id=self.thread_id, run_id=run_id, outcome=outcome)
            )
        else:
            events.append(RunStartedEvent(thread_id=self.thread_id, run_id=turn.run_id))
            events.append(self.fold.snapshot())
            for block_id in turn.text:
                events.append(TextMessageStartEvent(message_id=block_id, role="assistant"))
            for block_id in turn.thinking:
                events.append(ReasoningStartEvent(message_id=block_id))
                events.append(ReasoningMessageStartEvent(message_id=block_id, role="reasoning"))
        # Only the last carries an id: resuming from it (seq) continues after the preamble.
        return [
            EmittedEvent(
                e,
                str(seq) if i == len(events) - 1 else None,
                run_end=isinstance(e, (RunFinishedEvent, RunErrorEvent)),
            )
            for i, e in enumerate(events)
        ]

    # --- the mapping ----------------------------------------------------------------------

    def _stamp(self, events: list[BaseEvent], seq: int) -> list[EmittedEvent]:
        out: list[EmittedEvent] = []
        for index, event in enumerate(events):
            self.fold.apply(event)
            event_id = str(seq) if index == len(events) - 1 else f"{seq}.{index}"
            run_end = isinstance(event, (RunFinishedEvent, RunErrorEvent))
            out.append(EmittedEvent(event, event_id, run_end))
        return out

    def _map(self, frame: Frame | GenericFrame, role: str) -> list[BaseEvent]:
        if self.ended:
            return []
        if isinstance(frame, History):
            return self._history(frame, role)
        if isinstance(frame, Frame) and frame.synthetic and role == "master":
            # §7.8.1 finalization: held until a history takes it back (§7.8.3) or makes it final.
            self._held_synthetic.append(frame)
            return []
        events: list[BaseEvent] = []
        if self._held_synthetic and role == "client":
            events += self._make_final()
        if isinstance(frame, Deleted) and role == "master":
            # A session that ends while a finalization is held (its client never came back:
            # the reattach window expired, notes §16.1) makes that finalization final.
            events += self._make_final() if self._held_synthetic else []
            events += self._finish(None) if self._held_end else []
            events += self._end_session(frame)
            return events
        if isinstance(frame, SessionStatus):
            # A status change (notes §17.4) is news inside a run only (AG-UI allows nothing
            # outside one), and it never ends the run a held turn end waits to finish.
            if self.turn is None:
                return events
            return [*events, self._custom(frame.type, payload_of(frame), frame)]
        if self._held_end is not None:
            if isinstance(frame, Usage):
                return events + self._finish(frame)
            events += self._finish(None)
        return events + self._frame(frame, role)

    def _frame(self, frame: Frame | GenericFrame, role: str) -> list[BaseEvent]:
        if isinstance(frame, TurnStart):
            return self._turn_start(frame)
        if isinstance(frame, UserMessage):
            if frame.message_id not in self._user_ids:
                self._user_ids.add(frame.message_id)
                text = frame.payload.text
                self._pending_users.append(
                    {"id": frame.message_id, "role": "user", "content": text}
                )
            return []
        turn = self.turn
        if turn is None:
            return []  # outside a run AG-UI allows nothing; the RAWP log keeps it
        if isinstance(frame, InteractionResponse):
            return self._answer(turn, frame)
        events = self._resume(turn, frame) if turn.run_id is None else []
        if isinstance(frame, TurnEnd):
            return events + self._turn_end(turn, frame, role)
        if isinstance(frame, (TextDelta, TextDone, ThinkingDelta, ThinkingDone)):
            return events + self._block(turn, frame)
        if isinstance(frame, ToolRequest):
            return events + self._tool_request(turn, frame)
        if isinstance(frame, ToolResult):
            return events + self._tool_result(turn, frame)
        if isinstance(frame, InteractionRequest):
            return events + self._interrupt(turn, frame)
        name = frame.type
        if isinstance(frame, Cancel) or not name.startswith("connection."):
            events.append(self._custom(name, payload_of(frame), frame))
        return events

    def _custom(self, name: str, value: Any, frame: Frame | GenericFrame | None) -> CustomEvent:
        if isinstance(frame, Frame):
            return CustomEvent(name=name, value=value, timestamp=millis(frame))
        return CustomEvent(name=name, value=value)

    def _turn_start(self, frame: TurnStart) -> list[BaseEvent]:
        events: list[BaseEvent] = []
        if self.turn is not None:  # a turn that never ended (a lenient fold): end it first
            events += self._close_blocks(self.turn, frame)
            events += self._run_end(self.turn, "error", None, frame)
        turn_id = frame.payload.turn_id
        self.turn = _Turn(turn_id=turn_id, run_id=turn_id)
        users, self._pending_users = self._pending_users, []
        started = RunStartedEvent(
            thread_id=self.thread_id,
            run_id=turn_id,
            input=RunAgentInput.model_validate(
                {"threadId": self.thread_id, "runId": turn_id, "messages": users}
            ),
            timestamp=millis(frame),
        )
        return [*events, started]

    def _turn_end(self, turn: _Turn, frame: TurnEnd, role: str) -> list[BaseEvent]:
        if frame.payload.turn_id != turn.turn_id:
            return []
        events = self._close_blocks(turn, frame)
        if role == "client":
            self._held_end = frame  # §7.5.2: its session.usage comes next
            return events
        return events + self._run_end(turn, frame.payload.stop_reason, None, frame)

    def _finish(self, usage: Usage | None) -> list[BaseEvent]:
        end, self._held_end = self._held_end, None
        turn = self.turn
        if end is None or turn is None:
            return []
        events: list[BaseEvent] = []
        if usage is not None:
            events.append(self._custom("session.usage", payload_of(usage), usage))
        return events + self._run_end(turn, end.payload.stop_reason, usage, end)

    def _run_end(
        self, turn: _Turn, stop_reason: str, usage: Usage | None, frame: Frame
    ) -> list[BaseEvent]:
        events: list[BaseEvent] = []
        if turn.run_id is None:  # suspended by an interrupt: the end needs a run to be in
            events += self._resume(turn, frame)
        run_id = turn.run_id or turn.turn_id
        tokens = [_token_usage(usage)] if usage is not None else None
        if stop_reason in _SUCCESS_REASONS or stop_reason == "cancelled":
            outcome: RunFinishedSuccessOutcome | RunFinishedCancelledOutcome = (
                RunFinishedCancelledOutcome()
                if stop_reason == "cancelled"
                else RunFinishedSuccessOutcome()
            )
            events.append(
                RunFinishedEvent(
                    thread_id=self.thread_id,
                    run_id=run_id,
                    outcome=outcome,
                    result={"stop_reason": stop_reason},
                    usage=tokens,
                    timestamp=millis(frame),
                )
            )
        else:
            failure = frame.payload.error if isinstance(frame, TurnEnd) else None
            events.append(
                RunErrorEvent(
                    message=f"the turn ended: {stop_reason}"
                    if failure is None
                    else failure.message,
                    code=stop_reason if failure is None else failure.code,
                    usage=tokens,
                    timestamp=millis(frame),
                )
            )
        self.turn = None
        return events

    def _close_blocks(self, turn: _Turn, frame: Frame) -> list[BaseEvent]:
        events: list[BaseEvent] = []
        ms = millis(frame)
        for block_id in list(turn.text):
            events.append(TextMessageEndEvent(message_id=block_id, timestamp=ms))
        for block_id in list(turn.thinking):
            events.append(ReasoningMessageEndEvent(message_id=block_id, timestamp=ms))
            events.append(ReasoningEndEvent(message_id=block_id, timestamp=ms))
        turn.text.clear()
        turn.thinking.clear()
        turn.suspended_text.clear()
        turn.suspended_thinking.clear()
        return events

    def _resume(
        self, turn: _Turn, frame: Frame | GenericFrame, answers: list[ResumeEntry] | None = None
    ) -> list[BaseEvent]:
        """A continuation run of a turn an interrupt suspended."""
        turn.continuations += 1
        run_id = f"{turn.turn_id}.{turn.continuations}"
        turn.run_id = run_id
        body: dict[str, Any] = {"threadId": self.thread_id, "runId": run_id, "messages": []}
        if answers:
            body["resume"] = [a.model_dump(by_alias=True, mode="json") for a in answers]
        turn.answers = []
        return [
            RunStartedEvent(
                thread_id=self.thread_id,
                run_id=run_id,
                input=RunAgentInput.model_validate(body),
                timestamp=millis(frame),
            )
        ]

    def _answer(self, turn: _Turn, frame: InteractionResponse) -> list[BaseEvent]:
        interaction_id = frame.payload.interaction_id
        if turn.interactions.pop(interaction_id, None) is None:
            return []
        turn.answers.append(
            ResumeEntry(
                interrupt_id=interaction_id, status="resolved", payload=frame.payload.response
            )
        )
        if turn.run_id is None and not turn.interactions:
            return self._resume(turn, frame, turn.answers)
        return []

    def _interrupt(self, turn: _Turn, frame: InteractionRequest) -> list[BaseEvent]:
        p = frame.payload
        turn.interactions[p.interaction_id] = frame
        events: list[BaseEvent] = []
        ms = millis(frame)
        for block_id, text in list(turn.text.items()):
            events.append(TextMessageEndEvent(message_id=block_id, timestamp=ms))
            turn.suspended_text[block_id] = text
        for block_id, text in list(turn.thinking.items()):
            events.append(ReasoningMessageEndEvent(message_id=block_id, timestamp=ms))
            events.append(ReasoningEndEvent(message_id=block_id, timestamp=ms))
            turn.suspended_thinking[block_id] = text
        turn.text.clear()
        turn.thinking.clear()
        interrupts = [_interrupt_of(request) for request in turn.interactions.values()]
        events.append(
            RunFinishedEvent(
                thread_id=self.thread_id,
                run_id=turn.run_id or turn.turn_id,
                outcome=RunFinishedInterruptOutcome(interrupts=interrupts),
                timestamp=ms,
            )
        )
        turn.run_id = None
        return events

    def _block(
        self, turn: _Turn, frame: TextDelta | TextDone | ThinkingDelta | ThinkingDone
    ) -> list[BaseEvent]:
        thinking = isinstance(frame, (ThinkingDelta, ThinkingDone))
        open_blocks = turn.thinking if thinking else turn.text
        suspended = turn.suspended_thinking if thinking else turn.suspended_text
        block_id = frame.payload.block_id
        ms = millis(frame)
        events: list[BaseEvent] = []
        if block_id not in open_blocks:
            if self.fold.has(block_id) and block_id not in suspended:
                return []  # closed already (a delta after done is refused by the master)
            open_blocks[block_id] = suspended.pop(block_id, "")
            if thinking:
                events.append(ReasoningStartEvent(message_id=block_id, timestamp=ms))
                events.append(
                    ReasoningMessageStartEvent(message_id=block_id, role="reasoning", timestamp=ms)
                )
            else:
                events.append(
                    TextMessageStartEvent(message_id=block_id, role="assistant", timestamp=ms)
                )
        if isinstance(frame, (TextDelta, ThinkingDelta)):
            delta = frame.payload.delta
        else:
            whole = frame.payload.text if isinstance(frame, TextDone) else None
            so_far = open_blocks[block_id]
            delta = whole[len(so_far) :] if whole and whole.startswith(so_far) else ""
        if delta:
            open_blocks[block_id] += delta
            if thinking:
                events.append(
                    ReasoningMessageContentEvent(message_id=block_id, delta=delta, timestamp=ms)
                )
            else:
                events.append(
                    TextMessageContentEvent(message_id=block_id, delta=delta, timestamp=ms)
                )
        if isinstance(frame, (TextDone, ThinkingDone)):
            del open_blocks[block_id]
            if thinking:
                events.append(ReasoningMessageEndEvent(message_id=block_id, timestamp=ms))
                events.append(ReasoningEndEvent(message_id=block_id, timestamp=ms))
            else:
                events.append(TextMessageEndEvent(message_id=block_id, timestamp=ms))
        return events

    def _tool_request(self, turn: _Turn, frame: ToolRequest) -> list[BaseEvent]:
        p = frame.payload
        if p.call_id in turn.calls or self.fold.has(p.call_id):
            return []
        turn.calls.add(p.call_id)
        ms = millis(frame)
        return [
            ToolCallStartEvent(tool_call_id=p.call_id, tool_call_name=p.tool_name, timestamp=ms),
            ToolCallArgsEvent(tool_call_id=p.call_id, delta=as_text(p.input), timestamp=ms),
            ToolCallEndEvent(tool_call_id=p.call_id, timestamp=ms),
        ]

    def _tool_result(self, turn: _Turn, frame: ToolResult) -> list[BaseEvent]:
        p = frame.payload
        if p.call_id not in turn.calls:
            return []
        turn.calls.discard(p.call_id)
        ms = millis(frame)
        events: list[BaseEvent] = [
            ToolCallResultEvent(
                message_id=frame.message_id,
                tool_call_id=p.call_id,
                content=as_text(p.output if p.output is not None else ""),
                role="tool",
                timestamp=ms,
            )
        ]
        if p.status != "ok":
            events.append(
                self._custom(
                    "tool.invoke.result", {"call_id": p.call_id, "status": p.status}, frame
                )
            )
        return events

    def _history(self, frame: History, role: str) -> list[BaseEvent]:
        inner: list[Frame | GenericFrame] = []
        for raw in frame.payload.frames:
            try:
                inner.append(codec.decode(bytes(raw)))
            except ProtocolError:
                continue
        events: list[BaseEvent] = []
        if role == "client" and self._held_synthetic:
            if unfinalizes(frame.payload.buffer_status, inner):
                self._held_synthetic.clear()  # §7.8.3: the finalization is taken back
            else:
                events += self._make_final()
        for item in inner:
            events += self._map(item, role)
        return events

    def _make_final(self) -> list[BaseEvent]:
        """The held synthetic frames stand: the agent's run ended when it went away."""
        held, self._held_synthetic = self._held_synthetic, []
        events: list[BaseEvent] = []
        for frame in held:
            if isinstance(frame, TurnEnd) and self.turn is not None:
                events += self._close_blocks(self.turn, frame)
                events += self._run_end(self.turn, frame.payload.stop_reason, None, frame)
            elif self.turn is not None and not isinstance(frame, TurnEnd):
                events += self._frame(frame, "master")
        return events

    def _end_session(self, frame: Deleted) -> list[BaseEvent]:
        events: list[BaseEvent] = []
        self._held_synthetic.clear()
        if self.turn is not None:
            events += self._close_blocks(self.turn, frame)
            events += self._run_end(self.turn, "error", None, frame)
        self.ended = True
        return events


def _interrupt_of(request: InteractionRequest) -> Interrupt:
    p = request.payload
    metadata: dict[str, Any] | None = None
    if p.options is not None:
        metadata = {"options": msgspec.to_builtins(p.options)}
    return Interrupt(id=p.interaction_id, reason=p.kind, message=p.prompt, metadata=metadata)


def _token_usage(usage: Usage) -> TokenUsage:
    t = usage.payload.token_usage
    return TokenUsage(
        input_tokens=t.input_tokens,
        output_tokens=t.output_tokens,
        reasoning_tokens=t.thinking_tokens,
        cached_input_tokens=t.cache_read_tokens,
        cache_write_input_tokens=t.cache_write_tokens,
    )
