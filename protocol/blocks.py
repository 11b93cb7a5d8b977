"""What a UI shows of a session: transcript blocks and usage totals (data only, no rules).

:class:`protocol.render.BlockRenderer` builds them from the frames the state machine accepted;
:class:`protocol.view.SessionView` keeps them beside the session state.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import msgspec

from .frames import PreservedElements, SenderRole

__all__ = [
    "Block",
    "CompactionBlock",
    "InteractionBlock",
    "Notice",
    "NoticeBlock",
    "NoticeKind",
    "TextBlock",
    "ThinkingBlock",
    "ToolCallBlock",
    "Totals",
    "TurnBlock",
    "UsageBlock",
    "UserMessageBlock",
]


# --- transcript blocks ---------------------------------------------------------------------


class _Block(msgspec.Struct, kw_only=True, tag_field="kind"):
    """Common fields: the frame that opened the block and the turn it belongs to."""

    message_id: str
    seq: int | None = None
    turn_id: str | None = None


class TurnBlock(_Block, tag="turn"):
    """One turn (§7.5): opened by ``session.turn.start``, closed by ``session.turn.end``."""

    turn_index: int
    mode: str | None = None
    ended: bool = False
    stop_reason: str | None = None
    tool_invocation_count: int | None = None
    synthetic: bool = False  # ended by a synthetic turn end (§7.8.1 "disconnected")


class TextBlock(_Block, tag="text"):
    """Streamed text: the deltas accumulated so far; ``done`` once committed."""

    block_id: str
    text: str = ""
    done: bool = False
    synthetic: bool = False  # committed by finalization, not by the agent


class ThinkingBlock(_Block, tag="thinking"):
    """Streamed thinking."""

    block_id: str
    text: str = ""
    done: bool = False
    synthetic: bool = False


class ToolCallBlock(_Block, tag="tool_call"):
    """A tool call paired with its result (``status`` pending until the result arrives)."""

    call_id: str
    tool_name: str
    input: dict[str, Any]
    status: Literal["pending", "ok", "error", "cancelled"] = "pending"
    output: Any = None
    synthetic: bool = False  # the result was synthesized ("Connection lost")


class InteractionBlock(_Block, tag="interaction"):
    """The agent asked a person; answered by an edge, withdrawn by the agent (notes §16.4)
    or discarded by finalization."""

    interaction_id: str
    interaction_kind: str
    prompt: str
    options: list[Any] | None = None
    status: Literal["pending", "answered", "withdrawn", "discarded"] = "pending"
    response: Any = None
    synthetic: bool = False
    withdraw_reason: str | None = None


class UserMessageBlock(_Block, tag="user_message"):
    """User input from an edge."""

    text: str
    participant_id: str | None = None


class UsageBlock(_Block, tag="usage"):
    """One ``session.usage`` report (§7.3.1)."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    thinking_tokens: int | None = None
    cost_used: float = 0.0
    cost_limit: float = -1
    cost_unit: str = ""
    messages_used: int = 0
    messages_limit: int = -1
    context_utilization: float | None = None
    time_to_reset: str = ""
    from_master: bool = False  # the master's totals, not a report of the agent


class CompactionBlock(_Block, tag="compaction"):
    """A context compaction (§7.2.1) and its summary."""

    summary: str
    previous_token_count: int
    current_token_count: int
    trigger: str
    preserved_elements: PreservedElements | None = None


NoticeKind: TypeAlias = Literal[
    "renamed",
    "deleted",
    "ended",
    "error",
    "history",
    "cancel",
    "revisit",
    "revisit_cancelled",
    "wake",
]


class NoticeBlock(_Block, tag="notice"):
    """A logged event worth a line: rename, delete, error, a client's history, a cancel, a
    revisit asked for or withdrawn, a wake (notes §17.5)."""

    notice: NoticeKind
    text: str
    error_code: str | None = None
    truncated: bool = False
    lost_frame_count: int | None = None
    reported_by: SenderRole = "master"
    """Who sent the frame. Only the master's notices (``history_truncated``) are the
    session's own facts; a participant's ``session.error`` is that participant's report
    (notes §16.8)."""

    @property
    def data_incomplete(self) -> bool:
        """Does this notice say the session's data is incomplete (§7.1.1)?

        A master's ``history_truncated``, or a client's truncated history (the client is
        the one who knows what its own buffer lost) — never a ``history_truncated`` that a
        participant wrote itself (§16.8).
        """
        if self.notice == "history":
            return self.truncated
        return self.error_code == "history_truncated" and self.reported_by == "master"


Block: TypeAlias = (
    TurnBlock
    | TextBlock
    | ThinkingBlock
    | ToolCallBlock
    | InteractionBlock
    | UserMessageBlock
    | UsageBlock
    | CompactionBlock
    | NoticeBlock
)


class Totals(msgspec.Struct, kw_only=True):
    """Usage and cost over the session, from the agent's ``session.usage`` reports."""

    turns: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    thinking_tokens: int = 0
    cost_used: float = 0.0
    cost_limit: float = -1
    cost_unit: str = ""
    context_utilization: float | None = None
    compactions: int = 0


class Notice(msgspec.Struct, kw_only=True):
    """Something this participant alone was told or noticed (not in the session log).

    ``position`` is ``len(blocks)`` when it happened, so a UI can show it inline.
    """

    kind: Literal["error", "connection_lost", "backlog_truncated", "local"]
    text: str
    position: int
    error_code: str | None = None
