"""An ACP agent's turn → the frames of one RAWP client, sans I/O (notes §17.11, docs/acp.md).

:class:`AcpIngest` follows one ``session/prompt`` of an ACP agent: each ``session/update``,
``session/request_permission`` and the prompt's answer become :class:`AcpOp` (a
:class:`protocol.client.RawpClient` helper and its arguments), in an order the RAWP state
machine accepts: text and thinking blocks are closed before anything else starts, every tool
call is resolved before the turn ends, ``session.usage`` follows ``session.turn.end``. What
RAWP has no frame for becomes an ignorable ``acp.*`` frame carrying the ACP object.

Every received string is hostile: ids that cannot be RAWP ids are replaced, a text chunk is
cut into deltas that fit a frame, an object too large for a frame is replaced by a marker.
"""

from __future__ import annotations

import json
import math
import uuid
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from acp.schema import (
    AgentMessageChunk,
    AgentPlanContentUpdate,
    AgentPlanRemovedUpdate,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AvailableCommandsUpdate,
    ConfigOptionUpdate,
    CurrentModeUpdate,
    PermissionOption,
    PromptResponse,
    SessionInfoUpdate,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UsageUpdate,
    UserMessageChunk,
)
from pydantic import BaseModel

from .. import names

__all__ = [
    "MAX_DELTA_CHARS",
    "MAX_OBJECT_BYTES",
    "MAX_OPTION_NAME_CHARS",
    "MAX_PERMISSION_OPTIONS",
    "AcpIngest",
    "AcpOp",
    "SessionUpdate",
    "answer_outcome",
    "dump",
    "permission_options",
    "permission_problem",
]

SessionUpdate = (
    UserMessageChunk
    | AgentMessageChunk
    | AgentThoughtChunk
    | ToolCallStart
    | ToolCallProgress
    | AgentPlanUpdate
    | AgentPlanContentUpdate
    | AgentPlanRemovedUpdate
    | AvailableCommandsUpdate
    | CurrentModeUpdate
    | ConfigOptionUpdate
    | SessionInfoUpdate
    | UsageUpdate
)

MAX_DELTA_CHARS: Final = 100_000
"""One text or thinking delta at most (6 bytes a character escaped: within a 1 MiB frame)."""
MAX_PERMISSION_OPTIONS: Final = 64
"""Options of one permission request a UI is asked at most (ACP agents offer two to four)."""
MAX_OPTION_NAME_CHARS: Final = 1000
"""One permission option's ``name`` at most (64 of them, escaped, fit in one frame)."""
MAX_OBJECT_BYTES: Final = 256 * 1024
"""A tool input or output, or an ``acp.*`` payload, larger than this is replaced by a marker."""
_MAX_ID: Final = 200
_MAX_NAME: Final = 200
_MAX_CURRENCY: Final = 16

OpKind = Literal[
    "turn_start",
    "text_delta",
    "text_done",
    "thinking_delta",
    "thinking_done",
    "tool_request",
    "tool_result",
    "interaction_request",
    "interaction_cancel",
    "turn_end",
    "usage",
    "error",
    "rename",
    "ignorable",
]

# ACP stop reasons RAWP has no word for: the nearest RAWP one, the ACP one kept in acp.stop_reason.
_STOP: Final[dict[str, str]] = {
    "end_turn": "end_turn",
    "max_tokens": "max_tokens",
    "cancelled": "cancelled",
    "max_turn_requests": "max_tokens",
    "refusal": "end_turn",
}


@dataclass(frozen=True)
class AcpOp:
    """One frame a RAWP client sends: the :class:`protocol.client.RawpClient` helper's name
    and its keyword arguments."""

    kind: OpKind
    args: dict[str, Any] = field(default_factory=dict)


def dump(model: BaseModel) -> dict[str, Any]:
    """An ACP object as ACP writes it (camelCase, no nulls), bounded to :data:`MAX_OBJECT_BYTES`."""
    value = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return bounded_object(value)


def bounded_object(value: Any) -> dict[str, Any]:
    """``value`` as an object, or a marker saying how big it was when it is too big."""
    size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_OBJECT_BYTES:
        return {"truncated": True, "bytes": size}
    return value if isinstance(value, dict) else {"value": value}


def _bounded_value(value: Any) -> Any:
    size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_OBJECT_BYTES:
        return {"truncated": True, "bytes": size}
    return value


def _usable(text: str | None) -> bool:
    return bool(text) and len(text or "") <= _MAX_ID and names.one_line(text or "") == text


def _new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def _pieces(text: str) -> list[str]:
    return [text[i : i + MAX_DELTA_CHARS] for i in range(0, len(text), MAX_DELTA_CHARS)]


