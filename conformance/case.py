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

A case declares the features of a master it relies on beyond the rule it checks (see
:data:`FEATURES`): ``needs`` — without the feature the case cannot be judged and is SKIPped,
naming the missing prerequisite; ``uses`` — the case works either way, falling back to another
signal when the feature is missing (``ctx.has(name)`` tells which); ``checks`` — the feature
the case itself judges (only such cases FAIL when a master lacks it). Whether a master has a
feature is found once per run by the feature's probe (:mod:`.probes`), at the first case that
declares it. Adding a feature is one :func:`feature` call and one probe.

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
    "FEATURES",
    "LEVELS",
    "Case",
    "CaseBody",
    "CaseFailed",
    "CaseSkipped",
    "Feature",
    "Level",
    "all_cases",
    "case",
    "expect",
    "fail",
    "feature",
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
    """The case cannot run against this master (its configuration); the message says why.

    ``setting`` names the master setting or runner flag that would let it run (for the
    summary), when there is one.
    """

    def __init__(self, reason: str, *, setting: str = "") -> None:
        super().__init__(reason)
        self.setting = setting


def fail(message: str) -> None:
    """Fail the running case."""
    raise CaseFailed(message)


def expect(condition: object, message: str) -> None:
    """Fail the running case with ``message`` unless ``condition`` holds."""
    if not condition:
        raise CaseFailed(message)


def skip(reason: str, *, setting: str = "") -> None:
    """Skip the running case (only where the master's configuration makes it impossible);
    ``setting``: what would let it run (``a reattach window of at most 4 s``)."""
    raise CaseSkipped(reason, setting=setting)


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
    checks: str | None = None
    needs: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()
    holds_s: float = 0.0
    """Seconds a correct master makes the case wait by rule (a held message's 3 s): added to
    the case's deadline, so that a short ``--timeout`` still judges the rule, not the clock."""

    @property
    def prerequisites(self) -> tuple[str, ...]:
        """Every feature the case relies on (``needs`` first), the one it checks excluded."""
        return tuple(f for f in (*self.needs, *self.uses) if f != self.checks)

    @property
    def section(self) -> str:
        """The section part of the id (``7.5.3``, ``notes-5``)."""
        return self.id.split("/", 1)[0]


@dataclass(frozen=True)
class Feature:
    """Something a master may offer that some cases rely on beyond what they check."""

    name: str
    description: str
    spec: str


FEATURES: Final[dict[str, Feature]] = {}
"""Every declared feature by name."""


def feature(name: str, *, description: str, spec: str) -> Feature:
    """Declare a feature cases may name in ``checks``, ``needs`` and ``uses``."""
    if name in FEATURES:
        raise ValueError(f"duplicate feature {name!r}")
    FEATURES[name] = Feature(name=name, description=description, spec=spec)
    return FEATURES[name]


PRESENCE = feature(
    "presence",
    description="session.presence is broadcast when a participant attaches, detaches, expires",
    spec="rawp-notes §5",
)
REST_SESSIONS = feature(
    "rest-sessions",
    description="GET /v1/sessions/{id} shows each participant's connection state",
    spec="rawp-notes §10",
)
SESSION_TOKENS = feature(
    "session-tokens",
    description="POST /v1/sessions/{id}/tokens issues a session token that attaches as an edge",
    spec="rawp-notes §10, §11",
)
RENAME_OVER_HTTP = feature(
    "rename-over-http",
    description="PATCH /v1/sessions/{id} makes the master rename the session",
    spec="rawp-notes §10",
)
ARCHIVED_SESSIONS = feature(
    "archived-sessions",
    description="a session ended by a fatal error stays readable over HTTP as terminated",
    spec="rawp-notes §16.1",
)

CASES: Final[dict[str, Case]] = {}
"""Every registered case by id, in registration order."""


def case(
    *,
    id: str,
    level: Level,
    description: str,
    kill: str,
    checks: str | None = None,
    needs: tuple[str, ...] = (),
    uses: tuple[str, ...] = (),
    holds_s: float = 0.0,
) -> Callable[[CaseBody], CaseBody]:
    """Register the decorated coroutine function as a case (see the module docstring)."""
    for name in (*([checks] if checks else []), *needs, *uses):
        if name not in FEATURES:
            raise ValueError(f"case {id}: unknown feature {name!r}")
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
            id=id,
            level=level,
            description=description,
            kill=kill,
            body=body,
            spec=spec,
            checks=checks,
            needs=needs,
            uses=uses,
            holds_s=holds_s,
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
