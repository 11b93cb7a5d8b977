"""The store: the one interface the master uses for everything that must outlive a socket.

Every backend (``sqlite``, durable and embedded, the default of ``rawp serve``; ``memory``,
one process; ``redis``, durable and shared by many nodes) passes one contract suite
(``tests/contract``). What the suite holds every backend to:

* ``append`` assigns dense seqs (from 1), dedupes by ``message_id`` within the session, and
  returns only once the entries are durable (notes §7, §12; seed 004). With retention, dedupe
  and ``message_seq`` are guaranteed for the entries still kept (redis forgets the ids of
  trimmed entries so its memory stays bounded; memory keeps them).
* an entry's stored bytes are ``head + str(seq) + tail`` (the envelope with the master's
  ``seq`` spliced in, :func:`protocol.codec.stamp`), so a backend can assign the seq itself.
* ``read`` returns entries in seq order; ``trimmed_before`` says where retention cut the log.
* ``last_received`` (``welcome.received``) is kept per sender as entries are logged
  (:func:`received_of`): one lookup per resumed attach, right after a restart and after
  retention trimmed the sender's frames.
* ``delete_session`` removes the log, participants, deadlines and wakes and leaves a
  tombstone; ``archive_session`` drops the participants, deadlines and wakes too.
* wakes (notes §17.5): one :class:`WakeRecord` per revisit request, keyed by its wake's
  message id; ``claim_due_wakes`` hands each due record to one caller at a time under a lease
  (its ``due_ms`` moves past the lease and a claim token is set), and every later change of
  a claimed record names that token, so a caller whose lease ran out changes nothing.
* ``archive_session`` ends a session but keeps its header and log readable (notes §16.1);
  ``archived_before`` lists those whose archive retention ran out, oldest first.
* a header whose ``format_version`` is newer than this build is refused with
  :class:`FormatVersionError` ("upgrade"), never reported as corrupt.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import datetime as _dt
from collections.abc import Sequence
from typing import Final, Literal

import msgspec

from protocol.codec import format_time
from protocol.errors import FormatVersionError, StoreError, StoreUnavailableError
from protocol.frames import BufferGrant
from protocol.revisits import wake_message_id

__all__ = [
    "FORMAT_VERSION",
    "PRESENCE",
    "AppendResult",
    "Credential",
    "Deadline",
    "LogEntry",
    "NewEntry",
    "ParticipantRecord",
    "SessionHeader",
    "Store",
    "StoreOpenError",
    "WakeRecord",
    "WakeState",
    "WebhookState",
    "append_behind_failed",
    "checked_format",
    "newer_format",
    "received_of",
    "refused_behind",
    "settled_wake",
]

FORMAT_VERSION: Final = 1
"""Version of the stored layout; a header with a larger one is refused (seed 004)."""

PRESENCE: Final = "session.presence"  # the entry type a participant may decline (§5 item 12)
_SCAN_PAGE: Final = 256
_SCAN_LIMIT: Final = 4096  # how far back Store.last_received's default looks


class StoreOpenError(StoreError):
    """The store cannot be opened (a database that is not RAWP's, damaged, newer, read-only
    or owned by another process). The message is one line naming the file (seed 004)."""


def append_behind_failed() -> StoreUnavailableError:
    """What an append chained behind one that failed gets, unapplied (every backend): its
    entries were folded on top of that one's (:meth:`Store.append_nowait`)."""
    return StoreUnavailableError("not appended: the append before it failed")


def refused_behind(
    after: asyncio.Future[list[AppendResult]] | None,
) -> StoreUnavailableError | None:
    """The refusal of an append chained behind ``after`` (settled): None when there is no
    ``after`` or it succeeded."""
    if after is not None and (after.cancelled() or after.exception() is not None):
        return append_behind_failed()
    return None


def newer_format(
    session_id: str, version: int, supported: int = FORMAT_VERSION
) -> FormatVersionError:
    """The error every backend raises for a session whose header a newer build wrote
    (``supported``: the newest format the backend reads, when it has its own)."""
    return FormatVersionError(
        f"session {session_id} was written by a newer build (format {version} > "
        f"{supported}); upgrade this master"
    )


