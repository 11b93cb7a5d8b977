"""Who is in a session: presence announcements (logged now, or coalesced for a large
audience), the removal of a participant whose reattach window ran out, and what the log says
about who is attached (:func:`logged_roster`, read by the recoveries that repair it).

Presence (docs/protocol.md "Presence"): with :data:`_COALESCE_AUDIENCE` local participants or
more, the presence changes of one delivery step go out as one coalesced frame; below it, one
frame per change at once (the audience is small: coalescing would only delay it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Final

import msgspec
import structlog

from protocol.errors import StoreUnavailableError
from protocol.frames import Presence, PresenceChange

from ..store.base import Deadline, ParticipantRecord
from . import builders
from .core import NEVER_DUE_MS, Hooks, SessionCore
from .pipeline import Decoded

__all__ = ["Roster", "deadline_again", "logged_roster"]

log = structlog.get_logger("rawp.session")

_COALESCE_AUDIENCE: Final = 8
_MIN_PRESENCE_WAIT: Final = 0.0  # seconds: the least ... (one loop step)
_MAX_PRESENCE_WAIT: Final = 1.0  # ... and the most a presence change waits to coalesce
# The node's presence steps take at most about this share of its time: a step waits
# (1 / share - 1) times what the session's last one cost, its write round included, times
# the sessions with a step waiting (they share the node).
_PRESENCE_SHARE: Final = 0.05


def logged_roster(decoded: Sequence[Decoded]) -> dict[str, PresenceChange]:
    """Each participant's last presence change in the log, but those that expired: who the
    log says is attached or detached (docs/protocol.md §5 item 11: later changes win)."""
    roster: dict[str, PresenceChange] = {}
    for frame, _ in decoded:
        if isinstance(frame, Presence):
            for change in frame.payload.all_changes():
                if change.state == "expired":
                    roster.pop(change.participant_id, None)
                else:
                    roster[change.participant_id] = change
    return roster


def deadline_again(armed: Deadline, record: ParticipantRecord, now_ms: int) -> Deadline:
    """``armed`` (a deadline made now) moved to when ``record``'s first was due: its window
    runs from its detach, not from the repair that arms it again."""
    if record.detached_at_ms is None or armed.due_ms == NEVER_DUE_MS:
        return armed
    return msgspec.structs.replace(armed, due_ms=record.detached_at_ms + (armed.due_ms - now_ms))


class Roster:
    """One session's presence log and participant-record bookkeeping."""

    def __init__(self, core: SessionCore, hooks: Hooks) -> None:
        self.core = core
        self.hooks = hooks
        # Presence changes not yet logged, and the task that logs them; the cost of the last
        # coalesced frame paces the next one.
        self._due: list[PresenceChange] = []
        self._task: asyncio.Task[None] | None = None
        self._cost = 0.0

    async def log_presence(self, changes: list[PresenceChange]) -> bool:
        """Log ``changes`` now as one frame (caller holds the lock); False if not logged."""
        if not changes:
            return True
        exclude = changes[0].participant_id if len(changes) == 1 else None
        frame = builders.presence(self.core.id, changes)
        logged = await self.hooks.append_master([frame], exclude=exclude)
        if not logged:
            # Nobody sends it again: the log and the records disagree on who is attached
            # until the session is loaded again, which logs what the records say.
            self.core.coordinator.store_failed(self.core)
        return logged

    async def announce(self, record: ParticipantRecord, state: str) -> None:
        """A presence change (caller holds the lock): logged now, or coalesced (big audience).

        One change is not sent to the participant it is about (notes §15.4); a coalesced
        frame goes to every attached participant, who reads its own change as a no-op.
        """
        self._due.append(builders.presence_change(record, state))
        if len(self.core.participants) < _COALESCE_AUDIENCE and self._task is None:
            await self._log_due()
        elif self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._coalesce())

    async def _log_due(self) -> None:
        """Log the presence changes due, in order, as one frame (caller holds the lock)."""
        due, self._due = self._due, []
        if due and not self.core.terminated:
            await self.log_presence(due)

    async def _coalesce(self) -> None:
        """Wait one delivery step (paced by the last one's cost), then log what is due."""
        core = self.core
        try:
            # Paced by what a step costs, its write round included (a millisecond to log and
            # post to 1,000 outboxes, ten to write them): a step costs its audience, not the
            # changes it carries, so an attach's share stays flat as the audience grows
            # (paced 2x, attaching to 1,000 edges cost twice what 1 did; paced per session
            # alone, 100 sessions bursting took the whole node: bench/results/storm.md).
            steps = core.deps.presence
            cost = max(self._cost, core.flush_cost)
            wait = cost * (1 / _PRESENCE_SHARE - 1) * (steps.waiting + 1)
            wait = max(_MIN_PRESENCE_WAIT, min(wait, _MAX_PRESENCE_WAIT))
            steps.waiting += 1
            try:
                await asyncio.sleep(wait)
            finally:
                steps.waiting -= 1
            async with core.lock, core.coordinator.guard(core):
                self._task = None
                started = time.perf_counter()
                await self._log_due()
                self._cost = time.perf_counter() - started
        except StoreUnavailableError:
            core.coordinator.store_failed(core)
        except Exception:
            log.exception("presence_failed", session_id=core.id)
        finally:
            if self._task is asyncio.current_task():
                self._task = None

    async def expire_record(self, participant_id: str) -> None:
        """Remove a detached participant's record and deadline, and announce it expired."""
        core = self.core
        record = await core.store.get_participant(core.id, participant_id)
        await core.store.remove_participant(core.id, participant_id)
        await core.store.clear_deadline(core.id, participant_id)
        if participant_id == core.client_id:
            core.client_id = None
        if record is not None:
            await self.announce(record, "expired")
