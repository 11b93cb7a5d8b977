"""Attaching a connection: the roles' rules, takeover, welcome, and the backlog (notes §5, §7).

The backlog is the M→participant ``session.history`` of everything after the participant's
cursor, streamed from the log through its bounded buffer (docs/protocol.md §7).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Final, Literal

from protocol import codec
from protocol.buffers import BoundedBuffer
from protocol.errors import ClientAttached, CloseCode, Forbidden, StoreUnavailableError
from protocol.frames import BufferGrant, Hello, Welcome

from ..coordination import LogPage, ParticipantRead
from ..fanout import Sink
from ..store.base import LogEntry, ParticipantRecord
from . import builders
from .core import SessionCore
from .participant import Participant
from .roster import Roster

if TYPE_CHECKING:
    from ..auth import Principal

__all__ = ["BACKLOG_FIRST_READ", "Attacher", "backlog_read_after"]

_BACKLOG_PAGE: Final = 256  # log entries read at once while a backlog is built
BACKLOG_FIRST_READ: Final = _BACKLOG_PAGE + 1
"""Entries the first read of a backlog takes: the cursor's own (the anchor) and a page."""


def backlog_read_after(cursor: int) -> int:
    """The seq the first read of a backlog from ``cursor`` starts after (the anchor's
    predecessor: the anchor's id and time go in the history)."""
    return max(0, cursor - 1)


_SUPERSEDED: Final = CloseCode.SUPERSEDED


def _new_participant_id() -> str:
    return "p-" + codec.new_message_id()


