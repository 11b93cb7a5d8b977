"""AG-UI ⇄ RAWP, sans I/O: a session's log as AG-UI events, and AG-UI events as RAWP frames.

The decisions are notes §16.5 (a turn is a run, ``threadId`` = session id, ``runId`` = turn id,
a text block is a text message, thinking is reasoning, a tool call is ``TOOL_CALL_*`` +
``TOOL_CALL_RESULT``, a pending interaction is an interrupt, user messages are the run input's
messages, RAWP-only frames are ``CUSTOM`` events named after their RAWP type, a late joiner
gets a ``MESSAGES_SNAPSHOT``). docs/ag-ui.md has the table both ways. AG-UI's event models and
its rules come from the official ``ag-ui-protocol`` package (``ag_ui.core``) and the checks
``@ag-ui/client`` 1.0 runs on every stream (its ``verifyEvents``); nothing of AG-UI is copied
by hand here.

Two pure state machines:

* :class:`AguiEgress` folds stamped log entries (RAWP frames with their seq) into AG-UI
  events, each with its SSE id. It is a function of the log alone, so a stream resumed from
  ``Last-Event-ID`` (:func:`parse_event_id`) re-folds the log silently up to the cursor and
  continues with exactly the events that followed. Rules of the AG-UI client it keeps:
  ``RUN_STARTED`` first; every message, reasoning block and tool call closed before the run's
  end; nothing between runs (RAWP-only frames outside a turn are not sent — they stay in the
  RAWP log); a turn's ``session.usage`` (which RAWP sends after ``session.turn.end``, §7.5.2)
  is placed before the run's end, as a ``CUSTOM`` event and in ``RUN_FINISHED.usage``.
  §7.8: the master's synthetic finalization frames are held back (the AG-UI run stays open
  while the agent is away); a client history that unfinalizes (§7.8.3) drops them, anything
  else makes them final.
* :class:`AguiIngest` folds the events of one AG-UI agent run into :class:`RawpOp` s, the
  frames a RAWP client sends (turn start/end, blocks, tool calls, interactions, usage). A
  stream that breaks AG-UI's rules ends the turn: every open block is closed, every open tool
  call gets an ``error`` result, the turn ends ``error`` with usage and a ``session.error``
  says why — never a half-open turn.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

import msgspec
from ag_ui.core import (
    CustomEvent,
    Event,
    Interrupt,
    MessagesSnapshotEvent,
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
from ag_ui.core import (
    EventType as AguiType,
)
from ag_ui.core.events import BaseEvent
from ag_ui.encoder import EventEncoder
from pydantic import TypeAdapter, ValidationError

from . import codec
from .errors import ProtocolError
from .finalize import unfinalizes
from .frames import (
    Cancel,
    Deleted,
    Frame,
    GenericFrame,
    History,
    InteractionRequest,
    InteractionResponse,
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
from .view import TextBlock, ThinkingBlock, ToolCallBlock, UserMessageBlock

__all__ = [
    "AguiEgress",
    "AguiIngest",
    "EmittedEvent",
    "RawpOp",
    "decode_event",
    "encode_sse",
    "input_user_messages",
    "message_text",
    "messages_from_view",
    "parse_event_id",
    "run_input",
]

_ENCODER: Final = EventEncoder()
_EVENT: Final[TypeAdapter[Any]] = TypeAdapter(Event)
_MAX_ID: Final = 256  # a RAWP message_id is at most 256 characters (notes §3)
_SUCCESS_REASONS: Final = frozenset({"end_turn", "tool_use", "max_tokens", "awaiting_input"})

AguiMessage: TypeAlias = dict[str, Any]
"""One AG-UI message as ``@ag-ui/client`` holds it (camelCase JSON object)."""


# --- wire helpers -------------------------------------------------------------------------


def encode_sse(event: BaseEvent, event_id: str | None = None) -> bytes:
    """One SSE event: ``id:`` (when given) and AG-UI's own encoding (``data:`` + blank line).

    The id is built here from digits and a dot only; the data is JSON, which never holds a
    raw CR or LF, so no received string can split or forge an SSE field (notes §16.7).
    """
    head = f"id: {event_id}\n" if event_id is not None else ""
    return (head + _ENCODER.encode(event)).encode()


def decode_event(data: str) -> BaseEvent:
    """One AG-UI event from an SSE ``data:`` payload (raises ``ValueError`` when it is not)."""
    try:
        event = _EVENT.validate_json(data)
    except ValidationError as exc:
        raise ValueError(f"not an AG-UI event: {exc.errors()[0].get('msg', 'invalid')}") from None
    if not isinstance(event, BaseEvent):
        raise ValueError("not an AG-UI event")
    return event


def parse_event_id(text: str) -> tuple[int, int | None]:
    """``Last-Event-ID`` → (seq, events of that entry already seen, or None for all of them).

    Ids are ``N`` (the last event made from log entry N) or ``N.k`` (event k, from 0, of the
    several entry N made). Raises ``ValueError`` for anything else.
    """
    seq_text, dot, index_text = text.strip().partition(".")
    if not seq_text.isascii() or not seq_text.isdigit() or len(seq_text) > 18:
        raise ValueError(f"not an AG-UI event id of this relay: {text[:40]!r}")
    if not dot:
        return int(seq_text), None
    if not index_text.isascii() or not index_text.isdigit() or len(index_text) > 9:
        raise ValueError(f"not an AG-UI event id of this relay: {text[:40]!r}")
    return int(seq_text), int(index_text) + 1


def message_text(content: Any) -> str:
    """The text of a user message's ``content`` (a string, or the text parts of a list)."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in content if isinstance(content, list) else []:
        text = getattr(part, "text", None)
        if isinstance(text, str):
            parts.append(text)
    return "".join(parts)


