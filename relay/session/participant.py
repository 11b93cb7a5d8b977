"""One attached connection of a participant: its record, outbox, cursor and fencing."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING, Literal, Protocol

import structlog

from protocol import codec
from protocol.errors import ProtocolError
from protocol.frames import Sender

from ..fanout import SLOW_CONSUMER, Outbox, Sink
from ..metrics import Metrics
from ..store.base import LogEntry, ParticipantRecord
from . import builders
from .runs import Held

if TYPE_CHECKING:
    from ..auth import Principal

__all__ = ["Participant", "SessionLink"]

log = structlog.get_logger("rawp.session")


class SessionLink(Protocol):
    """What a participant reads of its session (the session itself, seen from below)."""

    @property
    def id(self) -> str:
        """The session id."""
        ...

    @property
    def head(self) -> int:
        """The session's last committed seq."""
        ...

    @property
    def metrics(self) -> Metrics:
        """The master's metrics."""
        ...

    @property
    def master_sender(self) -> Sender:
        """The sender of master-made frames."""
        ...


class Participant:
    """One attached connection of a participant (a client or an edge)."""

    can_hold = True  # a message of its that waits for the agent is held for it (runs.py)

    def __init__(
        self,
        session: SessionLink,
        record: ParticipantRecord,
        sink: Sink,
        principal: Principal,
        *,
        send_queue_bytes: int,
    ) -> None:
        self.session = session
        self.record = record
        self.sink = sink
        self.principal = principal
        self.generation = record.generation
        self.fenced = False
        self.sender = Sender(role=record.role, participant_id=record.participant_id)
        self.outbox = Outbox(
            sink,
            limit_bytes=send_queue_bytes,
            on_sent=self._sent,
            on_overflow=self._overflow,
        )
        self.acked: int | None = None
        # The oldest of its frames the store refused and it has not sent again: until it does,
        # its later frames are refused too, so what it re-sends is logged in order (notes §12).
        self.refused_from: str | None = None
        # One run at a time (runs.py): this edge's user.messages waiting for the agent, oldest
        # first, the task that hands them back, and the one being judged again with its wait's
        # deadline. ``steers``: a client whose hello accepts input during its turn.
        self.held: deque[Held] = deque()
        self.releaser: asyncio.Task[None] | None = None
        self.releasing: Held | None = None
        self.steers = False

    @property
    def id(self) -> str:
        """The participant id."""
        return self.record.participant_id

    @property
    def role(self) -> Literal["client", "edge"]:
        """client or edge."""
        return self.record.role

    def _sent(self, seq: int) -> None:
        if seq > self.record.cursor and self.acked is None:
            self.record.cursor = seq

    def ack(self, last_seq: int) -> None:
        """connection.ack: from now on the cursor follows what the participant confirmed."""
        self.acked = max(self.acked or 0, min(last_seq, self.session.head))
        self.record.cursor = self.acked

    def fence(self) -> None:
        """Accept nothing more from this connection and send it nothing more (its socket is
        closed by the caller: superseded, session ended, node lost its place)."""
        self.fenced = True
        self.outbox.close()

    def close_soon(self, code: int, reason: str) -> None:
        """Close the socket in the background (after :meth:`fence`)."""
        asyncio.get_running_loop().create_task(self.sink.close(code, reason))

    def _overflow(self) -> None:
        log.warning("slow_consumer", participant_id=self.id, session_id=self.session.id)
        self.session.metrics.slow_consumers.inc()
        self.close_soon(SLOW_CONSUMER, "slow_consumer: send queue over its bound")

    def send_error(
        self,
        error: ProtocolError,
        *,
        lost_frame_count: int | None = None,
        ref_message_id: str | None = None,
    ) -> None:
        """Send a non-logged ``session.error`` to this participant only.

        ``ref_message_id`` names the frame the error refuses (notes §16.3); a warning about
        a frame that was accepted (``usage_missing``) carries none.
        """
        self.session.metrics.errors.labels(error.code).inc()
        frame = builders.error(
            self.session.id,
            self.session.master_sender,
            error,
            lost_frame_count=lost_frame_count,
            ref_message_id=ref_message_id,
        )
        self.outbox.put(codec.encode(frame))

    def send_ack(self, entry: LogEntry) -> None:
        """``connection.ack`` (notes §16.3): ``entry`` is our latest committed frame."""
        if self.fenced:
            return
        frame = builders.ack(
            self.session.id, self.session.master_sender, entry.seq, entry.message_id
        )
        self.outbox.post(codec.encode(frame))
