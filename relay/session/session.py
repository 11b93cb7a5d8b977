"""One session on this node, as the rest of the master sees it: the public :class:`Session`.

Everything that changes a session runs under its lock (``Session.lock``), so the log, the
folded state and the set of attached participants always move together: attach reads the
backlog and joins live delivery with no append in between, and delete and attach of the
same session are serialized (seed 001's race, notes §9).

The session is composed of parts with one job each (docs/architecture.md): the commit
pipeline (:mod:`.pipeline`), presence and records (:mod:`.roster`), attach and backlog
(:mod:`.attach`), detach and expiry (:mod:`.detach`), a client's history (:mod:`.history`)
and the end (:mod:`.termination`), over the shared state and fan-out of :mod:`.core`; what a
committed entry does beyond the state, wherever it was committed, is :mod:`.effects`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from protocol import codec
from protocol.errors import ProtocolError
from protocol.finalize import fold_entry
from protocol.frames import Frame, GenericFrame, Hello, History, PresenceChange
from protocol.state import SenderRole, SessionState

from ..coordination import ParticipantRead
from ..fanout import Sink
from ..store.base import LogEntry, SessionHeader
from .attach import Attacher
from .core import SessionCore, SessionDeps
from .detach import Departures
from .effects import Effects
from .history import ClientHistory
from .participant import Participant
from .pipeline import CommitPipeline, Decoded
from .roster import Roster
from .termination import Termination

if TYPE_CHECKING:
    from ..auth import Principal

__all__ = ["Session"]


class Session(SessionCore):
    """One session served by this node: its state, participants and every change to them."""

    def __init__(
        self, deps: SessionDeps, header: SessionHeader, state: SessionState, head: int
    ) -> None:
        super().__init__(deps, header, state, head)
        self.effects = Effects(self, self)
        self.pipeline = CommitPipeline(self, self, self.effects)
        self.roster = Roster(self, self)
        self.attacher = Attacher(self, self.roster)
        self.departures = Departures(self, self.pipeline, self.roster, self)
        self.history = ClientHistory(self, self.pipeline, self)
        self.termination = Termination(self, self.pipeline, self)

    @property
    def worker(self) -> asyncio.Task[None] | None:
        """The task draining the inbox, once a frame has arrived."""
        return self.pipeline.worker

    @property
    def queued(self) -> int:
        """Frames waiting in the inbox."""
        return self.pipeline.queued

    # --- frames from participants -------------------------------------------------------

    def offer(self, participant: Participant, frame: Frame | GenericFrame, raw: bytes) -> bool:
        """Queue a participant's frame for the worker; False once the inbox is full: the
        caller reads no more until :meth:`room`."""
        return self.pipeline.offer(participant, frame, raw)

    async def room(self) -> None:
        """Return once the inbox takes frames again."""
        await self.pipeline.room()

    async def submit_now(
        self, participant: Participant, frame: Frame | GenericFrame, raw: bytes
    ) -> None:
        """Commit one frame now on the inbox's own path (dedupe, state machine, log, fan-out).

        [http-api] For senders without a socket (``POST /v1/sessions/{id}/events``): the
        caller awaits the commit; refusals reach ``participant.send_error``.
        """
        async with self.lock:
            await self.pipeline.commit_now([(participant, frame, raw)])

    async def accept_history(self, participant: Participant, frame: History) -> None:
        """Log a client's ``session.history`` (caller holds the lock; §7.8.3)."""
        await self.history.accept(participant, frame)

    # --- master-made frames and other nodes' entries ------------------------------------

    async def append_master(
        self,
        frames: Sequence[Frame],
        *,
        exclude: str | None = None,
        edges_only: bool = False,
    ) -> bool:
        """Fold, log and deliver frames the master makes (notes §15.2). False if not logged."""
        return await self.pipeline.append_master(frames, exclude=exclude, edges_only=edges_only)

    async def log_presence(self, changes: list[PresenceChange]) -> bool:
        """Log ``changes`` now as one frame (caller holds the lock); False if not logged."""
        return await self.roster.log_presence(changes)

    async def receive(self, entry: LogEntry, *, fold: bool = True) -> None:
        """An entry another node committed (caller holds the lock): fold it, deliver it and
        apply its effects as a node that does not own it (:mod:`.effects`) — unless it is one
        of ours whose store reply was lost (:meth:`CommitPipeline.claim`).

        ``fold=False`` when the caller refolds the state from the log next. Entries at or
        below the head are already here and ignored.
        """
        if entry.seq <= self.head:
            return
        role = cast(SenderRole, entry.sender_role)
        try:
            frame = codec.decode(entry.data)
        except ProtocolError:
            # the node that logged it checked it; a replay of the log skips it the same way
            self.committed(entry, None)
            return
        if fold:
            try:
                fold_entry(self.state, frame, role)
            except ProtocolError:
                pass  # as a replay of the log does
            self.runs.observe()  # a turn another node's client opened or ended
        self.committed(entry, None)
        owner = self.pipeline.claim(entry.message_id)
        await self.effects.apply(frame, role, owner=owner, sender_id=entry.sender_id)

    async def rebuild(self) -> list[Decoded] | None:
        """Refold the state from the log, delivering first what it holds past the head; the
        log it read, decoded (None when the store could not read it)."""
        return await self.pipeline.rebuild()

    # --- attach / detach ----------------------------------------------------------------

    async def attach(
        self,
        sink: Sink,
        hello: Hello,
        principal: Principal,
        known: ParticipantRead | None = None,
    ) -> Participant:
        """Attach a connection (caller holds ``self.lock``); queues welcome and backlog.
        ``known``: the participant's record and last received id, already read."""
        return await self.attacher.attach(sink, hello, principal, known)

    async def detach(self, participant: Participant, *, finalize_client: bool = True) -> None:
        """The participant's connection is gone (notes §5): presence, window, §7.8.1."""
        await self.departures.detach(participant, finalize_client=finalize_client)

    async def expire(self, participant_id: str) -> None:
        """The participant's reattach window ran out (notes §5, §9)."""
        await self.departures.expire(participant_id)

    def drop(self, participant: Participant) -> None:
        """Fence ``participant`` and forget it here, without a detach (another node took its
        connection over, or this node lost its place); the caller closes its socket."""
        participant.fence()
        if self.participants.get(participant.id) is participant:
            del self.participants[participant.id]

    # --- the end ------------------------------------------------------------------------

    async def terminate(self, reason: str, deleted_by: str) -> None:
        """Delete the session with the §7.5.3 / §7.7 order to every attached participant."""
        async with self.lock:
            await self.terminate_locked(reason, deleted_by)

    async def terminate_locked(self, reason: str, deleted_by: str) -> None:
        """:meth:`terminate` for a caller holding the lock (and, multi-node, the mutex)."""
        await self.termination.terminate(reason, deleted_by)

    def end_here(self) -> None:
        """The session ended elsewhere (another node): accept nothing more from now on."""
        self.termination.end_here()

    async def close_participants(self, reason: str) -> None:
        """Let each attached participant's queued frames out (bounded), fence it, close it
        1000 with ``reason``, and forget it: the end of a deleted session on this node."""
        await self.termination.close_participants(reason)

    def cancel_worker(self) -> None:
        """Cancel the worker of a session being unloaded (it waits for frames that cannot
        come)."""
        self.pipeline.cancel_worker()