def input_user_messages(run: RunAgentInput, known: set[str]) -> list[tuple[str, str]]:
    """The (id, text) of the input's user messages the session does not have yet.

    ``@ag-ui/client`` sends every message it holds on every run; only ``user`` messages whose
    id the session has never seen become ``user.message`` frames (notes §16.5). Ids longer
    than a RAWP ``message_id`` may be are refused by the caller.
    """
    fresh: list[tuple[str, str]] = []
    for message in run.messages:
        if getattr(message, "role", None) != "user" or message.id in known:
            continue
        fresh.append((message.id, message_text(getattr(message, "content", ""))))
    return fresh


def run_input(
    thread_id: str,
    run_id: str,
    messages: Sequence[AguiMessage],
    *,
    resume: Sequence[ResumeEntry] = (),
) -> RunAgentInput:
    """The ``RunAgentInput`` the bridge POSTs to an AG-UI agent."""
    body: dict[str, Any] = {
        "threadId": thread_id,
        "runId": run_id,
        "messages": list(messages),
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    }
    if resume:
        body["resume"] = [entry.model_dump(by_alias=True) for entry in resume]
    return RunAgentInput.model_validate(body)


def _ms(frame: Frame | GenericFrame) -> int:
    return int(frame.timestamp.timestamp() * 1000)