def _cost(update: UsageUpdate) -> tuple[float, str] | None:
    """A usage_update's cost as (amount ≥ 0, currency), or None when it has none a reader can
    trust: an amount that is not a finite number, a currency that is not one short line."""
    cost = update.cost
    if cost is None or not math.isfinite(cost.amount):
        return None
    currency = cost.currency
    if not currency or len(currency) > _MAX_CURRENCY or names.one_line(currency) != currency:
        return None
    return max(cost.amount, 0.0), currency


def permission_problem(options: list[PermissionOption]) -> str | None:
    """Why these options cannot be a RAWP ``choice`` every UI can show and answer, or None.

    At most :data:`MAX_PERMISSION_OPTIONS` options, each with an ``optionId`` of 1 to 200
    characters (what an answer names back) and a ``name`` of at most
    :data:`MAX_OPTION_NAME_CHARS` characters: the interaction then fits in one frame.
    """
    if len(options) > MAX_PERMISSION_OPTIONS:
        return f"{len(options)} options; at most {MAX_PERMISSION_OPTIONS} can be asked"
    for index, option in enumerate(options):
        if not 0 < len(option.option_id) <= _MAX_ID:
            return (
                f"option {index}'s optionId has {len(option.option_id)} characters (1 to {_MAX_ID})"
            )
        if len(option.name) > MAX_OPTION_NAME_CHARS:
            return (
                f"option {index}'s name has {len(option.name)} characters "
                f"(at most {MAX_OPTION_NAME_CHARS})"
            )
    if len({o.option_id for o in options}) != len(options):
        return "two options have the same optionId"
    return None


def permission_options(options: list[PermissionOption]) -> list[dict[str, Any]]:
    """ACP permission options as a RAWP choice's options: ``value`` is what an answer names
    (the ``optionId``), ``label`` what a UI shows (control characters escaped), ``kind``
    ACP's hint. Check :func:`permission_problem` first."""
    return [
        {"value": o.option_id, "label": names.one_line(o.name), "kind": o.kind} for o in options
    ]


def answer_outcome(options: list[PermissionOption], response: Any) -> tuple[str | None, bool]:
    """The ``optionId`` an edge's answer selects, and whether the answer named one.

    An option id (or ``{"value"|"option_id"|"optionId": id}``) selects it; ``true`` selects
    the first allow option and ``false`` the first reject option. Anything else selects the
    first reject option (never allow on an answer nobody can read), or None (cancelled) when
    the agent offered none.
    """
    ids = {o.option_id for o in options}
    chosen: Any = response
    if isinstance(response, dict):
        chosen = next(
            (response[k] for k in ("value", "option_id", "optionId") if k in response), None
        )
    if isinstance(chosen, str) and chosen in ids:
        return chosen, True
    if isinstance(chosen, bool):
        wanted = ("allow_once", "allow_always") if chosen else ("reject_once", "reject_always")
        for option in options:
            if option.kind in wanted:
                return option.option_id, True
    for option in options:
        if option.kind in ("reject_once", "reject_always"):
            return option.option_id, False
    return None, False


