"""Ingest: the events of one AG-UI agent run as the frames a RAWP client sends (notes §16.5).

See :mod:`protocol.agui` for what happens when a stream breaks AG-UI's rules."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

from ag_ui.core import (
    CustomEvent,
    Interrupt,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
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

from .wire import message_text

__all__ = ["AguiIngest", "OpKind", "RawpOp"]

_MAX_ID: Final = 256  # a RAWP message_id is at most 256 characters (notes §3)


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
