"""The client's typed helpers, sans I/O: one method per frame type, each builds the frame.

What to send is decided here (ids, turn indexes, the rename's previous name); how it leaves is
:meth:`protocol.client.RawpClient.post`'s business.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, Literal, TypeVar

import msgspec

from . import codec
from .client_core import ClientCore
from .commits import FutureT
from .frames import (
    AgentState,
    AgentStatePayload,
    Cancel,
    CancelPayload,
    Compacted,
    CompactedPayload,
    ContextWindow,
    CostUsage,
    Deleted,
    DeletedPayload,
    Frame,
    GenericFrame,
    InteractionCancel,
    InteractionCancelPayload,
    InteractionRequest,
    InteractionRequestPayload,
    InteractionResponse,
    InteractionResponsePayload,
    MessageUsage,
    Metadata,
    PreservedElements,
    Renamed,
    RenamedPayload,
    RevisitCancel,
    RevisitCancelPayload,
    RevisitRequest,
    RevisitRequestPayload,
    SessionError,
    SessionErrorPayload,
    TextDelta,
    TextDeltaPayload,
    TextDone,
    TextDonePayload,
    ThinkingDelta,
    ThinkingDeltaPayload,
    ThinkingDone,
    ThinkingDonePayload,
    TokenUsage,
    ToolRequest,
    ToolRequestPayload,
    ToolResult,
    ToolResultPayload,
    TurnEnd,
    TurnEndPayload,
    TurnStart,
    TurnStartPayload,
    Usage,
    UsagePayload,
    UserMessage,
    UserMessagePayload,
)

__all__ = ["TypedSends", "revisit_time"]

FrameT = TypeVar("FrameT", bound=Frame | GenericFrame)


class TypedSends(ClientCore[FutureT]):
    """The typed helpers of :class:`~protocol.client.RawpClient`, over an abstract ``post``."""

    async def post(self, frame: FrameT) -> FrameT:
        """Send ``frame`` (the I/O adapter's)."""
        raise NotImplementedError

    async def send(self, frame: Frame | GenericFrame) -> int:
        """Send ``frame`` and wait for the master's commit (the I/O adapter's)."""
        raise NotImplementedError

    # --- typed helpers: client (agent) ---------------------------------------------------

    async def turn_start(
        self, turn_id: str | None = None, *, turn_index: int | None = None, mode: str | None = None
    ) -> TurnStart:
        """§7.5.1 ``session.turn.start``; the id (UUID v4) and index are chosen if not given."""
        if turn_index is None:
            turn_index = max(self._turn_index, self.view.state.last_turn_index) + 1
        self._turn_index = max(self._turn_index, turn_index)
        payload = TurnStartPayload(
            turn_id=turn_id or str(uuid.uuid4()), turn_index=turn_index, mode=mode
        )
        return await self.post(TurnStart(payload=payload, **self._envelope()))

    async def turn_end(
        self,
        turn_id: str,
        stop_reason: Literal[
            "end_turn", "max_tokens", "cancelled", "error", "tool_use", "awaiting_input"
        ] = "end_turn",
        *,
        tool_invocation_count: int | None = None,
    ) -> TurnEnd:
        """§7.5.2 ``session.turn.end`` (send :meth:`usage` right after it)."""
        payload = TurnEndPayload(
            turn_id=turn_id, stop_reason=stop_reason, tool_invocation_count=tool_invocation_count
        )
        return await self.post(TurnEnd(payload=payload, **self._envelope()))

    async def usage(
        self,
        *,
        input_tokens: int,
        output_tokens: int,
        cost_used: float = 0.0,
        cost_limit: float = -1,
        cost_unit: str = "USD",
        messages_used: int = 0,
        messages_limit: int = -1,
        time_to_reset: str = "PT5H",
        turn_id: str | None = None,
        cache_read_tokens: int | None = None,
        cache_write_tokens: int | None = None,
        thinking_tokens: int | None = None,
        context_window: ContextWindow | None = None,
    ) -> Usage:
        """§7.3.1 ``session.usage``."""
        payload = UsagePayload(
            token_usage=TokenUsage(
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cache_read_tokens=cache_read_tokens,
                cache_write_tokens=cache_write_tokens,
                thinking_tokens=thinking_tokens,
            ),
            cost_usage=CostUsage(limit=cost_limit, used=cost_used, unit=cost_unit),
            message_usage=MessageUsage(limit=messages_limit, used=messages_used, unit="COUNT"),
            time_to_reset=time_to_reset,
            turn_id=turn_id,
            context_window=context_window,
        )
        return await self.post(Usage(payload=payload, **self._envelope()))

    async def text_delta(self, block_id: str, delta: str) -> TextDelta:
        """A piece of streamed text."""
        payload = TextDeltaPayload(block_id=block_id, delta=delta)
        return await self.post(TextDelta(payload=payload, **self._envelope()))

    async def text_done(self, block_id: str, text: str | None = None) -> TextDone:
        """The text block is complete (``text``: the whole text, optional)."""
        payload = TextDonePayload(block_id=block_id, text=text)
        return await self.post(TextDone(payload=payload, **self._envelope()))

    async def thinking_delta(self, block_id: str, delta: str) -> ThinkingDelta:
        """A piece of streamed thinking."""
        payload = ThinkingDeltaPayload(block_id=block_id, delta=delta)
        return await self.post(ThinkingDelta(payload=payload, **self._envelope()))

    async def thinking_done(self, block_id: str) -> ThinkingDone:
        """The thinking block is complete."""
        payload = ThinkingDonePayload(block_id=block_id)
        return await self.post(ThinkingDone(payload=payload, **self._envelope()))

    async def tool_request(
        self, call_id: str, tool_name: str, input: dict[str, Any]
    ) -> ToolRequest:
        """The agent calls a tool."""
        payload = ToolRequestPayload(call_id=call_id, tool_name=tool_name, input=input)
        return await self.post(ToolRequest(payload=payload, **self._envelope()))

    async def tool_result(
        self,
        call_id: str,
        status: Literal["ok", "error", "cancelled"] = "ok",
        output: Any = None,
    ) -> ToolResult:
        """The result of one tool call."""
        payload = ToolResultPayload(call_id=call_id, status=status, output=output)
        return await self.post(ToolResult(payload=payload, **self._envelope()))

    async def interaction_request(
        self,
        interaction_id: str,
        kind: Literal["confirmation", "choice", "input"],
        prompt: str,
        options: list[Any] | None = None,
    ) -> InteractionRequest:
        """The agent waits for a person (an edge answers with an interaction response)."""
        payload = InteractionRequestPayload(
            interaction_id=interaction_id, kind=kind, prompt=prompt, options=options
        )
        return await self.post(InteractionRequest(payload=payload, **self._envelope()))

    async def interaction_cancel(
        self, interaction_id: str, reason: str | None = None
    ) -> InteractionCancel:
        """Withdraw a pending interaction (notes §16.4): the agent timed out or moved on."""
        payload = InteractionCancelPayload(interaction_id=interaction_id, reason=reason)
        return await self.post(InteractionCancel(payload=payload, **self._envelope()))

    async def agent_state(
        self, state: Literal["idle", "thinking", "tool_calling", "responding", "awaiting_input"]
    ) -> AgentState:
        """What the agent is doing."""
        payload = AgentStatePayload(state=state)
        return await self.post(AgentState(payload=payload, **self._envelope()))

    async def compacted(
        self,
        summary: str,
        previous_token_count: int,
        current_token_count: int,
        *,
        trigger: Literal["auto", "manual", "requested"] = "auto",
        preserved_elements: PreservedElements | None = None,
    ) -> Compacted:
        """§7.2.1 ``session.compacted``."""
        payload = CompactedPayload(
            summary=summary,
            previous_token_count=previous_token_count,
            current_token_count=current_token_count,
            trigger=trigger,
            preserved_elements=preserved_elements,
        )
        return await self.post(Compacted(payload=payload, **self._envelope()))

    async def revisit(
        self,
        at: dt.datetime | dt.timedelta | str,
        reason: str | None = None,
        *,
        revisit_id: str | None = None,
    ) -> str:
        """Ask to be woken at ``at`` (notes §17.5): ``session.revisit.request``; returns its
        revisit id (a UUID v4 unless given; the same id again reschedules it).

        ``at`` is an aware datetime, an RFC 3339 string or a timedelta from now. Waits until
        the master stored it, so a refusal raises :class:`FrameRefused` (``invalid_revisit``:
        more than 60 s past or 366 days ahead; ``too_many_revisits``: 100 pending). When it
        comes due the master sends ``session.wake`` — at once if this client is attached,
        else after its next attach — and ``on_wake`` is called.
        """
        rid = revisit_id if revisit_id is not None else str(uuid.uuid4())
        payload = RevisitRequestPayload(revisit_id=rid, at=revisit_time(at), reason=reason)
        await self.send(RevisitRequest(payload=payload, **self._envelope()))
        return rid

    async def cancel_revisit(self, revisit_id: str) -> None:
        """Withdraw a pending revisit (``session.revisit.cancel``); waits for the master.
        An unknown or already woken id changes nothing."""
        payload = RevisitCancelPayload(revisit_id=revisit_id)
        await self.send(RevisitCancel(payload=payload, **self._envelope()))

    # --- typed helpers: both roles ------------------------------------------------------

    async def ignorable(self, frame_type: str, payload: dict[str, Any]) -> GenericFrame:
        """A frame of a type RAWP does not define, marked ``metadata.ignorable``: logged and
        relayed untouched, skipped by views that do not know it (docs/protocol.md §3).
        ``frame_type`` follows the type grammar and names no RAWP frame (``acp.plan``)."""
        frame = GenericFrame(
            type=frame_type,
            payload=msgspec.Raw(codec.encode_json(payload)),
            metadata=Metadata(ignorable=True),
            **self._envelope(),
        )
        return await self.post(frame)

    async def rename(self, name: str) -> Renamed:
        """§7.6.1 ``session.renamed`` (``renamed_by`` is this role)."""
        payload = RenamedPayload(
            session_id=self.session_id,
            name=name,
            renamed_by=self.role,
            previous_name=self.view.name or None,
        )
        return await self.post(Renamed(payload=payload, **self._envelope()))

    async def delete(
        self,
        reason: Literal["user_request", "master_request", "timeout", "error"] = "user_request",
    ) -> Deleted:
        """§7.7.1 ``session.deleted``: asks the master to end the session (notes §9)."""
        payload = DeletedPayload(session_id=self.session_id, reason=reason, deleted_by=self.role)
        return await self.post(Deleted(payload=payload, **self._envelope()))

    async def error(self, error_code: str, message: str, *, fatal: bool = False) -> SessionError:
        """§7.4.1 ``session.error`` (``fatal`` starts the termination procedure)."""
        payload = SessionErrorPayload(error_code=error_code, message=message, fatal=fatal)
        return await self.post(SessionError(payload=payload, **self._envelope()))

    # --- typed helpers: edge ------------------------------------------------------------

    async def user_message(self, text: str) -> UserMessage:
        """User input for the agent."""
        payload = UserMessagePayload(text=text)
        return await self.post(UserMessage(payload=payload, **self._envelope()))

    async def interaction_response(self, interaction_id: str, response: Any) -> InteractionResponse:
        """Answer one pending interaction."""
        payload = InteractionResponsePayload(interaction_id=interaction_id, response=response)
        return await self.post(InteractionResponse(payload=payload, **self._envelope()))

    async def cancel(self, turn_id: str | None = None) -> Cancel:
        """Ask the agent to stop the current turn."""
        payload = CancelPayload(turn_id=turn_id)
        return await self.post(Cancel(payload=payload, **self._envelope()))


# --- helpers -------------------------------------------------------------------------------


def revisit_time(at: dt.datetime | dt.timedelta | str) -> dt.datetime:
    """The aware datetime of a revisit's ``at``; ValueError for a time without a zone
    (a naive datetime could mean any of 26 hours) or text that is not RFC 3339."""
    if isinstance(at, dt.timedelta):
        return dt.datetime.now(dt.UTC) + at
    if isinstance(at, str):
        try:
            parsed = dt.datetime.fromisoformat(at.strip())
        except ValueError:
            raise ValueError(f"not an RFC 3339 time: {at!r} (e.g. 2026-12-08T09:00:00Z)") from None
        at = parsed
    if not isinstance(at, dt.datetime):
        raise TypeError(f"at must be a datetime, a timedelta or a string, not {type(at).__name__}")
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(
            "a revisit time needs a time zone (e.g. datetime.now(UTC) + timedelta(minutes=5))"
        )
    return at
