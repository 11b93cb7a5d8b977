"""Frames the state machine accepted -> transcript blocks (:mod:`protocol.blocks`).

Pure bookkeeping in frame order, no rules: the session state machine (:mod:`protocol.state`)
decided what is accepted before a frame gets here.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, TypeVar

from .blocks import (
    Block,
    CompactionBlock,
    InteractionBlock,
    NoticeBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    Totals,
    TurnBlock,
    UsageBlock,
    UserMessageBlock,
)
from .endings import ending_notice
from .frames import (
    AgentState,
    Cancel,
    Compacted,
    Deleted,
    Frame,
    GenericFrame,
    History,
    InteractionCancel,
    InteractionRequest,
    InteractionResponse,
    Renamed,
    RevisitCancel,
    RevisitRequest,
    SessionError,
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
    Wake,
)
from .state import SenderRole

__all__ = ["BlockRenderer", "revisit_text", "wake_text", "wake_time"]

_Streamed = TypeVar("_Streamed", TextBlock, ThinkingBlock)  # blocks built up from deltas


# --- wake and revisit lines (notes §17.5), shared by the views, `rawp tail` and exports ---


def wake_time(at: dt.datetime) -> str:
    """A revisit's time as people read it, in UTC to the second: ``2026-12-08 01:00:00 UTC``
    (the TypeScript view writes the same text)."""
    return at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def revisit_text(at: dt.datetime, reason: str | None) -> str:
    """The line of a ``session.revisit.request``: ``asked to be woken at … (reason)``."""
    because = f" ({reason})" if reason else ""
    return f"asked to be woken at {wake_time(at)}{because}"


def wake_text(at: dt.datetime, reason: str | None) -> str:
    """The line of a ``session.wake``: ``woken: reason (asked for …)``."""
    if reason:
        return f"woken: {reason} (asked for {wake_time(at)})"
    return f"woken: the time asked for came ({wake_time(at)})"


# --- the renderer: frames the state machine accepted -> blocks ----------------------------


class BlockRenderer:
    """Builds blocks from accepted frames, in order. Pure bookkeeping, no rules."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.totals = Totals()
        self._turns: dict[str, TurnBlock] = {}
        self._text: dict[str, TextBlock] = {}
        self._thinking: dict[str, ThinkingBlock] = {}
        self._calls: dict[str, ToolCallBlock] = {}
        self._interactions: dict[str, InteractionBlock] = {}
        self._revisits: dict[str, str] = {}  # pending revisit_id -> its time, as shown
        self._turn: str | None = None
        self._last_turn: str | None = None  # a usage after a turn end belongs to that turn

    def apply(self, frame: Frame | GenericFrame, role: SenderRole) -> None:
        """Render one accepted frame."""
        if isinstance(frame, GenericFrame):
            return
        base: dict[str, Any] = {
            "message_id": frame.message_id,
            "seq": frame.seq,
            "turn_id": self._turn,
        }
        synthetic = frame.synthetic
        if isinstance(frame, TurnStart):
            p = frame.payload
            self._turn = p.turn_id
            base["turn_id"] = p.turn_id
            turn = TurnBlock(turn_index=p.turn_index, mode=p.mode, **base)
            self._turns[p.turn_id] = turn
            self.blocks.append(turn)
        elif isinstance(frame, TurnEnd):
            self._end_turn(frame, synthetic)
        elif isinstance(frame, TextDelta):
            self._block(
                self._text, TextBlock, frame.payload.block_id, base
            ).text += frame.payload.delta
        elif isinstance(frame, TextDone):
            # a done without deltas: an empty (or given) text block
            text = self._block(self._text, TextBlock, frame.payload.block_id, base)
            if frame.payload.text is not None:
                text.text = frame.payload.text
            text.done = True
            text.synthetic = synthetic
        elif isinstance(frame, ThinkingDelta):
            self._block(
                self._thinking, ThinkingBlock, frame.payload.block_id, base
            ).text += frame.payload.delta
        elif isinstance(frame, ThinkingDone):
            thinking = self._block(self._thinking, ThinkingBlock, frame.payload.block_id, base)
            thinking.done = True
            thinking.synthetic = synthetic
        elif isinstance(frame, ToolRequest):
            p_req = frame.payload
            call = ToolCallBlock(
                call_id=p_req.call_id, tool_name=p_req.tool_name, input=p_req.input, **base
            )
            self._calls[call.call_id] = call
            self.blocks.append(call)
            self.totals.tool_calls += 1
        elif isinstance(frame, ToolResult):
            found = self._calls.get(frame.payload.call_id)
            if found is not None:
                found.status = frame.payload.status
                found.output = frame.payload.output
                found.synthetic = synthetic
        elif isinstance(frame, InteractionRequest):
            p_ask = frame.payload
            ask = InteractionBlock(
                interaction_id=p_ask.interaction_id,
                interaction_kind=p_ask.kind,
                prompt=p_ask.prompt,
                options=p_ask.options,
                **base,
            )
            self._interactions[ask.interaction_id] = ask
            self.blocks.append(ask)
        elif isinstance(frame, InteractionResponse):
            answered = self._interactions.get(frame.payload.interaction_id)
            if answered is not None:
                answered.status = "answered"
                answered.response = frame.payload.response
        elif isinstance(frame, InteractionCancel):
            withdrawn = self._interactions.get(frame.payload.interaction_id)
            if withdrawn is not None and withdrawn.status == "pending":
                withdrawn.status = "withdrawn"
                withdrawn.withdraw_reason = frame.payload.reason
        elif isinstance(frame, AgentState):
            if synthetic:  # §7.8.1: finalization discards pending interactions
                for ask in self._interactions.values():
                    if ask.status == "pending":
                        ask.status = "discarded"
                        ask.synthetic = True
        elif isinstance(frame, UserMessage):
            who = frame.sender.participant_id if frame.sender is not None else None
            self.blocks.append(
                UserMessageBlock(text=frame.payload.text, participant_id=who, **base)
            )
        elif isinstance(frame, Usage):
            self._usage(frame, role, base)
        elif isinstance(frame, Compacted):
            p_c = frame.payload
            self.blocks.append(
                CompactionBlock(
                    summary=p_c.summary,
                    previous_token_count=p_c.previous_token_count,
                    current_token_count=p_c.current_token_count,
                    trigger=p_c.trigger,
                    preserved_elements=p_c.preserved_elements,
                    **base,
                )
            )
            self.totals.compactions += 1
        else:
            self._notice(frame, base, role)

    def _block(
        self,
        by_id: dict[str, _Streamed],
        kind: type[_Streamed],
        block_id: str,
        base: dict[str, Any],
    ) -> _Streamed:
        """The text or thinking block ``block_id``, opened (and shown) at its first frame."""
        block = by_id.get(block_id)
        if block is None:
            block = by_id[block_id] = kind(block_id=block_id, **base)
            self.blocks.append(block)
        return block

    def _end_turn(self, frame: TurnEnd, synthetic: bool) -> None:
        p = frame.payload
        turn = self._turns.get(p.turn_id)
        if turn is not None:
            turn.ended = True
            turn.stop_reason = p.stop_reason
            turn.tool_invocation_count = p.tool_invocation_count
            turn.synthetic = synthetic
        # Open text and thinking blocks end with the turn (notes §15.8).
        blocks: list[TextBlock | ThinkingBlock] = [*self._text.values(), *self._thinking.values()]
        for block in blocks:
            if block.turn_id == p.turn_id and not block.done:
                block.done = True
                block.synthetic = synthetic
        self._turn = None
        self._last_turn = p.turn_id
        self.totals.turns += 1

    def _usage(self, frame: Usage, role: SenderRole, base: dict[str, Any]) -> None:
        p = frame.payload
        tokens = p.token_usage
        window = p.context_window
        block = UsageBlock(
            input_tokens=tokens.input_tokens,
            output_tokens=tokens.output_tokens,
            cache_read_tokens=tokens.cache_read_tokens,
            cache_write_tokens=tokens.cache_write_tokens,
            thinking_tokens=tokens.thinking_tokens,
            cost_used=p.cost_usage.used,
            cost_limit=p.cost_usage.limit,
            cost_unit=p.cost_usage.unit,
            messages_used=p.message_usage.used,
            messages_limit=p.message_usage.limit,
            context_utilization=None if window is None else window.utilization,
            time_to_reset=p.time_to_reset,
            from_master=role == "master",
            **{**base, "turn_id": p.turn_id or base["turn_id"] or self._last_turn},
        )
        self.blocks.append(block)
        if role != "client":
            return  # the master's totals restate what the client reported (state.py agrees)
        t = self.totals
        t.input_tokens += tokens.input_tokens
        t.output_tokens += tokens.output_tokens
        t.cache_read_tokens += tokens.cache_read_tokens or 0
        t.cache_write_tokens += tokens.cache_write_tokens or 0
        t.thinking_tokens += tokens.thinking_tokens or 0
        t.cost_used = p.cost_usage.used
        t.cost_limit = p.cost_usage.limit
        t.cost_unit = p.cost_usage.unit
        if block.context_utilization is not None:
            t.context_utilization = block.context_utilization

    def _notice(self, frame: Frame, base: dict[str, Any], role: SenderRole) -> None:
        notice: NoticeBlock | None = None
        if isinstance(frame, Renamed):
            p_r = frame.payload
            notice = NoticeBlock(
                notice="renamed", text=f"renamed to {p_r.name!r} by {p_r.renamed_by}", **base
            )
        elif isinstance(frame, Deleted):
            p_d = frame.payload
            kind, text = ending_notice(p_d.reason, p_d.deleted_by, p_d.reattach_window_ms)
            notice = NoticeBlock(notice=kind, text=text, **base)
        elif isinstance(frame, SessionError):
            p_e = frame.payload
            notice = NoticeBlock(
                notice="error",
                text=p_e.message,
                error_code=p_e.error_code,
                lost_frame_count=p_e.lost_frame_count,
                reported_by=role,
                **base,
            )
        elif isinstance(frame, History):
            s = frame.payload.buffer_status
            count = len(frame.payload.frames)
            text = f"the agent reconnected with {count} buffered frame(s)"
            if s.truncated:
                lost = "an unknown number of" if s.lost_frame_count is None else s.lost_frame_count
                text += f"; {lost} frame(s) were lost ({s.policy_applied} buffer)"
            notice = NoticeBlock(
                notice="history",
                text=text,
                truncated=s.truncated,
                lost_frame_count=s.lost_frame_count,
                **base,
            )
        elif isinstance(frame, Cancel):
            notice = NoticeBlock(notice="cancel", text="cancel requested", **base)
        elif isinstance(frame, RevisitRequest):
            p_rv = frame.payload
            self._revisits[p_rv.revisit_id] = wake_time(p_rv.at)
            notice = NoticeBlock(notice="revisit", text=revisit_text(p_rv.at, p_rv.reason), **base)
        elif isinstance(frame, RevisitCancel):
            # a cancel of an unknown or already woken revisit changes nothing: no line
            when = self._revisits.pop(frame.payload.revisit_id, None)
            if when is not None:
                notice = NoticeBlock(
                    notice="revisit_cancelled", text=f"no longer asks to be woken at {when}", **base
                )
        elif isinstance(frame, Wake):
            p_w = frame.payload
            self._revisits.pop(p_w.revisit_id, None)
            notice = NoticeBlock(notice="wake", text=wake_text(p_w.at, p_w.reason), **base)
        # session.presence changes no block (the view keeps participants apart).
        if notice is not None:
            self.blocks.append(notice)
