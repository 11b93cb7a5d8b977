"""What a session asks of the other nodes: the coordinator interface, and its one-node form.

A session is handed a coordinator when it is made and calls it at the few points where
several nodes sharing a store must agree (docs/architecture.md, "Who may import whom"):
around attach, detach, expiry and delete (the cross-node session mutex), before it judges
a batch (is the state current?), and when its own append comes back (did another node
append in between?). One node gets :class:`SoleNode`, whose every answer is "nothing to
do"; several nodes on one Redis get ``relay.cluster.ClusterNode``. The session code is the
same either way.

The interface is generic in the session and participant types so that this module, which
sits below the session, never names them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar

from protocol.frames import Frame, GenericFrame

from .store.base import AppendResult, LogEntry, ParticipantRecord

__all__ = ["Coordinator", "LogPage", "Node", "ParticipantRead", "SoleNode"]

S = TypeVar("S", contravariant=True)
P = TypeVar("P", contravariant=True)


class LogPage(NamedTuple):
    """A read of the log: the entries after ``after_seq``, at most ``limit`` of them, as far
    as the log went then (an attach keeps those up to its head)."""

    after_seq: int
    limit: int
    entries: list[LogEntry]


class ParticipantRead(NamedTuple):
    """What the cross-node rules already read for an attaching participant, under its
    session's lock and mutex: the attach uses it instead of reading it again."""

    record: ParticipantRecord | None
    """its record (None: the store has none)"""
    received: str | None
    """the id of its last frame the log holds (``welcome.received``)"""
    backlog: LogPage | None = None
    """the first page of its backlog, when its hello named a cursor (None: not read)"""


class Coordinator(Protocol[S, P]):
    """The multi-node hooks a session calls (``S``: the session, ``P``: a participant)."""

    @property
    def id(self) -> str:
        """This node's id."""
        ...

    @property
    def lease_epoch(self) -> int:
        """This node's lease epoch now (0: no leases); an attach records it (a sweep of
        this node recovers only what it attached under the leases it fenced)."""
        ...

    def guard(self, session: S) -> contextlib.AbstractAsyncContextManager[None]:
        """Hold the session's cross-node mutex, caught up with the log (caller holds
        ``session.lock``)."""
        ...

    def writes_under(self, epoch: int) -> contextlib.AbstractContextManager[None]:
        """Within the block, this node's appends carry lease ``epoch`` (not the one it holds
        by the time they are made): frames judged under a lease are written under it, and
        refused if that lease was fenced meanwhile (notes §16.9)."""
        ...

    def attaching(
        self, session: S, role: str, participant_id: str | None, backlog_after: int | None
    ) -> contextlib.AbstractAsyncContextManager[ParticipantRead | None]:
        """Around an attach (caller holds ``session.lock``): cross-node checks and takeover;
        yields what they read for the participant (its record, its last received id, the
        first page of its backlog after ``backlog_after`` when not None), when that is still
        what the store holds."""
        ...

    async def detaching(self, session: S, participant: P) -> bool:
        """Before a detach writes anything: is the participant's record still this node's?"""
        ...

    async def release(self, session: S) -> None:
        """After a detach: let go of what :meth:`detaching` took."""
        ...

    async def ready(
        self, session: S, batch: Sequence[tuple[P, Frame | GenericFrame, bytes]]
    ) -> bool:
        """May the session judge ``batch`` against its state? (False: refused.)"""
        ...

    def needs_sync(self, session: S) -> bool:
        """Will :meth:`ready` refold the session from the log first?"""
        ...

    async def before_delivery(self, session: S, results: Sequence[AppendResult]) -> bool:
        """Deliver entries another node appended before ours; True when there were some."""
        ...

    async def attached_elsewhere(self, session: S, participant_id: str) -> bool:
        """Is the participant attached on another node (so its deadline is moot)?"""
        ...

    def store_failed(self, session: S) -> None:
        """The store failed mid-change: reload (one node) or refold (several) the session."""
        ...

    def ended_elsewhere(self, session: S) -> None:
        """Another node logged the session's end: accept nothing more, close ours here."""
        ...

    def writing(self, session_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        """Around a write outside a connection (REST): fenced like the node's connections."""
        ...


class Node(Coordinator[S, P], Protocol):
    """A coordinator as the hub sees it: it also joins and leaves, and follows the sessions
    this node loads."""

    async def start(self) -> None:
        """Join the other nodes."""
        ...

    async def stop(self) -> None:
        """Leave them."""
        ...

    async def follow(self, session: S) -> None:
        """A session was loaded on this node: hear what other nodes commit to it."""
        ...

    def unfollow(self, session: S) -> None:
        """A session was forgotten on this node."""
        ...

    def arrived(self) -> None:
        """An HTTP request arrived: it is served under this node's lease as it is now."""
        ...


class SoleNode:
    """This master alone: every multi-node hook is a no-op.

    ``unload`` is how a session whose store write failed is dropped from the node's registry
    with its connections (the hub's ``unload_stale``), so that its next use loads it again.
    """

    def __init__(self, node_id: str, unload: Callable[[Any], None]) -> None:
        self._id = node_id
        self._unload = unload

    @property
    def id(self) -> str:
        """This node's id."""
        return self._id

    @property
    def lease_epoch(self) -> int:
        """One node: no leases."""
        return 0

    async def start(self) -> None:
        """Nothing to join."""

    async def stop(self) -> None:
        """Nothing to leave."""

    async def follow(self, session: object) -> None:
        """Nobody else commits."""

    def unfollow(self, session: object) -> None:
        """Nothing was followed."""

    def arrived(self) -> None:
        """One node: no lease to note."""

    def writing(self, session_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        """One node: nobody can fence it."""
        return contextlib.nullcontext()

    def guard(self, session: object) -> contextlib.AbstractAsyncContextManager[None]:
        """No other node: nothing to hold."""
        return contextlib.nullcontext()

    def writes_under(self, epoch: int) -> contextlib.AbstractContextManager[None]:
        """One node: no leases."""
        return contextlib.nullcontext()

    def attaching(
        self, session: object, role: str, participant_id: str | None, backlog_after: int | None
    ) -> contextlib.AbstractAsyncContextManager[ParticipantRead | None]:
        """No other node: nothing to check, nothing read."""
        return contextlib.nullcontext()

    async def detaching(self, session: object, participant: object) -> bool:
        """Every record is this node's."""
        return True

    async def release(self, session: object) -> None:
        """Nothing was taken."""

    async def ready(
        self, session: object, batch: Sequence[tuple[object, Frame | GenericFrame, bytes]]
    ) -> bool:
        """The state is always current."""
        return True

    def needs_sync(self, session: object) -> bool:
        """Never."""
        return False

    async def before_delivery(self, session: object, results: Sequence[AppendResult]) -> bool:
        """Nobody else appends."""
        return False

    async def attached_elsewhere(self, session: object, participant_id: str) -> bool:
        """There is no elsewhere."""
        return False

    def store_failed(self, session: object) -> None:
        """Unload the session with its connections: its next use reloads it."""
        self._unload(session)

    def ended_elsewhere(self, session: object) -> None:
        """There is no elsewhere: every end of a session is this node's own."""
