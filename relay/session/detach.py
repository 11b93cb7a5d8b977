"""A participant leaves: its connection closed (detach, §7.8.1 finalization of a client) or
its reattach window ran out (expiry; the client's ends the session). Notes §5, §9.
"""

from __future__ import annotations

import time

import structlog

from protocol.errors import StoreUnavailableError
from protocol.finalize import finalize

from ..store.base import Deadline
from .core import NEVER_DUE_MS, Hooks, SessionCore
from .participant import Participant
from .pipeline import CommitPipeline
from .roster import Roster

__all__ = ["Departures"]

log = structlog.get_logger("rawp.session")


def _now_ms() -> int:
    return int(time.time() * 1000)


class Departures:
    """Detach and expiry of one session's participants."""

    def __init__(
        self, core: SessionCore, pipeline: CommitPipeline, roster: Roster, hooks: Hooks
    ) -> None:
        self.core = core
        self.pipeline = pipeline
        self.roster = roster
        self.hooks = hooks

    async def detach(self, participant: Participant, *, finalize_client: bool = True) -> None:
        """The participant's connection is gone (notes §5): presence, window, §7.8.1."""
        core = self.core
        participant.outbox.close()  # the socket is gone, whatever happened to the session
        async with core.lock:
            if core.terminated or participant.fenced:
                return
            if core.participants.get(participant.id) is not participant:
                return
            own = self.pipeline.take_queued(participant)
            if own:
                # Frames it sent before its socket closed come before its detach and the
                # finalization (a slow store may still hold them queued); the others' wait.
                try:
                    await self.pipeline.commit_now(own)
                except Exception:
                    log.exception("commit_failed", session_id=core.id)
                if core.terminated:
                    return
            del core.participants[participant.id]
            record = participant.record
            record.attached = False
            record.detached_at_ms = _now_ms()
            store = core.store
            coordinator = core.coordinator
            try:
                if not await coordinator.detaching(core, participant):
                    return  # [multinode] taken over on another node, or swept: not ours
                deadline = core.deps.deadline_for(core.id, record.participant_id)
                await store.put_detached(core.id, record, deadline)  # one write, one fsync
                await self.roster.announce(record, "detached")
                if core.terminated:
                    return  # its presence was refused: unloaded, the reload finalizes
                if participant.role == "client" and finalize_client:
                    synthetic = finalize(core.state, session_id=core.id, sender=core.master_sender)
                    if synthetic and not await self.hooks.append_master(synthetic):
                        # Refolded from the log, the turn is open again with no client to
                        # end it: loaded again, the session finalizes it (relay/restart.py).
                        coordinator.store_failed(core)
            except StoreUnavailableError:
                coordinator.store_failed(core)
            finally:
                await coordinator.release(core)  # [multinode] what detaching() took

    def _held_by_revisits(self) -> int | None:
        """When a detached client's window ends if revisits are pending: the reattach window
        after the latest one's time (None: none pending, or that is past already)."""
        core = self.core
        pending = core.state.pending_revisits
        if not pending:
            return None
        window_s = core.settings.reattach_window
        latest = max(p.at.timestamp() for p in pending.values())
        due_ms = int((latest + window_s) * 1000) if window_s != float("inf") else NEVER_DUE_MS
        return due_ms if due_ms > _now_ms() else None

    async def expire(self, participant_id: str) -> None:
        """The participant's reattach window ran out (notes §5, §9)."""
        core = self.core
        async with core.lock, core.coordinator.guard(core):  # [multinode] cross-node mutex
            if core.terminated or participant_id in core.participants:
                return
            if await core.coordinator.attached_elsewhere(core, participant_id):
                return  # [multinode] it reattached on another node meanwhile
            if participant_id == core.client_id:
                held = self._held_by_revisits()
                if held is not None:
                    # notes §17.5: the agent said when it comes back; its window runs from
                    # its last wake, not from its detach.
                    await core.store.set_deadline(
                        Deadline(session_id=core.id, participant_id=participant_id, due_ms=held)
                    )
                    return
                await self.hooks.terminate_locked("timeout", "system")
            else:
                await self.roster.expire_record(participant_id)
