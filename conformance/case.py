"""The case registry: every conformance check is one :class:`Case` (RAWP 1.0.2 §7, notes §2–§15).

A case is an ``async def`` that drives a master through the wire protocol only and raises
:class:`CaseFailed` when the master breaks the rule, :class:`CaseSkipped` when the master's
configuration makes the check impossible. Register it with :func:`case`::

    @case(
        id="7.5.3/cleanup-order-delete",
        level="MUST",
        description="DELETE mid-turn: cancelled results, then turn end, then session.deleted",
        kill="emit session.deleted before the cleanup tool results",
    )
    async def cleanup_order_delete(ctx: Context) -> None: ...

Case ids start with the rule's section: ``7.x.y/…`` for RAWP 1.0.2 §7 (normative), and
``notes-N/…`` for this project's wire contract (rawp-notes §N: envelope, handshake, buffers,
termination, §15 edge cases). ``kill`` names the smallest change to a master that must make
the case fail: a case no mutation can fail checks nothing.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

if TYPE_CHECKING:
    from .runner import Context

__all__ = [
    "CASES",
    "LEVELS",
    "Case",
    "CaseBody",
    "CaseFailed",
    "CaseSkipped",
    "Level",
    "all_cases",
    "case",
    "expect",
    "fail",
    "skip",
    "spec_reference",
]

Level: TypeAlias = Literal["MUST", "SHOULD"]
LEVELS: Final[tuple[Level, ...]] = ("MUST", "SHOULD")
CaseBody: TypeAlias = Callable[["Context"], Awaitable[None]]

_ID: Final = re.compile(r"^(?P<section>7(\.\d+)+|notes-\d+(\.\d+)?)/[a-z0-9][a-z0-9.-]*$")


class CaseFailed(Exception):
    """The master broke the rule the case checks; the message says how."""


class CaseSkipped(Exception):
    """The case cannot run against this master (its configuration); the message says why."""


def fail(message: str) -> None:
    """Fail the running case."""
    raise CaseFailed(message)


def expect(condition: object, message: str) -> None:
    """Fail the running case with ``message`` unless ``condition`` holds."""
    if not condition:
        raise CaseFailed(message)


def skip(reason: str) -> None:
    """Skip the running case (only where the master's configuration makes it impossible)."""
    raise CaseSkipped(reason)


def spec_reference(case_id: str) -> str:
    """The document and section a case id cites: ``RAWP 1.0.2 §7.5.3`` or ``rawp-notes §5``."""
    match = _ID.match(case_id)
    if match is None:
        raise ValueError(f"case id {case_id!r} does not start with a spec section")
    section = match.group("section")
    if section.startswith("notes-"):
        return f"rawp-notes §{section.removeprefix('notes-')}"
    return f"RAWP 1.0.2 §{section}"


@dataclass(frozen=True)
class Case:
    """One registered check."""

    id: str
    level: Level
    description: str
    kill: str
    body: CaseBody
    spec: str

    @property
    def section(self) -> str:
        """The section part of the id (``7.5.3``, ``notes-5``)."""
        return self.id.split("/", 1)[0]


CASES: Final[dict[str, Case]] = {}
"""Every registered case by id, in registration order."""


def case(*, id: str, level: Level, description: str, kill: str) -> Callable[[CaseBody], CaseBody]:
    """Register the decorated coroutine function as a case (see the module docstring)."""
    if level not in LEVELS:
        raise ValueError(f"level must be MUST or SHOULD, got {level!r}")
    spec = spec_reference(id)
    if not description.strip() or "\n" in description:
        raise ValueError(f"case {id}: description must be one line")
    if not kill.strip():
        raise ValueError(f"case {id}: every case needs a kill")

    def register(body: CaseBody) -> CaseBody:
        if id in CASES:
            raise ValueError(f"duplicate case id {id!r}")
        CASES[id] = Case(
            id=id, level=level, description=description, kill=kill, body=body, spec=spec
        )
        return body

    return register


def all_cases() -> list[Case]:
    """Every case, after importing every case module: §7 first, then the notes, by section."""
    from . import cases  # noqa: F401  (registers the cases)

    return sorted(CASES.values(), key=_order)


def _order(item: Case) -> tuple[int, tuple[int, ...]]:
    section = item.section
    notes = section.startswith("notes-")
    numbers = tuple(int(n) for n in section.removeprefix("notes-").split("."))
    return (1 if notes else 0, numbers)