class SessionHeader(msgspec.Struct, kw_only=True):
    """Beside the log, never inside it (seed 004): identity, lineage and format."""

    session_id: str
    workspace: str
    name: str = ""
    agent_id: str | None = None
    created_at: str
    epoch: str
    format_version: int = FORMAT_VERSION
    parent_session_id: str | None = None
    seed_length: int = 0
    revision: int = 0
    # Set when the session ended by expiry or a fatal error and was archived (notes §16.1):
    # its log stays readable until the archive retention passes.
    ended_at: str | None = None
    ended_at_ms: int | None = None
    reason: str | None = None
    deleted_by: str | None = None
    vault_ids: list[str] = msgspec.field(default_factory=list)
    """Opaque ids of the vaults the session may use (notes §17.6; ≤ 10, the id grammar):
    stored and returned, copied to forks and continues, never interpreted."""

    @property
    def archived(self) -> bool:
        """True once the session ended and was archived (status ``terminated``, notes §16.1)."""
        return self.ended_at is not None


def checked_format(header: SessionHeader) -> SessionHeader:
    """The header, unless a newer build wrote it (:func:`newer_format`)."""
    if header.format_version > FORMAT_VERSION:
        raise newer_format(header.session_id, header.format_version)
    return header


class NewEntry(msgspec.Struct, kw_only=True, array_like=True):
    """An entry to append: the stamped envelope is ``head + str(seq) + tail``.

    ``exclude`` is the participant the entry is not delivered to (its sender, or the subject
    of a presence frame); ``edges_only`` limits delivery to edges (notes §15.4).
    ``received_id`` is what ``welcome.received`` reports for the sender once this entry is
    logged (:meth:`Store.last_received`): None for the entry's own ``message_id``, the last
    frame inside a client's history, or "" to leave it unchanged (a history that kept none).
    """

    message_id: str
    type: str
    head: bytes
    tail: bytes
    sender_id: str
    sender_role: str
    exclude: str | None = None
    edges_only: bool = False
    received_id: str | None = None

    def committed(self, seq: int) -> LogEntry:
        """The log entry this becomes at ``seq``: the envelope is ``head + str(seq) + tail``."""
        return LogEntry(
            seq=seq,
            message_id=self.message_id,
            type=self.type,
            data=b"%s%d%s" % (self.head, seq, self.tail),
            sender_id=self.sender_id,
            sender_role=self.sender_role,
            exclude=self.exclude,
            edges_only=self.edges_only,
        )


def received_of(entry: NewEntry) -> str | None:
    """What :meth:`Store.last_received` reports for the entry's sender once the entry is
    logged (not a duplicate); None leaves it unchanged (a master entry, a history that kept
    none)."""
    if entry.sender_role == "master":
        return None
    return (entry.message_id if entry.received_id is None else entry.received_id) or None


class LogEntry(msgspec.Struct, kw_only=True, array_like=True):
    """One committed entry of a session log."""

    seq: int
    message_id: str
    type: str
    data: bytes
    sender_id: str
    sender_role: str
    exclude: str | None = None
    edges_only: bool = False

    def delivered_to(self, participant_id: str, role: str, *, presence: bool = True) -> bool:
        """Would live delivery send this entry to that participant (notes §15.4)?
        ``presence``: whether the participant takes presence frames (docs/protocol.md §5)."""
        if participant_id == self.exclude:
            return False
        if not presence and self.type == PRESENCE:
            return False
        return not (self.edges_only and role != "edge")


class AppendResult(msgspec.Struct, kw_only=True, array_like=True):
    """Where an entry landed: its new seq, or the seq of the entry it duplicates."""

    seq: int
    duplicate: bool = False