class AcpIngest:
    """One ACP agent's updates → RAWP frames, across turns.

    :meth:`begin` opens a turn for a prompt; :meth:`update` maps a ``session/update``;
    :meth:`permission` a ``session/request_permission``; :meth:`end` the prompt's answer;
    :meth:`abort` a turn that cannot finish (the agent failed). ``taken_ids`` are block and
    call ids the session already used (an agent's ``messageId`` reused across turns gets a
    fresh block id).
    """

    def __init__(self, taken_ids: set[str] | None = None) -> None:
        self.taken: set[str] = set(taken_ids or ())
        self.turn_id: str | None = None
        self.text: str | None = None
        self.thinking: str | None = None
        self._text_source: str | None = None
        self._thinking_source: str | None = None
        self.open_calls: dict[str, str] = {}  # ACP toolCallId -> RAWP call id
        self.calls: dict[str, str] = {}  # every ACP toolCallId of the turn -> RAWP call id
        self.tool_count = 0
        self.context: tuple[int, int] | None = None  # (used, size) of the last usage_update
        self.cost: tuple[float, str] | None = None

    @property
    def in_turn(self) -> bool:
        """Whether a turn is open."""
        return self.turn_id is not None

    # --- the turn ----------------------------------------------------------------------

    def begin(self, turn_id: str | None = None) -> list[AcpOp]:
        """Open the turn of one prompt."""
        self.turn_id = turn_id or str(uuid.uuid4())
        self.calls = {}
        self.open_calls = {}
        self.tool_count = 0
        return [AcpOp("turn_start", {"turn_id": self.turn_id})]

    def end(self, response: PromptResponse) -> list[AcpOp]:
        """The prompt's answer: close what is open, end the turn, report usage."""
        ops = self._close_blocks()
        ops += self._resolve_calls("the turn ended before the tool call finished")
        reason = response.stop_reason
        if reason not in ("end_turn", "max_tokens", "cancelled"):
            ops.append(
                AcpOp("ignorable", {"type": "acp.stop_reason", "payload": {"stopReason": reason}})
            )
        ops += self._finish(_STOP.get(reason, "end_turn"), response)
        return ops

    def cancelled(self) -> list[AcpOp]:
        """End the turn as cancelled without the agent's answer (it did not stop in time)."""
        ops = self._close_blocks() + self._resolve_calls("cancelled", status="cancelled")
        return ops + self._finish("cancelled", None)

    def abort(self, message: str, *, code: str) -> list[AcpOp]:
        """End the turn with ``error`` and say why in a ``session.error`` (non-fatal)."""
        if self.turn_id is None:
            return [AcpOp("error", {"error_code": code, "message": message})]
        ops = self._close_blocks() + self._resolve_calls(message, status="cancelled")
        ops.append(AcpOp("error", {"error_code": code, "message": message}))
        return ops + self._finish("error", None)

    def _finish(self, stop_reason: str, response: PromptResponse | None) -> list[AcpOp]:
        turn_id = self.turn_id
        assert turn_id is not None
        self.turn_id = None
        ops = [
            AcpOp(
                "turn_end",
                {
                    "turn_id": turn_id,
                    "stop_reason": stop_reason,
                    "tool_invocation_count": self.tool_count,
                },
            )
        ]
        return [*ops, AcpOp("usage", self._usage_args(turn_id, response))]

    def _usage_args(self, turn_id: str, response: PromptResponse | None) -> dict[str, Any]:
        usage = response.usage if response is not None else None
        args: dict[str, Any] = {
            "input_tokens": usage.input_tokens if usage else 0,
            "output_tokens": usage.output_tokens if usage else 0,
            "turn_id": turn_id,
        }
        if usage is not None:
            args["thinking_tokens"] = usage.thought_tokens
            args["cache_read_tokens"] = usage.cached_read_tokens
            args["cache_write_tokens"] = usage.cached_write_tokens
        if self.cost is not None:
            args["cost_used"], args["cost_unit"] = self.cost
        if self.context is not None:
            used, size = self.context
            args["context_window"] = {"used": used, "capacity": size}
        return args

    # --- updates ------------------------------------------------------------------------

    def update(self, update: SessionUpdate) -> list[AcpOp]:
        """One ``session/update``'s frames."""
        kind = update.session_update
        if isinstance(update, AgentMessageChunk | AgentThoughtChunk) and self.in_turn:
            content = update.content
            if isinstance(content, TextContentBlock):
                return self._chunk(update, content.text)
        if isinstance(update, ToolCallStart) and self.in_turn:
            return self._tool_call(update)
        if isinstance(update, ToolCallProgress) and self.in_turn:
            return self._tool_update(update)
        if isinstance(update, SessionInfoUpdate) and isinstance(update.title, str):
            title = names.one_line(update.title).strip()[:_MAX_NAME]
            if title:
                return [AcpOp("rename", {"name": title})]
        payload = dump(update)
        if isinstance(update, UsageUpdate):
            self.context = (update.used, update.size)
            self.cost = _cost(update)
            if self.cost is None:
                payload.pop("cost", None)  # NaN, ±inf or no readable currency: not a cost
        # Everything else (and what arrives outside a turn) keeps its ACP shape.
        ops = self._close_blocks() if self.in_turn else []
        ops.append(AcpOp("ignorable", {"type": f"acp.{kind}", "payload": payload}))
        return ops

    def _chunk(self, update: AgentMessageChunk | AgentThoughtChunk, text: str) -> list[AcpOp]:
        thinking = isinstance(update, AgentThoughtChunk)
        source = update.message_id
        ops: list[AcpOp] = []
        current = self.thinking if thinking else self.text
        current_source = self._thinking_source if thinking else self._text_source
        if current is not None and source is not None and source != current_source:
            ops += self._close_blocks()  # a new messageId starts a new message
            current = None
        if current is None:
            ops += self._close_blocks()
            block = source if _usable(source) and source not in self.taken else _new_id("acp")
            self.taken.add(block)  # type: ignore[arg-type]
            if thinking:
                self.thinking, self._thinking_source = block, source
            else:
                self.text, self._text_source = block, source
            current = block
        kind: OpKind = "thinking_delta" if thinking else "text_delta"
        for piece in _pieces(text):
            ops.append(AcpOp(kind, {"block_id": current, "delta": piece}))
        return ops

    def _close_blocks(self) -> list[AcpOp]:
        ops: list[AcpOp] = []
        if self.text is not None:
            ops.append(AcpOp("text_done", {"block_id": self.text}))
            self.text = self._text_source = None
        if self.thinking is not None:
            ops.append(AcpOp("thinking_done", {"block_id": self.thinking}))
            self.thinking = self._thinking_source = None
        return ops

    def _call_id(self, tool_call_id: str) -> str:
        call = tool_call_id if _usable(tool_call_id) and tool_call_id not in self.taken else None
        call = call or _new_id("acp-call")
        self.taken.add(call)
        self.calls[tool_call_id] = call
        return call

    def _request(self, tool_call_id: str, title: str | None, raw_input: Any) -> list[AcpOp]:
        call = self._call_id(tool_call_id)
        self.open_calls[tool_call_id] = call
        self.tool_count += 1
        if isinstance(raw_input, dict):
            tool_input = bounded_object(raw_input)
        elif raw_input is None:
            tool_input = {}
        else:
            tool_input = {"value": _bounded_value(raw_input)}
        name = names.one_line(title or "").strip()[:_MAX_NAME] or "tool"
        return [AcpOp("tool_request", {"call_id": call, "tool_name": name, "input": tool_input})]

    def _tool_call(self, update: ToolCallStart) -> list[AcpOp]:
        ops = self._close_blocks()
        if update.tool_call_id in self.calls:  # announced twice: the second is an update
            progress = ToolCallProgress.model_validate(
                {**update.model_dump(by_alias=True), "sessionUpdate": "tool_call_update"}
            )
            return ops + self._tool_update(progress)
        ops += self._request(update.tool_call_id, update.title, update.raw_input)
        call = self.calls[update.tool_call_id]
        extra = {
            k: v
            for k, v in dump(update).items()
            if k in ("kind", "status", "content", "locations", "_meta", "truncated", "bytes")
        }
        if extra:
            payload = {"call_id": call, "toolCallId": update.tool_call_id, **extra}
            ops.append(AcpOp("ignorable", {"type": "acp.tool_call", "payload": payload}))
        if update.status in ("completed", "failed"):
            ops += self._result(update.tool_call_id, update.status, update)
        return ops

    def _tool_update(self, update: ToolCallProgress) -> list[AcpOp]:
        ops = self._close_blocks()
        if update.tool_call_id not in self.calls:
            ops += self._request(update.tool_call_id, update.title, update.raw_input)
        call = self.calls[update.tool_call_id]
        payload = {"call_id": call, **dump(update)}
        ops.append(AcpOp("ignorable", {"type": "acp.tool_call_update", "payload": payload}))
        if update.status in ("completed", "failed") and update.tool_call_id in self.open_calls:
            ops += self._result(update.tool_call_id, update.status, update)
        return ops

    def _result(
        self, tool_call_id: str, status: str, update: ToolCallStart | ToolCallProgress
    ) -> list[AcpOp]:
        call = self.open_calls.pop(tool_call_id)
        output: Any = update.raw_output
        if output is None and update.content:
            texts = [
                c.content.text
                for c in update.content
                if c.type == "content" and isinstance(c.content, TextContentBlock)
            ]
            output = "".join(texts) if texts else [dump(c) for c in update.content]
        args = {
            "call_id": call,
            "status": "ok" if status == "completed" else "error",
            "output": _bounded_value(output),
        }
        return [AcpOp("tool_result", args)]

    def _resolve_calls(self, why: str, *, status: str = "cancelled") -> list[AcpOp]:
        ops = [
            AcpOp("tool_result", {"call_id": call, "status": status, "output": why})
            for call in self.open_calls.values()
        ]
        self.open_calls.clear()
        return ops

    # --- permissions ---------------------------------------------------------------------

    def permission(
        self, interaction_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> list[AcpOp]:
        """A ``session/request_permission``: the tool call as ``acp.permission``, then the
        RAWP ``choice`` interaction the first edge answers."""
        ops = self._close_blocks()
        payload = {"interaction_id": interaction_id, "toolCall": dump(tool_call)}
        ops.append(AcpOp("ignorable", {"type": "acp.permission", "payload": payload}))
        title = names.one_line(tool_call.title or "").strip()[:_MAX_NAME]
        prompt = f"Allow {title}?" if title else "Allow this tool call?"
        ops.append(
            AcpOp(
                "interaction_request",
                {
                    "interaction_id": interaction_id,
                    "kind": "choice",
                    "prompt": prompt,
                    "options": permission_options(options),
                },
            )
        )
        return ops
