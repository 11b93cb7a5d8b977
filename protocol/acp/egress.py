"""A RAWP session's frames → what an ACP editor is sent, sans I/O (notes §17.11, docs/acp.md).

:class:`AcpEgress` folds the frames an edge is delivered (the backlog, then live frames, in
seq order) into :class:`Out` items: ``session/update`` notifications, permission questions
for the editor, the settling of a question someone else answered (or the agent withdrew), and
the turn markers a ``session/prompt`` waits for. The ``acp.*`` frames a bridged ACP agent
left in the log give back the ACP objects RAWP has no frame for (plans, commands, modes, the
tool call's kind, content and locations, the permission's tool call).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

import msgspec
from acp.schema import (
    AgentMessageChunk,
    AgentThoughtChunk,
    ContentToolCallContent,
    PermissionOption,
    SessionInfoUpdate,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UsageUpdate,
    UserMessageChunk,
)
from pydantic import BaseModel, TypeAdapter, ValidationError

from ..frames import (
    Frame,
    GenericFrame,
    InteractionCancel,
    InteractionRequest,
    InteractionResponse,
    Renamed,
    TextDelta,
    ThinkingDelta,
    ToolRequest,
    ToolResult,
    TurnEnd,
    TurnStart,
    Usage,
    UserMessage,
)
from .ingest import SessionUpdate

__all__ = ["AcpEgress", "Ask", "Out"]

_UPDATE: Final[TypeAdapter[Any]] = TypeAdapter(SessionUpdate)
# acp.* frames that carry one ACP session update as their payload (what the bridge wrote).
_AS_UPDATE: Final = frozenset(
    {
        "acp.user_message_chunk",
        "acp.agent_message_chunk",
        "acp.agent_thought_chunk",
        "acp.plan",
        "acp.plan_update",
        "acp.plan_removed",
        "acp.available_commands_update",
        "acp.current_mode_update",
        "acp.config_option_update",
        "acp.session_info_update",
        "acp.usage_update",
    }
)
_STOP: Final[dict[str, str]] = {
    "end_turn": "end_turn",
    "max_tokens": "max_tokens",
    "cancelled": "cancelled",
    "tool_use": "end_turn",
    "awaiting_input": "end_turn",
}


@dataclass
class Ask:
    """A question for the editor: a ``session/request_permission`` and, for each ``optionId``,
    the value the RAWP answer carries."""

    interaction_id: str
    tool_call: ToolCallUpdate
    options: list[PermissionOption]
    values: dict[str, Any] = field(default_factory=dict)


@dataclass
class Out:
    """One thing to tell the editor, or a marker for the prompt that waits.

    ``update``: a ``session/update``; ``ask``: a permission question; ``settled``: the
    question ``interaction_id`` was answered elsewhere or withdrawn; ``turn_start`` /
    ``turn_end``: a turn's bounds (``stop_reason`` an ACP stop reason, or None when the turn
    failed: ``error`` says why).
    """

    kind: Literal["update", "ask", "settled", "turn_start", "turn_end"]
    update: SessionUpdate | None = None
    ask: Ask | None = None
    interaction_id: str = ""
    seq: int | None = None
    stop_reason: str | None = None
    error: str = ""


def _payload(frame: GenericFrame) -> dict[str, Any]:
    try:
        value = msgspec.json.decode(frame.payload)
    except msgspec.DecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _display(value: Any) -> str:
    if isinstance(value, str):
        return value[:200]
    return msgspec.json.encode(value).decode()[:200]


class AcpEgress:
    """RAWP frames (of one session, in seq order) → :class:`Out` items for an ACP editor."""

    def __init__(self) -> None:
        self.pending: dict[str, Ask] = {}
        self._tool_calls: dict[str, ToolCallUpdate] = {}  # interaction_id -> acp.permission's

    def frame(self, frame: Frame | GenericFrame) -> list[Out]:
        """What ``frame`` tells the editor (nothing for frames ACP has no place for)."""
        try:
            return self._frame(frame)
        except (ValidationError, ValueError):
            return []  # a frame whose ACP shape is broken is left out, never a crash

    def _frame(self, frame: Frame | GenericFrame) -> list[Out]:
        seq = frame.seq
        if isinstance(frame, GenericFrame):
            return self._generic(frame)
        if isinstance(frame, UserMessage):
            text = TextContentBlock(type="text", text=frame.payload.text)
            return [
                self._update(UserMessageChunk(session_update="user_message_chunk", content=text))
            ]
        if isinstance(frame, TextDelta | ThinkingDelta):
            block = TextContentBlock(type="text", text=frame.payload.delta)
            if isinstance(frame, TextDelta):
                return [
                    self._update(
                        AgentMessageChunk(
                            session_update="agent_message_chunk",
                            content=block,
                            message_id=frame.payload.block_id,
                        )
                    )
                ]
            return [
                self._update(
                    AgentThoughtChunk(
                        session_update="agent_thought_chunk",
                        content=block,
                        message_id=frame.payload.block_id,
                    )
                )
            ]
        if isinstance(frame, ToolRequest):
            p = frame.payload
            start = ToolCallStart(
                session_update="tool_call",
                tool_call_id=p.call_id,
                title=p.tool_name,
                raw_input=p.input,
                status="pending",
            )
            return [self._update(start)]
        if isinstance(frame, ToolResult):
            r = frame.payload
            content: list[Any] | None = None
            if isinstance(r.output, str):
                text = TextContentBlock(type="text", text=r.output)
                content = [ContentToolCallContent(type="content", content=text)]
            done = ToolCallProgress(
                session_update="tool_call_update",
                tool_call_id=r.call_id,
                status="completed" if r.status == "ok" else "failed",
                raw_output=r.output,
                content=content,
            )
            return [self._update(done)]
        if isinstance(frame, InteractionRequest):
            return self._ask(frame)
        if isinstance(frame, InteractionResponse | InteractionCancel):
            return self._settle(frame.payload.interaction_id)
        if isinstance(frame, Renamed):
            info = SessionInfoUpdate(session_update="session_info_update", title=frame.payload.name)
            return [self._update(info)]
        if isinstance(frame, Usage):
            window = frame.payload.context_window
            if window is None or window.used is None or window.capacity is None:
                return []
            usage = UsageUpdate(
                session_update="usage_update", used=window.used, size=window.capacity
            )
            return [self._update(usage)]
        if isinstance(frame, TurnStart):
            return [Out("turn_start", seq=seq)]
        if isinstance(frame, TurnEnd):
            outs = [o for i in list(self.pending) for o in self._settle(i)]
            reason = frame.payload.stop_reason
            if reason in _STOP:
                return [*outs, Out("turn_end", seq=seq, stop_reason=_STOP[reason])]
            why = "the agent disconnected" if reason == "disconnected" else "the turn failed"
            return [*outs, Out("turn_end", seq=seq, error=why)]
        return []

    def _update(self, update: BaseModel) -> Out:
        return Out("update", update=update)  # type: ignore[arg-type]

    def _generic(self, frame: GenericFrame) -> list[Out]:
        payload = _payload(frame)
        if frame.type in _AS_UPDATE and "sessionUpdate" in payload:
            return [self._update(_UPDATE.validate_python(payload))]
        if frame.type in ("acp.tool_call", "acp.tool_call_update"):
            fields = {k: v for k, v in payload.items() if k != "call_id"}
            fields["toolCallId"] = payload.get("call_id") or payload.get("toolCallId")
            fields["sessionUpdate"] = "tool_call_update"
            if frame.type == "acp.tool_call_update" and fields.get("status") in (
                "completed",
                "failed",
            ):
                # tool.invoke.result says it (status, output), once
                fields.pop("status")
                fields.pop("rawOutput", None)
                if not set(fields) - {"toolCallId", "sessionUpdate"}:
                    return []
            return [self._update(ToolCallProgress.model_validate(fields))]
        if frame.type == "acp.permission":
            interaction_id = payload.get("interaction_id")
            if isinstance(interaction_id, str):
                call = ToolCallUpdate.model_validate(payload.get("toolCall") or {})
                self._tool_calls[interaction_id] = call
        return []

    def _ask(self, frame: InteractionRequest) -> list[Out]:
        p = frame.payload
        if p.kind == "input":
            return []  # ACP has no free-text question for the client (docs/acp.md)
        options: list[PermissionOption] = []
        values: dict[str, Any] = {}
        if p.kind == "confirmation":
            options = [
                PermissionOption(option_id="yes", name="Yes", kind="allow_once"),
                PermissionOption(option_id="no", name="No", kind="reject_once"),
            ]
            values = {"yes": True, "no": False}
        else:
            for index, option in enumerate(p.options or []):
                is_obj = isinstance(option, dict)
                value = option.get("value", option) if is_obj else option
                label = _display(option.get("label", value) if is_obj else option)
                kind = option.get("kind") if is_obj else None
                option_id = value if isinstance(value, str) and value else f"option-{index}"
                if option_id in values:
                    option_id = f"option-{index}"
                values[option_id] = value
                options.append(
                    PermissionOption(
                        option_id=option_id,
                        name=label or option_id,
                        kind=kind
                        if kind in ("allow_once", "allow_always", "reject_once", "reject_always")
                        else "allow_once",
                    )
                )
        if not options:
            return []
        call = self._tool_calls.pop(p.interaction_id, None) or ToolCallUpdate(
            tool_call_id=p.interaction_id, title=p.prompt[:200]
        )
        ask = Ask(p.interaction_id, call, options, values)
        self.pending[p.interaction_id] = ask
        return [Out("ask", ask=ask, interaction_id=p.interaction_id)]

    def _settle(self, interaction_id: str) -> list[Out]:
        if self.pending.pop(interaction_id, None) is None:
            return []
        return [Out("settled", interaction_id=interaction_id)]