class Attacher:
    """Attaches connections to one session (caller holds the lock)."""

    def __init__(self, core: SessionCore, roster: Roster) -> None:
        self.core = core
        self.roster = roster

    async def attach(
        self,
        sink: Sink,
        hello: Hello,
        principal: Principal,
        known: ParticipantRead | None = None,
    ) -> Participant:
        """Attach a connection (caller holds the lock); queues welcome and backlog.
        ``known``: the participant's record and last received id, read under this lock."""
        core = self.core
        store = core.store
        settings = core.settings
        p = hello.payload
        role: Literal["client", "edge"] = p.role
        record = None
        received = None
        read_ahead = None
        if known is not None:  # read by the cross-node rules under this lock already
            record, received, read_ahead = known
        elif p.participant_id:
            # One read for both (one round trip under the session lock, not two).
            record, received = await store.participant_and_received(core.id, p.participant_id)
        if record is not None and record.role != role:
            record = None  # (``received`` is used only when the record is this one's)
        current = core.attached_client()
        if role == "client":
            if current is not None and (record is None or current.id != record.participant_id):
                raise ClientAttached("another client is attached to this session")
            if core.client_id is not None and (
                record is None or record.participant_id != core.client_id
            ):
                await self.roster.expire_record(core.client_id)
                if core.terminated:  # its presence was refused: the session was unloaded
                    raise StoreUnavailableError("the store failed: reattach")
        elif len(core.participants) - (current is not None) >= settings.max_edges_per_session:
            raise Forbidden("this session has its maximum number of edges attached")
        resumed = record is not None
        if record is None:
            record = ParticipantRecord(participant_id=_new_participant_id(), role=role)
        previous = core.participants.pop(record.participant_id, None)
        if previous is not None:
            # Takeover: fence the older generation; no finalization (notes §15.6).
            previous.fence()
            previous.close_soon(_SUPERSEDED, "superseded by a newer connection")
            # Its cursor lives in memory (what was written to it, or its acks); the record
            # read from the store holds the one of its attach: the backlog would repeat it all.
            record.cursor = max(record.cursor, previous.record.cursor)
        record.generation += 1
        record.attached = True
        record.node_id = settings.node_id
        record.epoch = core.coordinator.lease_epoch
        record.detached_at_ms = None
        record.buffer = self._grant(p.buffer, record.buffer)
        if p.presence is not None:  # else the previous hello's choice (§5 item 12)
            record.presence = p.presence
        if resumed:
            # From the log, not the record: right at once after a takeover on another node.
            record.last_received_message_id = received
        participant = Participant(
            core, record, sink, principal, send_queue_bytes=settings.send_queue_bytes
        )
        participant.steers = role == "client" and bool(p.accepts_input_during_turn)
        participant.outbox.put(codec.encode(self._welcome(record, resumed)))
        cursor = p.resume.last_seq if p.resume is not None else None
        if cursor is None and resumed:
            cursor = record.cursor
        # A client's wakes are never lost to its buffer (notes §17.5): those the backlog
        # does not carry follow it, each on its own.
        carried: set[int] | None = set() if role == "client" and core.state.wakes else None
        if cursor is not None:
            resume_id = p.resume.last_message_id if p.resume is not None else None
            covered = core.head  # the backlog's end: once it is written, the cursor is there
            backlog = await self._backlog(participant, cursor, resume_id, read_ahead, carried)
            participant.outbox.put(backlog, covered)
            record.cursor = max(min(cursor, core.head), record.cursor if resumed else 0)
        else:
            record.cursor = core.head
        if carried is not None:
            await self._wakes_missed(participant, carried)
        client_id = core.client_id
        core.participants[record.participant_id] = participant
        if role == "client":
            core.client_id = record.participant_id
        try:
            # The record and its reattach deadline disarmed in one write; an expiry that fires
            # before it finds the participant attached (it waits for this lock) and does nothing.
            await store.put_attached(core.id, record)
        except BaseException as exc:
            # Not attached after all (the store is down): no participant left behind that
            # nobody reads, counted against the edge limit and posted every entry.
            if core.participants.get(record.participant_id) is participant:
                del core.participants[record.participant_id]
                core.client_id = client_id
            participant.outbox.close()
            if previous is not None and isinstance(exc, Exception):
                # A takeover: the older generation is fenced and closing, yet the store still
                # holds it as attached, with no deadline and no detach to come: reloaded (one
                # node) or reconciled (several), the record is recovered like a lost node's.
                core.coordinator.store_failed(core)
            raise
        if previous is None:
            await self.roster.announce(record, "attached")
        participant.outbox.start()
        return participant

    async def _wakes_missed(self, participant: Participant, carried: set[int]) -> None:
        """The wakes that came due while the client was away and that it has not been given
        (the store's ``due`` records, now seen): those the backlog does not carry are
        queued after it, as logged (docs/protocol.md §6 "Wake and revisit")."""
        core = self.core
        seen = await core.store.wakes_seen(core.id)
        for record in sorted(seen, key=lambda r: r.wake_seq):
            if record.wake_seq in carried or not 0 < record.wake_seq <= core.head:
                continue
            entries = await core.store.read(
                core.id, after_seq=record.wake_seq - 1, before_seq=record.wake_seq + 1
            )
            for entry in entries:
                if entry.message_id == record.wake_id:
                    participant.outbox.put(entry.data)

    def _grant(self, asked: Any, previous: BufferGrant | None) -> BufferGrant:
        """Policy: the hello's, else the previous one, else RING at the server cap (§15.5)."""
        cap = self.core.settings.buffer_capacity
        if asked is not None:
            return BufferGrant(policy=asked.policy, capacity_bytes=min(asked.capacity_bytes, cap))
        if previous is not None:
            return BufferGrant(
                policy=previous.policy, capacity_bytes=min(previous.capacity_bytes, cap)
            )
        return BufferGrant(policy="RING", capacity_bytes=cap)

    def _welcome(self, record: ParticipantRecord, resumed: bool) -> Welcome:
        core = self.core
        return builders.welcome(
            core.header, core.state, core.head, record, resumed, core.settings, core.master_sender
        )

    async def _backlog(
        self,
        participant: Participant,
        cursor: int,
        resume_id: str | None,
        read: LogPage | None = None,
        carried: set[int] | None = None,
    ) -> bytearray:
        """The M→participant ``session.history`` for everything after ``cursor`` (notes §7).

        Streamed: the log is read a page at a time into the participant's bounded buffer,
        and the frame is assembled from the buffer's entries as they are released, so a
        backlog costs about one copy of what it keeps (docs/protocol.md §7). The frame fits
        the welcome's ``max_frame_bytes``: what does not fit is lost by the policy's rule.
        ``read``: the first read, made ahead under this lock (used when it covers this one).
        ``carried``: filled with the seqs the history holds (for a client's wakes).
        """
        core = self.core
        store = core.store
        grant = participant.record.buffer
        assert grant is not None
        head = core.head  # up to our head only: later entries reach the participant live
        # The first read brings the cursor's own entry (the anchor: its id and time go in the
        # history) with the first page: one read before anything is buffered, not three.
        start = backlog_read_after(cursor)
        limit = BACKLOG_FIRST_READ if cursor <= head else 1
        if read is not None and read.after_seq == start and read.limit >= limit:
            # What that read found up to our head is what this one would (the log below
            # our head does not change while we hold the lock).
            first = [e for e in read.entries if cursor > head or e.seq <= head][:limit]
        else:
            first = await store.read(
                core.id,
                after_seq=start,
                before_seq=head + 1 if cursor <= head else None,
                limit=limit,
            )
        anchor_entry = first[0] if cursor > 0 and first and first[0].seq == cursor else None
        page: list[LogEntry] | None = first[1:] if anchor_entry is not None else first
        # A cursor past our head, or naming another frame, is from a log we no longer have.
        foreign = cursor > head or (
            resume_id is not None
            and anchor_entry is not None
            and anchor_entry.message_id != resume_id
        )
        # The log is dense from its first kept seq: an entry at the cursor or right after it
        # means nothing after the cursor was trimmed; otherwise ask the store.
        lowest = first[0].seq if first else None
        if lowest is not None and lowest <= cursor + 1:
            trimmed = 0
        else:
            first_kept = await store.trimmed_before(core.id)
            trimmed = max(0, first_kept - cursor - 1) if cursor < first_kept else 0
        buffer: BoundedBuffer[int] = BoundedBuffer(grant.policy, grant.capacity_bytes)
        after = cursor
        while after < head:
            if page is None:
                page = await store.read(
                    core.id, after_seq=after, before_seq=head + 1, limit=_BACKLOG_PAGE
                )
            if not page:
                break
            for entry in page:
                if entry.delivered_to(
                    participant.id, participant.role, presence=participant.record.presence
                ):
                    buffer.push(entry.data, entry.seq)
            after = page[-1].seq
            page = None
        if anchor_entry is not None:
            last_id = anchor_entry.message_id
            last_time = codec.decode(anchor_entry.data).timestamp
        else:
            last_id = ""
            last_time = codec.parse_time(core.header.created_at)

        def envelope(dropped: int) -> bytes:
            status_ = buffer.status(extra_lost=trimmed + dropped, unknown_loss=foreign)
            return builders.backlog_envelope(
                core.id, core.master_sender, status_, last_time, last_id
            )

        kept = deque(buffer.kept_bytes())
        size = sum(len(data) for data in kept) + max(0, len(kept) - 1)
        dropped = 0
        bare = envelope(0)
        limit = core.settings.max_frame_bytes
        # The seqs the history carries, when the caller must know which wakes it holds.
        seqs = deque(item.value for item in buffer.items) if carried is not None else None
        while kept and len(bare) + size > limit:
            # RING keeps the newest, DROP the oldest: the other end goes (never a gap)
            ring = grant.policy == "RING"
            data = kept.popleft() if ring else kept.pop()
            if seqs is not None:
                seqs.popleft() if ring else seqs.pop()
            size -= len(data) + (1 if kept else 0)
            dropped += 1
            bare = envelope(dropped)
        if seqs is not None and carried is not None:
            carried.update(seqs)
        buffer.drain()  # from here on ``kept`` holds the only references
        before, _, rest = bare.partition(b'"frames":[]')
        out = bytearray(before)
        out += b'"frames":['
        while kept:
            out += kept.popleft()  # each entry released once it is copied
            if kept:
                out += b","
        out += b"]"
        out += rest
        return out