class ParticipantRecord(msgspec.Struct, kw_only=True):
    """What the master keeps about one participant across its connections."""

    participant_id: str
    role: Literal["client", "edge"]
    generation: int = 0
    cursor: int = 0
    buffer: BufferGrant | None = None
    last_received_message_id: str | None = None
    presence: bool = True
    """Whether its connections receive ``session.presence`` frames (the hello's choice,
    kept for the next hello that does not say: docs/protocol.md §5 item 12)."""
    attached: bool = False
    node_id: str = ""
    epoch: int = 0
    """``node_id``'s lease epoch when it attached this generation (0: a store without
    leases, or a record of an older build). A sweep that fences the node's leases up to an
    epoch recovers only the records written under them, never one the node wrote after it
    came back under a new lease."""
    detached_at_ms: int | None = None


class Deadline(msgspec.Struct, kw_only=True, frozen=True):
    """A timer that any node may fire: a detached participant's reattach window."""

    session_id: str
    participant_id: str
    due_ms: int


WakeState = Literal["pending", "due", "done"]
WebhookState = Literal["pending", "sent", "failed"]


class WakeRecord(msgspec.Struct, kw_only=True):
    """One revisit a client asked for, from its request until nothing is left to do for it
    (notes §17.5).

    ``state``: ``pending`` until its ``session.wake`` is logged; then ``due`` when the
    client was not attached at that moment (listed by ``GET /v1/wakes?due=true`` until the
    client attaches), else ``done``. A ``done`` record is kept only while its webhook is
    ``pending``. ``due_ms`` is when a node must next act on it (log the wake, or try the
    webhook); None when nothing is to be done. ``claim`` is the token of the lease a node holds
    on it (None: unclaimed).
    """

    session_id: str
    wake_id: str
    """The message id its ``session.wake`` is logged under (derived from the request)."""
    revisit_id: str
    request_id: str
    workspace: str
    at: str
    at_ms: int
    reason: str | None = None
    state: WakeState = "pending"
    wake_seq: int = 0
    webhook: WebhookState | None = None
    attempts: int = 0
    due_ms: int | None = None
    claim: str | None = None
    last_error: str | None = None

    @classmethod
    def pending(
        cls,
        session_id: str,
        workspace: str,
        revisit_id: str,
        request_id: str,
        at: _dt.datetime,
        reason: str | None,
    ) -> WakeRecord:
        """The record of a new request: pending, due at ``at``."""
        at_ms = int(at.timestamp() * 1000)
        return cls(
            session_id=session_id,
            wake_id=wake_message_id(revisit_id, request_id),
            revisit_id=revisit_id,
            request_id=request_id,
            workspace=workspace,
            at=format_time(at),
            at_ms=at_ms,
            reason=reason,
            due_ms=at_ms,
        )


def settled_wake(stored: WakeRecord, record: WakeRecord) -> WakeRecord | None:
    """What :meth:`Store.settle_wake` keeps for ``record`` over ``stored`` (whose claim it
    held): the record released, with a ``done`` that :meth:`Store.wakes_seen` made meanwhile
    kept; None when nothing is left to do for it (remove it)."""
    state = "done" if stored.state == "done" and record.state == "due" else record.state
    if state == "done" and record.webhook != "pending":
        return None
    due_ms = record.due_ms if state == "pending" or record.webhook == "pending" else None
    return msgspec.structs.replace(record, state=state, claim=None, due_ms=due_ms)


class Credential(msgspec.Struct, kw_only=True):
    """An API key (``kind`` "key", one workspace) or a session token (one session).

    Only the SHA-256 of the secret is stored.
    """

    digest: str
    kind: Literal["key", "token"]
    workspace: str
    session_id: str | None = None
    grants: list[str] = msgspec.field(default_factory=list)
    expires_at_ms: int | None = None
    revoked: bool = False
    created_at_ms: int = 0
    scopes: list[str] | None = None
    """What it may do (notes §17.6); None on records made before keys had scopes: a key of
    then may do everything, a token everything a token may."""
    name: str = ""
    """A key's label, for people reading the list."""
    issued_by: str | None = None
    """A token's issuing key (its digest): the token is valid only while that key is."""
    development: bool = False
    """The store's development key (made once, valid only while no ``--api-key`` is given)."""
    secret: str | None = None
    """Kept for the development key only, so each start can print it again."""
    last_used_ms: int | None = None
    """When it last authenticated (recorded at most once a minute per node)."""


