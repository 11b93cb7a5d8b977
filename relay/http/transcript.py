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
import re
from collections.abc import Iterable, Sequence
from typing import Any, Final

from protocol import codec, names
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

__all__ = [
    "code_span",
    "cost_text",
    "counted",
    "incomplete",
    "inline_text",
    "render_markdown",
    "view_of",
]


def counted(number: int, noun: str) -> str:
    """``1 turn``, ``2 turns``, ``0 turns``."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def cost_text(used: float, unit: str) -> str | None:
    """A cost as a person reads it, ``0.0125 USD`` (four decimals, as ``rawp tail``); None
    when no unit was ever reported — a bare number would not say what it counts."""
    if not unit.strip():
        return None
    return f"{used:.4f} {inline_text(unit)}"


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
        if isinstance(block, NoticeBlock) and block.data_incomplete:  # master's only (§16.8)
            reasons.append(block.text)
    return reasons


# Received text never shapes the transcript (notes §16.7): a one-line field is escaped
# (no CR/LF, no control character, no Markdown punctuation that would start markup); a
# multi-line body is a block quote, so none of its lines can become a heading or a list of
# ours; a code span or fence is longer than any backtick run inside it.
_MARKUP: Final = re.compile(r"([\\`*_\[\]<>#|~!&])")
_BACKTICKS: Final = re.compile(r"`+")


def inline_text(text: object) -> str:
    """A received string for a one-line Markdown field."""
    return _MARKUP.sub(r"\\\1", names.one_line(str(text)))


def code_span(text: object) -> str:
    """A received string as an inline code span (one line, fenced past its backticks)."""
    line = names.one_line(str(text))
    fence = "`" * (max((len(m) for m in _BACKTICKS.findall(line)), default=0) + 1)
    pad = " " if line.startswith("`") or line.endswith("`") or not line.strip() else ""
    return f"{fence}{pad}{line}{pad}{fence}"


def _quote(text: str) -> str:
    """A received multi-line body as a block quote."""
    lines = names.text_body(text).split("\n")
    return "\n".join(("> " + line).rstrip() for line in lines)


def _json_block(value: Any) -> str:
    body = names.text_body(json.dumps(value, indent=2, ensure_ascii=False, default=str))
    fence = "`" * max(3, max((len(m) for m in _BACKTICKS.findall(body)), default=0) + 1)
    return f"{fence}json\n{body}\n{fence}"


def _render(block: Block) -> list[str]:
    mark = " *(synthetic)*" if getattr(block, "synthetic", False) else ""
    if isinstance(block, TurnBlock):
        ended = f" — {block.stop_reason}" if block.ended else " — open"
        return [f"## Turn {block.turn_index + 1}{ended}{mark}"]
    if isinstance(block, UserMessageBlock):
        return ["**User:**", "", _quote(block.text)]
    if isinstance(block, TextBlock):
        return [f"**Assistant:**{mark}", "", _quote(block.text)]
    if isinstance(block, ThinkingBlock):
        return [f"*Thinking:*{mark}", "", _quote(block.text)]
    if isinstance(block, ToolCallBlock):
        lines = [f"**Tool call** {code_span(block.tool_name)} → {block.status}{mark}", ""]
        lines.append(_json_block(block.input))
        if block.status != "pending":
            lines += ["", "Result:", "", _json_block(block.output)]
        return lines
    if isinstance(block, InteractionBlock):
        kind = block.interaction_kind
        lines = [f"**Question ({kind}):** {inline_text(block.prompt)}"]
        if block.options:
            lines += ["", "Options: " + ", ".join(inline_text(o) for o in block.options)]
        if block.status == "answered":
            answer = json.dumps(block.response, ensure_ascii=False, default=str)
            lines += ["", f"Answer: {code_span(answer)}"]
        elif block.status == "discarded":
            lines += ["", f"(discarded: the connection was lost){mark}"]
        return lines
    if isinstance(block, UsageBlock):
        who = "master totals" if block.from_master else "usage"
        cost = cost_text(block.cost_used, block.cost_unit)
        spent = f", {cost} used" if cost is not None else ""
        return [f"*{who}: {block.input_tokens} in / {block.output_tokens} out tokens{spent}*"]
    if isinstance(block, CompactionBlock):
        return [
            f"**Context compacted** ({block.trigger}: {block.previous_token_count} → "
            f"{block.current_token_count} tokens)",
            "",
            _quote(block.summary),
        ]
    if block.notice in ("revisit", "revisit_cancelled", "wake"):
        return [f"*⏰ {inline_text(block.text)}*"]  # notes §17.5: the reason is received text
    code = f" {code_span(block.error_code)}" if block.error_code else ""
    # A participant's session.error is its report, not the session's notice (§16.8).
    who = "" if block.reported_by == "master" else f" (reported by the {block.reported_by})"
    return [f"*{inline_text(block.notice)}{code}{who}: {inline_text(block.text)}*"]


def render_markdown(view: SessionView, meta: Sequence[tuple[str, str]], *, title: str = "") -> str:
    """The transcript as Markdown; ``meta`` are (label, value) lines under the title."""
    out = [f"# {inline_text(title or view.name or view.session_id)}", ""]
    out += [f"- **{label}:** {value}" for label, value in meta]  # values: render_meta's
    out.append("")
    reasons = incomplete(view.blocks)
    if reasons:
        out += ["> **Data incomplete.** " + " · ".join(inline_text(r) for r in reasons), ""]
    for block in view.blocks:
        out += [*_render(block), ""]
    return "\n".join(out).rstrip() + "\n"
