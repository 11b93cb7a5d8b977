"""A session's log as a readable Markdown transcript (``export?format=md``).

The log is folded with :class:`protocol.view.SessionView` — the view the client library and
(mirrored in the TypeScript SDK's ``SessionView``) the dashboard show: turns, text, thinking,
tool calls paired with their results, interactions and answers, usage, compaction summaries,
notices.
Synthetic blocks (§7.8.1) that are still in effect are marked; the ones a client history
took back out (§7.8.3) are gone, as in every other view.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from protocol import codec
from protocol.errors import ProtocolError
from protocol.frames import Frame, GenericFrame
from protocol.state import SenderRole
from protocol.view import (
    Block,
    CompactionBlock,
    InteractionBlock,
    NoticeBlock,
    SessionView,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    TurnBlock,
    UsageBlock,
    UserMessageBlock,
)

from ..store.base import LogEntry

__all__ = ["incomplete", "render_markdown", "view_of"]


def view_of(session_id: str, entries: Iterable[LogEntry]) -> SessionView:
    """Fold a session's log (stamped entries, in seq order) into a view."""
    frames: list[tuple[Frame | GenericFrame, SenderRole]] = []
    for entry in entries:
        try:
            frames.append((codec.decode(entry.data), entry.sender_role))  # type: ignore[arg-type]
        except ProtocolError:
            continue
    return SessionView.replay(session_id, frames)


def incomplete(blocks: Iterable[Block]) -> list[str]:
    """Why the data is incomplete (§7.1.1): truncated histories and their notices."""
    reasons: list[str] = []
    for block in blocks:
        if isinstance(block, NoticeBlock) and (
            block.error_code == "history_truncated"
            or (block.notice == "history" and block.truncated)
        ):
            reasons.append(block.text)
    return reasons


def _quote(text: str) -> str:
    return "\n".join("> " + line for line in text.splitlines() or [""])


def _json_block(value: Any) -> str:
    return "```json\n" + json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n```"


def _render(block: Block) -> list[str]:
    mark = " *(synthetic)*" if getattr(block, "synthetic", False) else ""
    if isinstance(block, TurnBlock):
        ended = f" — {block.stop_reason}" if block.ended else " — open"
        return [f"## Turn {block.turn_index + 1}{ended}{mark}"]
    if isinstance(block, UserMessageBlock):
        return ["**User:**", "", _quote(block.text)]
    if isinstance(block, TextBlock):
        return [f"**Assistant:**{mark}", "", block.text]
    if isinstance(block, ThinkingBlock):
        return [f"<details><summary>Thinking{mark}</summary>", "", block.text, "", "</details>"]
    if isinstance(block, ToolCallBlock):
        lines = [f"**Tool call** `{block.tool_name}` → {block.status}{mark}", ""]
        lines.append(_json_block(block.input))
        if block.status != "pending":
            lines += ["", "Result:", "", _json_block(block.output)]
        return lines
    if isinstance(block, InteractionBlock):
        lines = [f"**Question ({block.interaction_kind}):** {block.prompt}"]
        if block.options:
            lines += ["", "Options: " + ", ".join(str(o) for o in block.options)]
        if block.status == "answered":
            lines += ["", f"Answer: {json.dumps(block.response, ensure_ascii=False)}"]
        elif block.status == "discarded":
            lines += ["", f"(discarded: the connection was lost){mark}"]
        return lines
    if isinstance(block, UsageBlock):
        who = "master totals" if block.from_master else "usage"
        return [
            f"*{who}: {block.input_tokens} in / {block.output_tokens} out tokens, "
            f"{block.cost_used} {block.cost_unit} used*"
        ]
    if isinstance(block, CompactionBlock):
        return [
            f"**Context compacted** ({block.trigger}: {block.previous_token_count} → "
            f"{block.current_token_count} tokens)",
            "",
            _quote(block.summary),
        ]
    code = f" `{block.error_code}`" if block.error_code else ""
    return [f"*{block.notice}{code}: {block.text}*"]


def render_markdown(view: SessionView, meta: Sequence[tuple[str, str]], *, title: str = "") -> str:
    """The transcript as Markdown; ``meta`` are (label, value) lines under the title."""
    out = [f"# {title or view.name or view.session_id}", ""]
    out += [f"- **{label}:** {value}" for label, value in meta]
    out.append("")
    reasons = incomplete(view.blocks)
    if reasons:
        out += ["> **Data incomplete.** " + " · ".join(reasons), ""]
    for block in view.blocks:
        out += [*_render(block), ""]
    return "\n".join(out).rstrip() + "\n"
