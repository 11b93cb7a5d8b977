"""Shrink a failing session to a minimal one: delta debugging over its steps.

Any sub-list of a session's steps is a session (a step whose actor is absent does nothing),
so the classic ddmin applies: remove chunks of halving size while the session still fails,
then single steps. The number of runs is bounded; what is left when the budget runs out is
still a failing session, only perhaps not a minimal one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["shrink"]

T = TypeVar("T")


async def shrink(
    items: list[T], fails: Callable[[list[T]], Awaitable[bool]], *, max_runs: int
) -> list[T]:
    """A sub-list of ``items`` for which ``fails`` holds, 1-minimal when the budget allows."""
    current = list(items)
    runs = 0
    parts = 2
    while len(current) >= 1 and runs < max_runs:
        size = max(1, len(current) // parts)
        removed = False
        for start in range(0, len(current), size):
            candidate = current[:start] + current[start + size :]
            if runs >= max_runs:
                break
            runs += 1
            if await fails(candidate):
                current = candidate
                parts = max(parts - 1, 2)
                removed = True
                break
        if not removed:
            if size == 1:
                break
            parts = min(parts * 2, len(current))
    return current