def _as_text(value: Any) -> str:
    """A tool output as ``TOOL_CALL_RESULT.content``: strings as they are, the rest as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _payload(frame: Frame | GenericFrame) -> Any:
    if isinstance(frame, GenericFrame):
        try:
            return msgspec.json.decode(frame.payload)
        except msgspec.DecodeError:
            return {}
    return msgspec.to_builtins(getattr(frame, "payload", {}))


# --- the message list an AG-UI client assembles ------------------------------------------


class MessageFold:
    """The messages ``@ag-ui/client`` assembles from the events this module emits.

    Kept in step with the emitted events so a ``MESSAGES_SNAPSHOT`` is exactly what a client
    that saw the whole stream holds.
    """

    def __init__(self) -> None:
        self.messages: list[AguiMessage] = []
        self._by_id: dict[str, AguiMessage] = {}
        self._calls: dict[str, dict[str, Any]] = {}

    def _add(self, message: AguiMessage) -> None:
        self.messages.append(message)
        self._by_id[message["id"]] = message

    def has(self, message_id: str) -> bool:
        """Is there a message with this id?"""
        return message_id in self._by_id

    def apply(self, event: BaseEvent) -> None:
        """Fold one emitted event."""
        if isinstance(event, TextMessageStartEvent):
            if event.message_id not in self._by_id:
                self._add({"id": event.message_id, "role": "assistant", "content": ""})
        elif isinstance(event, (TextMessageContentEvent, ReasoningMessageContentEvent)):
            found = self._by_id.get(event.message_id)
            if found is not None:
                found["content"] = str(found.get("content", "")) + event.delta
        elif isinstance(event, ReasoningMessageStartEvent):
            if event.message_id not in self._by_id:
                self._add({"id": event.message_id, "role": "reasoning", "content": ""})
        elif isinstance(event, ToolCallStartEvent):
            call = {
                "id": event.tool_call_id,
                "type": "function",
                "function": {"name": event.tool_call_name, "arguments": ""},
            }
            self._calls[event.tool_call_id] = call
            self._add({"id": event.tool_call_id, "role": "assistant", "toolCalls": [call]})
        elif isinstance(event, ToolCallArgsEvent):
            found_call = self._calls.get(event.tool_call_id)
            if found_call is not None:
                found_call["function"]["arguments"] += event.delta
        elif isinstance(event, ToolCallResultEvent):
            self._result(event)
        elif isinstance(event, RunStartedEvent) and event.input is not None:
            for message in event.input.messages:
                if message.id not in self._by_id:
                    self._add(message.model_dump(by_alias=True, mode="json"))

    def _result(self, event: ToolCallResultEvent) -> None:
        message: AguiMessage = {
            "id": event.message_id,
            "toolCallId": event.tool_call_id,
            "role": "tool",
            "content": event.content,
        }
        owner = next(
            (
                i
                for i, m in enumerate(self.messages)
                if m.get("role") == "assistant"
                and any(c["id"] == event.tool_call_id for c in m.get("toolCalls", []))
            ),
            -1,
        )
        if owner == -1:
            self._add(message)
            return
        at = owner + 1
        while at < len(self.messages) and self.messages[at].get("role") == "tool":
            at += 1
        self.messages.insert(at, message)
        self._by_id[message["id"]] = message

    def snapshot(self) -> MessagesSnapshotEvent:
        """``MESSAGES_SNAPSHOT`` of the messages so far."""
        return MessagesSnapshotEvent.model_validate({"messages": self.messages})


# --- egress: RAWP log -> AG-UI events -----------------------------------------------------


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
            events.append(self._custom(name, _payload(frame), frame))
        return events

    def _custom(self, name: str, value: Any, frame: Frame | GenericFrame | None) -> CustomEvent:
        if isinstance(frame, Frame):
            return CustomEvent(name=name, value=value, timestamp=_ms(frame))
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
            timestamp=_ms(frame),
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
            events.append(self._custom("session.usage", _payload(usage), usage))
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
                    timestamp=_ms(frame),
                )
            )
        else:
            events.append(
                RunErrorEvent(
                    message=f"the turn ended: {stop_reason}",
                    code=stop_reason,
                    usage=tokens,
                    timestamp=_ms(frame),
                )
            )
        self.turn = None
        return events

    def _close_blocks(self, turn: _Turn, frame: Frame) -> list[BaseEvent]:
        events: list[BaseEvent] = []
        ms = _ms(frame)
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
                timestamp=_ms(frame),
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
        ms = _ms(frame)
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
        ms = _ms(frame)
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
        ms = _ms(frame)
        return [
            ToolCallStartEvent(tool_call_id=p.call_id, tool_call_name=p.tool_name, timestamp=ms),
            ToolCallArgsEvent(tool_call_id=p.call_id, delta=_as_text(p.input), timestamp=ms),
            ToolCallEndEvent(tool_call_id=p.call_id, timestamp=ms),
        ]

    def _tool_result(self, turn: _Turn, frame: ToolResult) -> list[BaseEvent]:
        p = frame.payload
        if p.call_id not in turn.calls:
            return []
        turn.calls.discard(p.call_id)
        ms = _ms(frame)
        events: list[BaseEvent] = [
            ToolCallResultEvent(
                message_id=frame.message_id,
                tool_call_id=p.call_id,
                content=_as_text(p.output if p.output is not None else ""),
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


# --- ingest: AG-UI events -> RAWP frames --------------------------------------------------

OpKind: TypeAlias = Literal[
    "turn_start",
    "text_delta",
    "text_done",
    "thinking_delta",
    "thinking_done",
    "tool_request",
    "tool_result",
    "interaction_request",
    "turn_end",
    "usage",
    "error",
]


@dataclass(frozen=True)
class RawpOp:
    """One frame a RAWP client sends: the :class:`protocol.client.RawpClient` helper and its
    keyword arguments."""

    kind: OpKind
    args: dict[str, Any] = field(default_factory=dict)


class AguiIngest:
    """The events of an AG-UI agent's runs → the frames of one RAWP client (notes §16.5).

    One instance per RAWP turn; a turn spans several AG-UI runs when interrupts suspend it.
    :meth:`feed` never raises: a rule broken ends the turn (:meth:`abort`).
    """

    def __init__(
        self,
        turn_id: str | None = None,
        *,
        turn_open: bool = False,
        taken_ids: Iterable[str] = (),
    ) -> None:
        self.taken = frozenset(taken_ids)  # block and call ids the session has used already
        self.turn_id = turn_id or str(uuid.uuid4())
        self.turn_started = turn_open
        self.turn_ended = False
        self.run_open = False
        self.run_done = False
        self.interrupts: list[Interrupt] = []
        self.text: set[str] = set()
        self.thinking: set[str] = set()
        self.spans: set[str] = set()
        self.seen_blocks: set[str] = set()
        self.streaming_calls: dict[str, tuple[str, list[str]]] = {}  # id -> (name, args)
        self.unresolved_calls: set[str] = set()
        self.call_ids: set[str] = set()
        self.tool_count = 0
        self.usage: list[TokenUsage] = []

    # --- the run's lifecycle --------------------------------------------------------------

    def begin_run(self) -> None:
        """A new AG-UI run of this turn is being requested (first run, or after answers)."""
        self.run_open = False
        self.run_done = False
        self.interrupts = []

    def feed(self, event: BaseEvent) -> list[RawpOp]:
        """Fold one event of the run's stream."""
        if self.turn_ended:
            return []
        try:
            return self._feed(event)
        except _Broken as broken:
            return self.abort(str(broken))

    def end_of_stream(self) -> list[RawpOp]:
        """The agent's stream ended; a run without ``RUN_FINISHED`` / ``RUN_ERROR`` is broken."""
        if self.turn_ended or self.run_done:
            return []
        return self.abort("the AG-UI stream ended before RUN_FINISHED or RUN_ERROR")

    def abort(self, reason: str, *, code: str = "agui_stream_invalid") -> list[RawpOp]:
        """End the turn ``error``: say why (``session.error``), close what is open.

        The error comes before the turn's end, so it is inside the run for AG-UI viewers too.
        """
        if self.turn_ended:
            return []
        ops = self._start_turn()
        ops.append(RawpOp("error", {"error_code": code, "message": _one_line(reason)}))
        return ops + self._close("error", "the AG-UI run broke off: " + reason)

    def cancel(self) -> list[RawpOp]:
        """An edge cancelled the turn (``control.cancel``)."""
        if self.turn_ended:
            return []
        return self._close("cancelled", "cancelled")

    # --- folding --------------------------------------------------------------------------

    def _start_turn(self) -> list[RawpOp]:
        if self.turn_started:
            return []
        self.turn_started = True
        return [RawpOp("turn_start", {"turn_id": self.turn_id})]

    def _feed(self, event: BaseEvent) -> list[RawpOp]:
        kind = event.type
        if self.run_done:
            raise _Broken(f"{kind.value} after the run's end")
        if not self.run_open:
            if isinstance(event, RunStartedEvent):
                self.run_open = True
                return self._start_turn()
            if isinstance(event, RunErrorEvent):
                return [*self._start_turn(), *self._run_error(event)]
            raise _Broken(f"the first event must be RUN_STARTED, not {kind.value}")
        if isinstance(event, RunStartedEvent):
            raise _Broken("RUN_STARTED while the run is open")
        ops = self._content(event)
        if ops is not None:
            return ops
        if isinstance(event, RunFinishedEvent):
            return self._run_finished(event)
        if isinstance(event, RunErrorEvent):
            return self._run_error(event)
        if kind is AguiType.CUSTOM and isinstance(event, CustomEvent):
            return self._custom(event)
        if kind in (
            AguiType.TEXT_MESSAGE_CHUNK,
            AguiType.TOOL_CALL_CHUNK,
            AguiType.REASONING_MESSAGE_CHUNK,
        ):
            raise _Broken(f"{kind.value} is not supported by this bridge (send START/CONTENT/END)")
        return []  # steps, state, activity, raw: no RAWP frame (docs/ag-ui.md)

    def _content(self, event: BaseEvent) -> list[RawpOp] | None:
        if isinstance(event, TextMessageStartEvent):
            self._new_block(event.message_id)
            self.text.add(event.message_id)
            return []
        if isinstance(event, TextMessageContentEvent):
            self._known(self.text, event.message_id, "text message")
            return (
                [RawpOp("text_delta", {"block_id": event.message_id, "delta": event.delta})]
                if event.delta
                else []
            )
        if isinstance(event, TextMessageEndEvent):
            self._known(self.text, event.message_id, "text message")
            self.text.discard(event.message_id)
            return [RawpOp("text_done", {"block_id": event.message_id})]
        if isinstance(event, ReasoningStartEvent):
            if event.message_id in self.spans:
                raise _Broken(f"reasoning span {event.message_id!r} is already open")
            self.spans.add(event.message_id)
            return []
        if isinstance(event, ReasoningEndEvent):
            self._known(self.spans, event.message_id, "reasoning span")
            self.spans.discard(event.message_id)
            return []
        if isinstance(event, ReasoningMessageStartEvent):
            self._new_block(event.message_id)
            self.thinking.add(event.message_id)
            return []
        if isinstance(event, ReasoningMessageContentEvent):
            self._known(self.thinking, event.message_id, "reasoning message")
            return (
                [RawpOp("thinking_delta", {"block_id": event.message_id, "delta": event.delta})]
                if event.delta
                else []
            )
        if isinstance(event, ReasoningMessageEndEvent):
            self._known(self.thinking, event.message_id, "reasoning message")
            self.thinking.discard(event.message_id)
            return [RawpOp("thinking_done", {"block_id": event.message_id})]
        return self._tools(event)

    def _tools(self, event: BaseEvent) -> list[RawpOp] | None:
        if isinstance(event, ToolCallStartEvent):
            call_id = event.tool_call_id
            name = event.tool_call_name
            if call_id in self.call_ids or call_id in self.taken or not _usable(call_id):
                raise _Broken(f"tool call {call_id[:64]!r} started twice (or its id is unusable)")
            if not _usable(name):
                raise _Broken("a tool name is empty or longer than 256 characters")
            self.call_ids.add(call_id)
            self.streaming_calls[call_id] = (event.tool_call_name, [])
            return []
        if isinstance(event, ToolCallArgsEvent):
            self._known(self.streaming_calls, event.tool_call_id, "tool call")
            self.streaming_calls[event.tool_call_id][1].append(event.delta)
            return []
        if isinstance(event, ToolCallEndEvent):
            self._known(self.streaming_calls, event.tool_call_id, "tool call")
            name, parts = self.streaming_calls.pop(event.tool_call_id)
            self.unresolved_calls.add(event.tool_call_id)
            self.tool_count += 1
            args = "".join(parts)
            return [
                RawpOp(
                    "tool_request",
                    {"call_id": event.tool_call_id, "tool_name": name, "input": _tool_input(args)},
                )
            ]
        if isinstance(event, ToolCallResultEvent):
            self._known(self.unresolved_calls, event.tool_call_id, "finished tool call")
            self.unresolved_calls.discard(event.tool_call_id)
            output = (
                event.content if isinstance(event.content, str) else message_text(event.content)
            )
            return [
                RawpOp(
                    "tool_result", {"call_id": event.tool_call_id, "status": "ok", "output": output}
                )
            ]
        return None

    def _new_block(self, block_id: str) -> None:
        if block_id in self.seen_blocks or block_id in self.taken or not _usable(block_id):
            raise _Broken(f"message {block_id[:64]!r} started twice (or its id is unusable)")
        self.seen_blocks.add(block_id)

    @staticmethod
    def _known(open_ids: Iterable[str], item_id: str, what: str) -> None:
        if item_id not in open_ids:
            raise _Broken(f"content for an unknown or closed {what} {item_id[:64]!r}")

    def _custom(self, event: CustomEvent) -> list[RawpOp]:
        return []

    def _run_finished(self, event: RunFinishedEvent) -> list[RawpOp]:
        still_open = sorted(self.text | self.thinking | self.spans | set(self.streaming_calls))
        if still_open:
            raise _Broken(f"RUN_FINISHED while {', '.join(i[:64] for i in still_open[:5])} is open")
        self.run_done = True
        self.run_open = False
        if event.usage:
            self.usage += event.usage
        outcome = event.outcome
        if isinstance(outcome, RunFinishedInterruptOutcome):
            if not all(_usable(i.id) for i in outcome.interrupts):
                raise _Broken("an interrupt id is empty or longer than 256 characters")
            self.interrupts = list(outcome.interrupts)
            return [
                RawpOp(
                    "interaction_request",
                    {
                        "interaction_id": i.id,
                        "kind": i.reason
                        if i.reason in ("confirmation", "choice", "input")
                        else "input",
                        "prompt": i.message or i.reason,
                        "options": _options(i),
                    },
                )
                for i in outcome.interrupts
            ]
        if isinstance(outcome, RunFinishedCancelledOutcome):
            return self._close("cancelled", "cancelled")
        return self._close(
            "end_turn", "no result came back: AG-UI client-side tools do not run on a RAWP edge"
        )

    def _run_error(self, event: RunErrorEvent) -> list[RawpOp]:
        self.run_done = True
        self.run_open = False
        if event.usage:
            self.usage += event.usage
        ops = self._start_turn()
        ops.append(
            RawpOp("error", {"error_code": "agui_run_error", "message": _one_line(event.message)})
        )
        return ops + self._close("error", "the AG-UI run failed")

    def _close(self, stop_reason: str, why: str) -> list[RawpOp]:
        """Close everything open, end the turn, report usage (§7.5.2: usage right after)."""
        if self.turn_ended:
            return []
        ops = self._start_turn()
        for block_id in sorted(self.text):
            ops.append(RawpOp("text_done", {"block_id": block_id}))
        for block_id in sorted(self.thinking):
            ops.append(RawpOp("thinking_done", {"block_id": block_id}))
        status = "error" if stop_reason == "error" else "cancelled"
        for call_id, (name, _parts) in sorted(self.streaming_calls.items()):
            ops.append(RawpOp("tool_request", {"call_id": call_id, "tool_name": name, "input": {}}))
            self.unresolved_calls.add(call_id)
        for call_id in sorted(self.unresolved_calls):
            ops.append(RawpOp("tool_result", {"call_id": call_id, "status": status, "output": why}))
        self.text.clear()
        self.thinking.clear()
        self.spans.clear()
        self.streaming_calls.clear()
        self.unresolved_calls.clear()
        self.turn_ended = True
        ops.append(
            RawpOp(
                "turn_end",
                {
                    "turn_id": self.turn_id,
                    "stop_reason": stop_reason,
                    "tool_invocation_count": self.tool_count,
                },
            )
        )
        ops.append(RawpOp("usage", _usage_args(self.usage, self.turn_id)))
        return ops


