"""What a committed frame does beyond the session state: the effects the state table names.

Every rule of :data:`protocol.state.TABLE` names the :class:`~protocol.state.Effect` of its
frame (:func:`protocol.state.effect_of`); :meth:`Effects.apply` carries it out, and it is the
only place that does, for every committed entry wherever it came from: a frame this node's
worker committed (:mod:`.pipeline`), the frames inside a client's ``session.history``
(:mod:`.history`), an entry another node committed (:meth:`relay.session.Session.receive`),
and a delete request, which is accepted but never logged.

Where the entry came from changes what its effect does, and the caller says so with
``owner``: the node that committed an entry writes its side effects to the store and ends the
session; every other node only keeps what it holds in memory in step (the header's name, the
attached client) and closes its connections once the owner's ``session.deleted`` arrives.

A store error in a side effect never stops delivery: the entry is in the log and delivered
before its effects are applied. A rename whose header write fails is logged and written
again with the next entry this node commits for the session (docs/protocol.md §6
"Effects").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import structlog

from protocol import codec
from protocol.errors import ProtocolError, StoreError, StoreUnavailableError
from protocol.frames import (
    Frame,
    GenericFrame,
    History,
    Presence,
    Renamed,
    RevisitCancel,
    RevisitRequest,
)
from protocol.state import Effect, SenderRole, effect_of

from ..store.base import LogEntry, WakeRecord
from . import builders
from .core import Hooks, SessionCore
from .participant import Participant

__all__ = ["Effects"]

log = structlog.get_logger("rawp.session")


class Effects:
    """Carries out the effects of one session's committed frames (caller holds the lock)."""

    def __init__(self, core: SessionCore, hooks: Hooks) -> None:
        self.core = core
        self.hooks = hooks
        # A rename this node committed whose header write the store refused for the moment:
        # written again with the next entry this node commits (see _write_name).
        self.name_due: str | None = None

    async def apply(
        self,
        frame: Frame | GenericFrame,
        role: SenderRole,
        *,
        owner: bool,
        sender_id: str,
        sender: Participant | None = None,
    ) -> None:
        """Carry out the effect :func:`~protocol.state.effect_of` names for ``frame``.

        ``frame`` is committed (a delete request: accepted) and delivered already. ``owner``
        is True on the node that committed it: it writes the side effects to the store and
        ends the session — also for one of its own entries whose store reply was lost, found
        in the log later (:meth:`.pipeline.CommitPipeline.claim`); False for another node's
        entry, whose owner does those. ``sender_id`` is the entry's sender (the
        master of another node, for one); ``sender`` the local participant that sent it.
        """
        core = self.core
        if owner and self.name_due is not None:
            await self._write_name(self.name_due)
        effect = effect_of(frame, role)
        if effect is Effect.NONE:
            return
        if effect is Effect.RENAME and isinstance(frame, Renamed):
            core.header.name = frame.payload.name
            if owner:
                await self._write_name(frame.payload.name)
            else:
                self.name_due = None  # a later name, which its owner writes
        elif effect is Effect.END_REQUESTED:
            if owner:  # on the other nodes, the owner's session.deleted ends it (ENDED)
                await self.hooks.terminate_locked("user_request", role)
        elif effect is Effect.END_WITH_ERROR:
            if owner:
                await self.hooks.terminate_locked("error", role)
        elif effect is Effect.ENDED:
            # This node's own session.deleted ends the session where it is made (termination);
            # another node's ends it here too.
            if not owner and sender_id != core.master_sender.participant_id:
                core.coordinator.ended_elsewhere(core)
        elif effect is Effect.PRESENCE and isinstance(frame, Presence):
            if not owner:  # this node's attach and expiry set it when they log the change
                self._client_presence(frame)
        elif effect is Effect.HISTORY and isinstance(frame, History):
            await self._history(frame, role, owner=owner, sender_id=sender_id, sender=sender)
        elif effect in (Effect.REVISIT, Effect.REVISIT_CANCEL) and owner:
            await self._revisit(frame)

    async def _revisit(self, frame: Frame | GenericFrame) -> None:
        """Keep the store's pending wakes in step with the log (notes §17.5): a request puts
        its record (replacing the revisit's pending one), a cancel drops it. A store refusal is
        logged: the log holds the request all the same, and the wake sweep puts the records
        its pending revisits lack once the store takes writes again (relay/wakes.py) — the
        session may stay loaded, its client attached, for as long as it likes."""
        core = self.core
        try:
            if isinstance(frame, RevisitRequest):
                p = frame.payload
                await core.store.put_wake(
                    WakeRecord.pending(
                        core.id,
                        core.header.workspace,
                        p.revisit_id,
                        frame.message_id,
                        p.at,
                        p.reason,
                    )
                )
            elif isinstance(frame, RevisitCancel):
                await core.store.cancel_wake(core.id, frame.payload.revisit_id)
        except StoreError as exc:
            core.metrics.store_errors.inc()
            log.warning("revisit_not_stored", session_id=core.id, error=str(exc))
            if isinstance(frame, RevisitRequest):
                # A cancel not stored is harmless (its record wakes nothing: the state says
                # the revisit is no longer pending); a request not stored would never wake.
                core.deps.wake_unscheduled(core)

    async def apply_entry(self, entry: LogEntry, *, owner: bool) -> None:
        """:meth:`apply` for an entry as the log holds it (read back, or another node's)."""
        try:
            frame = codec.decode(entry.data)
        except ProtocolError:
            return  # the node that logged it checked it; a replay of the log skips it the same way
        role = cast(SenderRole, entry.sender_role)
        await self.apply(frame, role, owner=owner, sender_id=entry.sender_id)

    async def _history(
        self,
        frame: History,
        role: SenderRole,
        *,
        owner: bool,
        sender_id: str,
        sender: Participant | None,
    ) -> None:
        """A history's frames are logged once (inside it) and act like live ones, in order."""
        core = self.core
        inner = list(_frames_of(frame))
        for f in inner:
            core.remember(f.message_id)  # logged inside the history: logged once (§7)
        if sender is not None and inner:
            sender.record.last_received_message_id = inner[-1].message_id
        buffer_status = frame.payload.buffer_status
        if owner and buffer_status.truncated:
            # §7.1.1 MUST: tell the users the data is incomplete (before anything it ends).
            core.metrics.truncations.inc()
            notice = builders.truncation_notice(core.id, buffer_status)
            await self.hooks.append_master([notice], edges_only=True)
        for f in inner:
            if core.terminated:
                return  # what follows an ending in the history is logged but does nothing
            await self.apply(f, role, owner=owner, sender_id=sender_id, sender=sender)

    def _client_presence(self, frame: Presence) -> None:
        """Another node attached the session's client, or its window ran out there."""
        core = self.core
        for change in frame.payload.all_changes():  # coalesced: several
            if change.role != "client":
                continue
            pid = change.participant_id
            if change.state == "attached":
                core.client_id = pid
            elif change.state == "expired" and core.client_id == pid:
                core.client_id = None

    async def _write_name(self, name: str) -> None:
        """Write ``name`` into the session's header. The log holds the rename whatever the
        store answers here: a refusal is logged, and one the store may take later (it is
        unavailable) is written again with the next entry this node commits."""
        core = self.core
        try:
            await core.store.rename_session(core.id, name)
        except StoreError as exc:
            core.metrics.store_errors.inc()
            retried = isinstance(exc, StoreUnavailableError)
            self.name_due = name if retried else None
            log.warning("rename_not_stored", session_id=core.id, error=str(exc), retried=retried)
            return
        self.name_due = None


def _frames_of(frame: History) -> Iterator[Frame | GenericFrame]:
    for raw in frame.payload.frames:
        try:
            yield codec.decode(raw)
        except ProtocolError:
            continue  # the node that logged the history kept only frames it could read