class Store(abc.ABC):
    """The session store (notes §12)."""

    name: str = "store"
    format_version: int = FORMAT_VERSION
    """The format a new session of this backend is written in, and the newest it reads
    (a backend may number its own: the redis store's layouts, relay/store/redis/keys.py)."""

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Connect and prepare (scripts, schema). Idempotent."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections. Idempotent."""

    @abc.abstractmethod
    async def ping(self) -> bool:
        """True when the backend answers (readiness)."""

    def unready_reason(self) -> str | None:
        """Why the last :meth:`ping` found the store not ready, when the backend knows more
        than "no answer" (a full disk, a damaged file); None otherwise."""
        return None

    # --- sessions -------------------------------------------------------------------------

    @abc.abstractmethod
    async def create_session(self, header: SessionHeader) -> tuple[SessionHeader, bool]:
        """Create the session unless it exists; returns (header, created). Idempotent."""

    @abc.abstractmethod
    async def get_session(self, session_id: str) -> SessionHeader | None:
        """The header, or None. Raises FormatVersionError for a newer format."""

    @abc.abstractmethod
    async def is_deleted(self, session_id: str) -> bool:
        """True when the session existed and was deleted (tombstone)."""

    @abc.abstractmethod
    async def list_sessions(
        self, workspace: str, *, after: str | None = None, limit: int = 100
    ) -> list[SessionHeader]:
        """Headers of a workspace ordered by session_id, after ``after``; revisions included."""

    @abc.abstractmethod
    async def rename_session(self, session_id: str, name: str) -> None:
        """Change the header's name (and its revision)."""

    @abc.abstractmethod
    async def delete_session(self, session_id: str) -> bool:
        """Remove header, log, participants and deadlines; leave a tombstone. False if absent."""

    @abc.abstractmethod
    async def archive_session(
        self, session_id: str, *, ended_at: str, ended_at_ms: int, reason: str, deleted_by: str
    ) -> bool:
        """Mark the header ended (notes §16.1), drop participants and deadlines, keep the log.

        False when the session does not exist. The revision changes.
        """

    @abc.abstractmethod
    async def archived_before(self, cutoff_ms: int, limit: int = 100) -> list[str]:
        """Ids of archived sessions that ended before ``cutoff_ms``, oldest first."""

    async def recovery_candidates(self) -> list[str]:
        """Sessions a restarting sole owner must look at (notes §16.2, seed 004 recovery).

        Only a store owned by one process (SQLite) answers: those whose log may end inside a
        turn or that have participants recorded as attached. Stores shared by several nodes
        answer nothing: their nodes recover each other (relay/recovery.py).
        """
        return []

    # --- the log --------------------------------------------------------------------------

    @abc.abstractmethod
    async def append(self, session_id: str, entries: Sequence[NewEntry]) -> list[AppendResult]:
        """Append atomically and durably, in order; duplicates (by message_id) keep their seq.

        Raises :class:`~protocol.errors.SessionMissing` for a session the store does not have.
        """

    def append_nowait(
        self,
        session_id: str,
        entries: Sequence[NewEntry],
        *,
        after: asyncio.Future[list[AppendResult]] | None = None,
    ) -> asyncio.Future[list[AppendResult]]:
        """Start an :meth:`append` now; the future completes as the call would.

        ``after`` is the future this store gave for the session's previous append, maybe
        still in flight: this one is applied after it and only if it succeeded (the caller
        folded these entries on top of that one's), else it fails unapplied, with
        :class:`~protocol.errors.StoreUnavailableError` or the error of a call it was
        merged into. This default waits for ``after`` before it calls :meth:`append`; a store
        that keeps its own ordered queue (Redis) queues at once, so its next write goes out
        the moment the one before is answered.
        """
        return asyncio.ensure_future(self._append_after(after, session_id, entries))

    async def _append_after(
        self,
        after: asyncio.Future[list[AppendResult]] | None,
        session_id: str,
        entries: Sequence[NewEntry],
    ) -> list[AppendResult]:
        if after is not None:
            await asyncio.wait([after])  # its outcome only: never cancels it
            refused = refused_behind(after)
            if refused is not None:
                raise refused
        return await self.append(session_id, entries)

    @abc.abstractmethod
    async def read(
        self,
        session_id: str,
        *,
        after_seq: int = 0,
        before_seq: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[LogEntry]:
        """Entries with after_seq < seq < before_seq, oldest first unless ``newest_first``."""

    @abc.abstractmethod
    async def head_seq(self, session_id: str) -> int:
        """The last assigned seq (0 for an empty log)."""

    @abc.abstractmethod
    async def trimmed_before(self, session_id: str) -> int:
        """The smallest seq still stored (1 when nothing was trimmed, head+1 when empty)."""

    @abc.abstractmethod
    async def message_seq(self, session_id: str, message_id: str) -> int | None:
        """The seq of the entry with that message_id, if logged (and, with retention, kept)."""

    async def last_received(self, session_id: str, participant_id: str) -> str | None:
        """The message id ``welcome.received`` reports for the participant (notes §4): that
        of the last frame of theirs the log holds, or of the last frame inside their last
        ``session.history`` that kept any; None when there is none.

        Read from the store so it is right on any node at once. Every backend keeps it per
        sender as it appends (:func:`received_of`; Redis in the append script); this default,
        for a backend that does not, scans the log newest first (a few thousand entries at
        most).
        """
        from protocol import codec  # here: base.py is imported by every backend
        from protocol.errors import ProtocolError
        from protocol.frames import History

        before: int | None = None
        scanned = 0
        while scanned < _SCAN_LIMIT:
            page = await self.read(
                session_id, before_seq=before, limit=_SCAN_PAGE, newest_first=True
            )
            if not page:
                return None
            for entry in page:
                if entry.sender_id != participant_id or entry.sender_role == "master":
                    continue
                if entry.type != "session.history":
                    return entry.message_id
                try:
                    frame = codec.decode(entry.data)
                except ProtocolError:
                    continue
                if isinstance(frame, History) and frame.payload.frames:
                    with contextlib.suppress(ProtocolError):
                        return codec.decode(bytes(frame.payload.frames[-1])).message_id
            before = page[-1].seq
            scanned += len(page)
        return None

    @abc.abstractmethod
    async def fork_session(self, source_id: str, header: SessionHeader, at_seq: int) -> bool:
        """Create ``header``'s session with a copy of source's entries 1..at_seq."""

    # --- participants and deadlines -------------------------------------------------------

    @abc.abstractmethod
    async def put_participant(self, session_id: str, record: ParticipantRecord) -> None:
        """Insert or replace a participant record."""

    @abc.abstractmethod
    async def get_participant(
        self, session_id: str, participant_id: str
    ) -> ParticipantRecord | None:
        """One participant record, or None."""

    @abc.abstractmethod
    async def list_participants(self, session_id: str) -> list[ParticipantRecord]:
        """Every participant record of the session."""

    @abc.abstractmethod
    async def remove_participant(self, session_id: str, participant_id: str) -> None:
        """Forget a participant (expired)."""

    @abc.abstractmethod
    async def set_deadline(self, deadline: Deadline) -> None:
        """Arm (or move) the participant's deadline."""

    @abc.abstractmethod
    async def clear_deadline(self, session_id: str, participant_id: str) -> None:
        """Disarm the participant's deadline."""

    async def participant_and_received(
        self, session_id: str, participant_id: str
    ) -> tuple[ParticipantRecord | None, str | None]:
        """:meth:`get_participant` and :meth:`last_received` of one participant, as one read.

        What an attach naming a participant id reads under its session's lock; one round trip
        where a backend can (SQLite: one reader job; Redis: both commands sent together).
        This default reads one after the other (a store that never suspends stays so).
        """
        record = await self.get_participant(session_id, participant_id)
        return record, await self.last_received(session_id, participant_id)

    async def put_attached(self, session_id: str, record: ParticipantRecord) -> None:
        """The record of a participant that attaches, and its deadline disarmed: one write.

        An attach makes both changes under its session's lock; made as one write they cost
        one round trip (SQLite: one group commit, one fsync, instead of two in a row). This
        default makes them one after the other, record first.
        """
        await self.put_participant(session_id, record)
        await self.clear_deadline(session_id, record.participant_id)

    async def put_detached(
        self, session_id: str, record: ParticipantRecord, deadline: Deadline
    ) -> None:
        """The record of a participant whose connection is gone, and its reattach deadline
        armed: one write.

        A detach makes both changes under its session's lock; as one write they cost one
        round trip (SQLite: one group commit, one fsync, instead of two in a row, each
        waited for while every other detach of the session waits for the lock). This
        default makes them one after the other, record first.
        """
        await self.put_participant(session_id, record)
        await self.set_deadline(deadline)

    @abc.abstractmethod
    async def claim_due_deadlines(self, now_ms: int, limit: int = 100) -> list[Deadline]:
        """Remove and return deadlines due by ``now_ms``; each is returned to one caller only."""

    # --- wakes (notes §17.5) ---------------------------------------------------------------

    @abc.abstractmethod
    async def put_wake(self, record: WakeRecord) -> None:
        """Store a new ``pending`` record (unclaimed, due at ``due_ms``), replacing any other
        ``pending`` record of the same session and ``revisit_id`` (a reschedule)."""

    @abc.abstractmethod
    async def cancel_wake(self, session_id: str, revisit_id: str) -> None:
        """Remove the session's ``pending`` record of ``revisit_id``, if any."""

    @abc.abstractmethod
    async def get_wake(self, session_id: str, wake_id: str) -> WakeRecord | None:
        """One record, or None."""

    @abc.abstractmethod
    async def claim_due_wakes(
        self, now_ms: int, lease_ms: int, limit: int = 100
    ) -> list[WakeRecord]:
        """Claim records whose ``due_ms`` is at most ``now_ms``: each gets a fresh claim token
        and ``due_ms = now_ms + lease_ms`` (another node takes it again once the lease is
        over), atomically, so one record goes to one caller per lease."""

    @abc.abstractmethod
    async def settle_wake(self, record: WakeRecord, claim: str) -> bool:
        """Replace the record with ``record`` (its ``claim`` None: released), or remove it when
        ``record.state`` is ``done`` and no webhook is pending — only while the stored record
        still holds ``claim`` (False otherwise: the lease ran out, or it was cancelled or
        replaced meanwhile). The ``due`` → ``done`` change :meth:`wakes_seen` made meanwhile
        is kept."""

    @abc.abstractmethod
    async def wakes_seen(self, session_id: str) -> list[WakeRecord]:
        """The session's client attached: every ``due`` record becomes ``done`` (removed when
        no webhook is pending), atomically. Returns them as they were (``due``)."""

    @abc.abstractmethod
    async def list_wakes(
        self, workspace: str, *, due_only: bool, after: tuple[str, str] | None, limit: int
    ) -> list[WakeRecord]:
        """Records of a workspace ordered by (session_id, wake_id), after ``after``;
        ``due_only``: only ``due`` ones, else ``pending`` and ``due``."""

    async def release_wake_claims(self) -> None:  # noqa: B027 - optional hook
        """Make every claimed record due now (a restarted sole owner of the store: the claims
        were its own, made before it stopped). Stores shared by nodes leave leases to run out."""

    # --- credentials ----------------------------------------------------------------------

    @abc.abstractmethod
    async def put_credential(self, credential: Credential) -> None:
        """Store a credential by its digest."""

    @abc.abstractmethod
    async def get_credential(self, digest: str) -> Credential | None:
        """The credential with that digest, or None."""

    @abc.abstractmethod
    async def list_keys(self) -> list[Credential]:
        """Every stored API key (revoked ones too), with ``last_used_ms``."""

    @abc.abstractmethod
    async def touch_credential(self, digest: str, at_ms: int) -> None:
        """Record that a credential was used at ``at_ms``, never undoing a write made
        meanwhile (a revocation)."""