class _Broken(Exception):
    """An AG-UI rule the stream broke (the message says which)."""


def _one_line(text: str) -> str:
    """An agent's text as one bounded line (no control characters) for a ``session.error``."""
    cleaned = "".join(ch if ch.isprintable() else " " for ch in text[:2000])
    return cleaned or "(no message)"


def _usable(identifier: str) -> bool:
    """Can this AG-UI id be a RAWP id (1 to 256 characters, notes §3)?"""
    return 0 < len(identifier) <= _MAX_ID


def _tool_input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"arguments": value}


def _options(interrupt: Interrupt) -> list[Any] | None:
    metadata = interrupt.metadata if isinstance(interrupt.metadata, dict) else {}
    options = metadata.get("options")
    return options if isinstance(options, list) else None


def _usage_args(usage: Sequence[TokenUsage], turn_id: str) -> dict[str, Any]:
    def total(name: str) -> int:
        return sum(int(getattr(u, name) or 0) for u in usage)

    args: dict[str, Any] = {
        "turn_id": turn_id,
        "input_tokens": total("input_tokens"),
        "output_tokens": total("output_tokens"),
    }
    for rawp, agui in (
        ("thinking_tokens", "reasoning_tokens"),
        ("cache_read_tokens", "cached_input_tokens"),
        ("cache_write_tokens", "cache_write_input_tokens"),
    ):
        if any(getattr(u, agui) is not None for u in usage):
            args[rawp] = total(agui)
    return args


