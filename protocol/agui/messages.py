"""The message list an AG-UI client assembles (:class:`MessageFold`, for snapshots), and a
RAWP view's transcript as AG-UI messages (:func:`messages_from_view`, the bridge's run input)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ag_ui.core import (
    MessagesSnapshotEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageStartEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.core.events import BaseEvent

from ..view import TextBlock, ThinkingBlock, ToolCallBlock, UserMessageBlock
from .wire import AguiMessage, as_text

__all__ = ["MessageFold", "messages_from_view"]

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
                "function": {"name": block.tool_name, "arguments": as_text(block.input)},
            }
            out.append({"id": block.call_id, "role": "assistant", "toolCalls": [call]})
            if block.status != "pending":
                content = as_text(block.output if block.output is not None else "")
                out.append(
                    {
                        "id": f"result-{block.call_id}",
                        "role": "tool",
                        "toolCallId": block.call_id,
                        "content": content,
                    }
                )
    return out
