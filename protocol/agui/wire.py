"""AG-UI on the wire, and what both directions share: SSE encoding, event decoding, SSE ids
(``seq`` / ``seq.k``), run input, a frame's time and payload as AG-UI wants them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final, TypeAlias

import msgspec
from ag_ui.core import (
    Event,
    ResumeEntry,
    RunAgentInput,
)
from ag_ui.core.events import BaseEvent
from ag_ui.encoder import EventEncoder
from pydantic import TypeAdapter, ValidationError

from ..frames import (
    Frame,
    GenericFrame,
)

__all__ = [
    "AguiMessage",
    "as_text",
    "decode_event",
    "encode_sse",
    "input_user_messages",
    "message_text",
    "millis",
    "parse_event_id",
    "payload_of",
    "run_input",
]

_ENCODER: Final = EventEncoder()
_EVENT: Final[TypeAdapter[Any]] = TypeAdapter(Event)

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


def millis(frame: Frame | GenericFrame) -> int:
    return int(frame.timestamp.timestamp() * 1000)


def as_text(value: Any) -> str:
    """A tool output as ``TOOL_CALL_RESULT.content``: strings as they are, the rest as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def payload_of(frame: Frame | GenericFrame) -> Any:
    if isinstance(frame, GenericFrame):
        try:
            return msgspec.json.decode(frame.payload)
        except msgspec.DecodeError:
            return {}
    return msgspec.to_builtins(getattr(frame, "payload", {}))
