"""How every view names the end of a session (notes §17.1).

A session the reattach window ended is *ended*, never *deleted*: its log is kept (archived)
and it can be continued. The dashboard, ``rawp tail``, the Markdown export and the client
libraries all say it the same way, from the ``session.deleted`` frame alone.
"""

from __future__ import annotations

from typing import Final, Literal

__all__ = ["ending_notice", "humanize_ms", "window_text"]

_UNITS: Final = (("day", 86_400_000), ("hour", 3_600_000), ("minute", 60_000), ("second", 1000))


def humanize_ms(ms: int) -> str:
    """``604800000`` → ``7 days``; ``90000`` → ``90 seconds``; the largest whole unit."""
    for name, size in _UNITS:
        if ms >= size and ms % size == 0:
            count = ms // size
            return f"{count} {name}{'' if count == 1 else 's'}"
    seconds = ms / 1000
    return f"{seconds:g} second{'' if seconds == 1 else 's'}"


def window_text(window_ms: int | None) -> str:
    """Why a session ended by expiry, e.g. ``the agent did not come back within 7 days``."""
    if window_ms is None or window_ms < 0:
        return "the agent did not come back in time"
    return f"the agent did not come back within {humanize_ms(window_ms)}"


def ending_notice(
    reason: str, deleted_by: str, window_ms: int | None = None
) -> tuple[Literal["ended", "deleted"], str]:
    """The notice kind and its text for a ``session.deleted`` frame's payload."""
    if reason == "timeout":
        return "ended", window_text(window_ms)
    if reason == "error":
        return "ended", f"a fatal error (reported by {deleted_by})"
    return "deleted", f"session deleted ({reason}, by {deleted_by})"