def messages_from_view(blocks: Iterable[Any]) -> list[AguiMessage]:
    """A RAWP view's transcript as AG-UI messages: what the bridge sends as run input.

    User messages, text (assistant), thinking (reasoning), tool calls (an assistant message
    per call) and their results (a tool message, id ``result-<call_id>``), in view order.
    """
    out: list[AguiMessage] = []
    for block in blocks:
        if isinstance(block, UserMessageBlock):
            out.append({"id": block.message_id, "role": "user", "content": block.text})
        elif isinstance(block, TextBlock):
            out.append({"id": block.block_id, "role": "assistant", "content": block.text})
        elif isinstance(block, ThinkingBlock):
            out.append({"id": block.block_id, "role": "reasoning", "content": block.text})
        elif isinstance(block, ToolCallBlock):
            call = {
                "id": block.call_id,
                "type": "function",
                "function": {"name": block.tool_name, "arguments": _as_text(block.input)},
            }
            out.append({"id": block.call_id, "role": "assistant", "toolCalls": [call]})
            if block.status != "pending":
                content = _as_text(block.output if block.output is not None else "")
                out.append(
                    {
                        "id": f"result-{block.call_id}",
                        "role": "tool",
                        "toolCallId": block.call_id,
                        "content": content,
                    }
                )
    return out
