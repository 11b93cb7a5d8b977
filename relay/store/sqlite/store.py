"""SqliteStore: the durable embedded store, one SQLite file owned by one ``rawp serve``.

The facade the hub uses (the :class:`~relay.store.base.Store` interface); the parts are beside
it: the layout (schema.py) and its statements, opening the file (opening.py), the writer thread
(writer.py), the reader threads (reader.py), what those share (jobs.py), an append
(appending.py) and the rows (rows.py).
Writes are queued to the one writer and group-committed; ``append_nowait(after=)`` queues at
once behind the write it names. Reads are queued to two reader threads with connections of
their own (WAL readers never wait for the writer), answered a batch at a time, so the event
loop never touches the disk. A background check reads the whole file once per start
(integrity.py). Readiness (:meth:`SqliteStore.ping`) is refused while the file refuses
writes, while a full disk leaves no room, and once the file is found damaged.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import sqlite3
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

from protocol.errors import StoreUnavailableError

from ..base import (
    AppendResult,
    Credential,
    Deadline,
    LogEntry,
    NewEntry,
    ParticipantRecord,
    SessionHeader,
    Store,
    StoreOpenError,
    WakeRecord,
    checked_format,
)
from . import wakes
from .appending import append_entries
from .integrity import IntegrityCheck
from .jobs import Health
from .opening import FileLock, open_connection, open_writer
from .reader import Readers
from .rows import (
    deadline_row,
    decode_credential,
    decode_participant,
    encode_record,
    entry_of,
    header_of,
    header_row,
    participant_row,
)
from .schema import PROBE_WRITE
from .statements import (
    ADD_TOMBSTONE,
    ARCHIVE,
    ARCHIVED_BEFORE,
    CLEAR_DEADLINE,
    COPY_PREFIX,
    DELETE_DEADLINES,
    DELETE_LOG,
    DELETE_PARTICIPANTS,
    DELETE_RECEIVED,
    DELETE_SESSION,
    DROP_TOMBSTONE,
    DUE_DEADLINES,
    GET_CREDENTIAL,
    GET_PARTICIPANT,
    GET_RECEIVED,
    HAS_TOMBSTONE,
    INSERT_SESSION,
    LIST_HEADERS,
    LIST_KEYS,
    LIST_PARTICIPANTS,
    PREFIX_BOUNDS,
    PUT_CREDENTIAL,
    PUT_PARTICIPANT,
    READ_RANGE,
    RECOVERY_CANDIDATES,
    REMOVE_PARTICIPANT,
    RENAME,
    SELECT_HEADER,
    SELECT_POSITION,
    SEQ_OF_MESSAGE,
    SET_DEADLINE,
)
from .tail import LogTails
from .writer import Write, Writer

__all__ = ["SqliteStore"]

T = TypeVar("T")

_READERS: Final = 2
_HEADROOM_BYTES: Final = 8 << 20
"""After a full disk, readiness returns once this much room is free again, on the disk and
under the file's page cap (a frame of the default --max-frame-bytes eight times over)."""
_log = logging.getLogger("relay.store.sqlite")


class _NoRoom(Exception):
    """The readiness probe found less than the headroom free (the probe's own refusal)."""


class SqliteStore(Store):
    """One SQLite database file, owned by this process (notes §16.2)."""

    name = "sqlite"

    def __init__(self, path: str | os.PathLike[str], *, retention: int | None = None) -> None:
        self.path = Path(path)
        self._retention = retention
        self._lock = FileLock(self.path)
        self._writer: Writer | None = None
        self._readers: Readers | None = None
        self._check: IntegrityCheck | None = None
        self._health = Health()
        self._unready: str | None = None  # why readiness is refused, as last logged
        self._writes: weakref.WeakKeyDictionary[asyncio.Future[Any], Write[Any]] = (
            weakref.WeakKeyDictionary()
        )
        # The newest entries of each log, answering backlog reads without the file (tail.py).
        self._tails = LogTails(retention)

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        if self._writer is None:
            await asyncio.to_thread(self.open_blocking)

    def open_blocking(self) -> None:
        """:meth:`start` without an event loop (it blocks on the disk): tools and tests."""
        if self._writer is not None:
            return
        path = self.path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreOpenError(f"cannot create the directory of {path}: {exc}") from None
        real = self._lock.acquire()  # the file itself, whatever name reached it
        try:
            writer = open_writer(real)
        except BaseException as exc:
            self._lock.abandon()  # and what this start made beside it
            if isinstance(exc, OSError):  # a file we cannot use, never "unreachable"
                raise StoreOpenError(f"{path} cannot be used: {exc}") from None
            raise
        health = self._health = Health()
        self._unready = None
        self._writer = Writer(writer, real, health)
        self._writer.start()
        connect = functools.partial(open_connection, real, read_only=True)
        self._readers = Readers(real, connect, count=_READERS, health=health)
        self._check = IntegrityCheck(connect, health)
        self._check.start()

    @property
    def integrity_checked(self) -> bool:
        """True once this start's background integrity check has ended (tests, tools)."""
        return self._check is not None and self._check.finished.is_set()

    async def close(self) -> None:
        check, self._check = self._check, None
        if check is not None:
            await asyncio.to_thread(check.stop)
        readers, self._readers = self._readers, None
        if readers is not None:
            await asyncio.to_thread(readers.close)  # each thread closes its connection
        writer, self._writer = self._writer, None
        if writer is not None:
            # After every queued write: they are committed first. The writer's connection
            # is the last one, so its close checkpoints the WAL into the file and removes it.
            writer.jobs.put(None)
            await asyncio.to_thread(writer.join)
        self._tails.clear()
        self._lock.release()  # last: its descriptor's close would drop SQLite's own locks

    async def ping(self) -> bool:
        if self._writer is None:
            return False
        health = self._health
        answered = True
        try:
            if health.full:
                # Small writes go through on a nearly full disk while frames are refused:
                # ready again only once there is room for frames.
                await self._write(self._probe_room)
            elif health.write_failed:
                # The last transaction failed (an I/O error, a lock held elsewhere): a small
                # write tells whether writes work again, so readiness recovers without traffic.
                await self._write(lambda db: db.execute(PROBE_WRITE))
            await self._read(lambda db: db.execute("SELECT 1").fetchone())
        except (StoreUnavailableError, _NoRoom):
            answered = False
        reason = self.unready_reason() or (None if answered else "the store does not answer")
        self._readiness(reason)
        return reason is None

    def unready_reason(self) -> str | None:
        """Why the store is not ready now (for /readyz, which anyone may ask: no path, no
        SQLite text; the log has both); None when it is."""
        health = self._health
        if self._writer is None:
            return "the store is closed"
        if health.damaged is not None:
            return "the store's database file is damaged (see the master's log)"
        if health.full:
            return "the store's disk is full: frames are refused"
        if health.write_failed:
            return "the store refuses writes"
        return None

    def _readiness(self, reason: str | None) -> None:
        """Log each change of readiness once (not every probe), naming the file."""
        if reason == self._unready:
            return
        self._unready = reason
        damaged = self._health.damaged
        if reason is None:
            _log.info("sqlite store %s is ready again", self.path)
        elif damaged is not None:
            _log.error(
                "sqlite store %s is damaged (%s): readiness refused; stop rawp, then restore "
                "a backup or salvage the file (sqlite3 FILE .recover | sqlite3 NEW_FILE)",
                self.path,
                damaged,
            )
        else:
            _log.warning("sqlite store %s: %s: readiness refused", self.path, reason)

    def _probe_room(self, db: sqlite3.Connection) -> None:
        """On the writer thread: is there room for frames again (the headroom free on the
        disk and under the page cap)? Then a small write, and the store is not full."""
        page_size = int(db.execute("PRAGMA page_size").fetchone()[0])
        pages = int(db.execute("PRAGMA page_count").fetchone()[0])
        free = int(db.execute("PRAGMA freelist_count").fetchone()[0])
        cap = int(db.execute("PRAGMA max_page_count").fetchone()[0])
        disk = os.statvfs(self._lock.real.parent)
        room = min((cap - pages + free) * page_size, disk.f_bavail * disk.f_frsize)
        if room < _HEADROOM_BYTES:
            raise _NoRoom(f"{room} bytes free")
        db.execute(PROBE_WRITE)
        self._health.full = False  # set again if this transaction fails for want of space

    def limit_pages(self, max_pages: int | None) -> asyncio.Future[int]:
        """Fault injection (tests, bench): cap the file at ``max_pages`` pages, so writes past
        it fail with SQLITE_FULL exactly as on a full disk; None lifts the cap."""
        pages = 2**31 - 2 if max_pages is None else max_pages
        return self._write(
            lambda db: db.execute(f"PRAGMA max_page_count = {int(pages)}").fetchone()[0]
        )

    # --- plumbing --------------------------------------------------------------------------

    def _write(
        self,
        apply: Callable[[sqlite3.Connection], T],
        after: Write[Any] | None = None,
        *,
        scrub: bool = False,
    ) -> asyncio.Future[T]:
        writer = self._writer
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if writer is None:
            future.set_exception(StoreUnavailableError(f"sqlite store {self.path} is closed"))
            return future
        write = Write(apply, future, loop, after, scrub)
        self._writes[future] = write
        writer.jobs.put(write)
        return future

    async def _read(self, query: Callable[[sqlite3.Connection], T]) -> T:
        readers = self._readers
        if readers is None:
            raise StoreUnavailableError(f"sqlite store {self.path} is closed")
        return await readers.read(query)

    # --- sessions --------------------------------------------------------------------------

    async def create_session(self, header: SessionHeader) -> tuple[SessionHeader, bool]:
        def apply(db: sqlite3.Connection) -> tuple[SessionHeader, bool]:
            row = header_row(header, head=0, first_seq=1)
            if db.execute(INSERT_SESSION, row).rowcount:
                db.execute(DROP_TOMBSTONE, (header.session_id,))
                return header, True
            return header_of(db.execute(SELECT_HEADER, (header.session_id,)).fetchone()), False

        return await self._write(apply)

    async def get_session(self, session_id: str) -> SessionHeader | None:
        row = await self._read(lambda db: db.execute(SELECT_HEADER, (session_id,)).fetchone())
        return None if row is None else checked_format(header_of(row))

    async def is_deleted(self, session_id: str) -> bool:
        row = await self._read(lambda db: db.execute(HAS_TOMBSTONE, (session_id,)).fetchone())
        return row is not None

    async def list_sessions(
        self, workspace: str, *, after: str | None = None, limit: int = 100
    ) -> list[SessionHeader]:
        rows = await self._read(
            lambda db: db.execute(LIST_HEADERS, (workspace, after or "", limit)).fetchall()
        )
        return [header_of(r) for r in rows]

    async def rename_session(self, session_id: str, name: str) -> None:
        await self._write(lambda db: db.execute(RENAME, (name, session_id)))

    async def delete_session(self, session_id: str) -> bool:
        def apply(db: sqlite3.Connection) -> bool:
            db.execute(DELETE_DEADLINES, (session_id,))
            wakes.drop_session_wakes(db, session_id)
            existed = db.execute(DELETE_SESSION, (session_id,)).rowcount > 0
            if not existed:
                return False
            db.execute(DELETE_LOG, (session_id,))
            db.execute(DELETE_RECEIVED, (session_id,))
            db.execute(DELETE_PARTICIPANTS, (session_id,))
            db.execute(ADD_TOMBSTONE, (session_id,))
            return True

        # A purge: answered once its bytes are gone from the WAL too (writer.py).
        return await self._forgetting_tail(session_id, self._write(apply, scrub=True))

    async def archive_session(
        self, session_id: str, *, ended_at: str, ended_at_ms: int, reason: str, deleted_by: str
    ) -> bool:
        def apply(db: sqlite3.Connection) -> bool:
            args = (ended_at, ended_at_ms, reason, deleted_by, session_id)
            if db.execute(ARCHIVE, args).rowcount == 0:
                return False
            db.execute(DELETE_PARTICIPANTS, (session_id,))
            db.execute(DELETE_DEADLINES, (session_id,))
            wakes.drop_session_wakes(db, session_id)
            return True

        return await self._write(apply)

    async def archived_before(self, cutoff_ms: int, limit: int = 100) -> list[str]:
        rows = await self._read(
            lambda db: db.execute(ARCHIVED_BEFORE, (cutoff_ms, limit)).fetchall()
        )
        return [r[0] for r in rows]

    async def recovery_candidates(self) -> list[str]:
        rows = await self._read(lambda db: db.execute(RECOVERY_CANDIDATES).fetchall())
        return sorted(r[0] for r in rows)

    # --- the log ---------------------------------------------------------------------------

    async def append(self, session_id: str, entries: Sequence[NewEntry]) -> list[AppendResult]:
        return await self.append_nowait(session_id, entries)

    def append_nowait(
        self,
        session_id: str,
        entries: Sequence[NewEntry],
        *,
        after: asyncio.Future[list[AppendResult]] | None = None,
    ) -> asyncio.Future[list[AppendResult]]:
        """Queue at once behind the previous writes (see the base class)."""
        previous: Write[Any] | None = None
        if after is not None:
            previous = self._writes.get(after)
            if previous is None:  # not one of ours: wait for it as the base class does
                return super().append_nowait(session_id, entries, after=after)
        batch = list(entries)
        retention = self._retention
        future = self._write(lambda db: append_entries(db, session_id, batch, retention), previous)
        # Before the caller's own wake-up (done callbacks run in the order they were added):
        # whoever learns the append committed can read it back from the tail.
        future.add_done_callback(functools.partial(self._appended, session_id, batch))
        return future

    def _appended(
        self,
        session_id: str,
        batch: list[NewEntry],
        future: asyncio.Future[list[AppendResult]],
    ) -> None:
        if future.cancelled() or future.exception() is not None:
            # It may have committed all the same (an answer lost): the file knows.
            self._tails.drop(session_id)
        else:
            self._tails.appended(session_id, batch, future.result())

    def _forgetting_tail(self, session_id: str, write: asyncio.Future[T]) -> asyncio.Future[T]:
        """``write``, which drops the session's tail once it is done, however it ended (a
        delete, a fork's target: the file answers that log from then on), in commit order
        with the appends' own callbacks."""
        write.add_done_callback(lambda _: self._tails.drop(session_id))
        return write

    async def read(
        self,
        session_id: str,
        *,
        after_seq: int = 0,
        before_seq: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[LogEntry]:
        if not newest_first:
            kept = self._tails.read(session_id, after_seq, before_seq, limit)
            if kept is not None:
                return kept
        query = READ_RANGE.format(order="DESC" if newest_first else "ASC")
        before = 2**62 if before_seq is None else before_seq
        args = (session_id, after_seq, before, -1 if limit is None else limit)
        rows = await self._read(lambda db: db.execute(query, args).fetchall())
        return [entry_of(r) for r in rows]

    async def head_seq(self, session_id: str) -> int:
        row = await self._read(lambda db: db.execute(SELECT_POSITION, (session_id,)).fetchone())
        return 0 if row is None else int(row[0])

    async def trimmed_before(self, session_id: str) -> int:
        def query(db: sqlite3.Connection) -> int:
            row = db.execute(SELECT_POSITION, (session_id,)).fetchone()
            if row is None:
                return 1
            head, first = int(row[0]), int(row[1])
            return first if head >= first else head + 1

        return await self._read(query)

    async def message_seq(self, session_id: str, message_id: str) -> int | None:
        row = await self._read(
            lambda db: db.execute(SEQ_OF_MESSAGE, (session_id, message_id)).fetchone()
        )
        return None if row is None else int(row[0])

    async def last_received(self, session_id: str, participant_id: str) -> str | None:
        """One row of ``received``, kept by each append (a fork starts with none, as on Redis)."""
        row = await self._read(
            lambda db: db.execute(GET_RECEIVED, (session_id, participant_id)).fetchone()
        )
        return None if row is None else str(row[0])

    async def fork_session(self, source_id: str, header: SessionHeader, at_seq: int) -> bool:
        def apply(db: sqlite3.Connection) -> bool:
            if db.execute(SELECT_POSITION, (source_id,)).fetchone() is None:
                return False
            if db.execute(SELECT_POSITION, (header.session_id,)).fetchone() is not None:
                return False
            db.execute(COPY_PREFIX, (header.session_id, source_id, at_seq))
            low, high = db.execute(PREFIX_BOUNDS, (header.session_id,)).fetchone()
            db.execute(INSERT_SESSION, header_row(header, head=high or 0, first_seq=low or 1))
            db.execute(DROP_TOMBSTONE, (header.session_id,))
            return True

        return await self._forgetting_tail(header.session_id, self._write(apply))

    # --- participants and deadlines --------------------------------------------------------

    async def put_participant(self, session_id: str, record: ParticipantRecord) -> None:
        args = participant_row(session_id, record)
        await self._write(lambda db: db.execute(PUT_PARTICIPANT, args))

    async def get_participant(
        self, session_id: str, participant_id: str
    ) -> ParticipantRecord | None:
        row = await self._read(
            lambda db: db.execute(GET_PARTICIPANT, (session_id, participant_id)).fetchone()
        )
        return None if row is None else decode_participant(row[0])

    async def list_participants(self, session_id: str) -> list[ParticipantRecord]:
        rows = await self._read(lambda db: db.execute(LIST_PARTICIPANTS, (session_id,)).fetchall())
        return [decode_participant(r[0]) for r in rows]

    async def remove_participant(self, session_id: str, participant_id: str) -> None:
        await self._write(lambda db: db.execute(REMOVE_PARTICIPANT, (session_id, participant_id)))

    async def set_deadline(self, deadline: Deadline) -> None:
        args = deadline_row(deadline)
        await self._write(lambda db: db.execute(SET_DEADLINE, args))

    async def clear_deadline(self, session_id: str, participant_id: str) -> None:
        await self._write(lambda db: db.execute(CLEAR_DEADLINE, (session_id, participant_id)))

    async def participant_and_received(
        self, session_id: str, participant_id: str
    ) -> tuple[ParticipantRecord | None, str | None]:
        """Both rows in one reader job (Store.participant_and_received)."""
        args = (session_id, participant_id)

        def query(db: sqlite3.Connection) -> tuple[Any, Any]:
            record = db.execute(GET_PARTICIPANT, args).fetchone()
            return record, db.execute(GET_RECEIVED, args).fetchone()

        row, received = await self._read(query)
        record = None if row is None else decode_participant(row[0])
        return record, None if received is None else str(received[0])

    async def put_attached(self, session_id: str, record: ParticipantRecord) -> None:
        """Both statements in one write: one transaction, one fsync (Store.put_attached)."""
        args = participant_row(session_id, record)
        cleared = (session_id, record.participant_id)

        def apply(db: sqlite3.Connection) -> None:
            db.execute(PUT_PARTICIPANT, args)
            db.execute(CLEAR_DEADLINE, cleared)

        await self._write(apply)

    async def put_detached(
        self, session_id: str, record: ParticipantRecord, deadline: Deadline
    ) -> None:
        """Both statements in one write: one transaction, one fsync (Store.put_detached)."""
        args, armed = participant_row(session_id, record), deadline_row(deadline)

        def apply(db: sqlite3.Connection) -> None:
            db.execute(PUT_PARTICIPANT, args)
            db.execute(SET_DEADLINE, armed)

        await self._write(apply)

    async def claim_due_deadlines(self, now_ms: int, limit: int = 100) -> list[Deadline]:
        if limit <= 0:
            return []

        def apply(db: sqlite3.Connection) -> list[Deadline]:
            rows = db.execute(DUE_DEADLINES, (now_ms, limit)).fetchall()
            db.executemany(CLEAR_DEADLINE, [(r[0], r[1]) for r in rows])
            return [Deadline(session_id=r[0], participant_id=r[1], due_ms=r[2]) for r in rows]

        return await self._write(apply)

    # --- wakes (notes §17.5; the jobs: wakes.py) ---------------------------------------------

    async def put_wake(self, record: WakeRecord) -> None:
        await self._write(lambda db: wakes.put_wake(db, record))

    async def cancel_wake(self, session_id: str, revisit_id: str) -> None:
        await self._write(lambda db: wakes.cancel_wake(db, session_id, revisit_id))

    async def get_wake(self, session_id: str, wake_id: str) -> WakeRecord | None:
        return await self._read(lambda db: wakes.get_wake(db, session_id, wake_id))

    async def claim_due_wakes(
        self, now_ms: int, lease_ms: int, limit: int = 100
    ) -> list[WakeRecord]:
        # Every node sweeps every 0.2 s: a reader answers "nothing due" without a write job
        # queued behind the appends.
        if not await self._read(lambda db: wakes.any_due(db, now_ms)):
            return []
        token = os.urandom(8).hex()
        return await self._write(
            lambda db: wakes.claim_due_wakes(db, now_ms, lease_ms, limit, token)
        )

    async def settle_wake(self, record: WakeRecord, claim: str) -> bool:
        return await self._write(lambda db: wakes.settle_wake(db, record, claim))

    async def wakes_seen(self, session_id: str) -> list[WakeRecord]:
        return await self._write(lambda db: wakes.wakes_seen(db, session_id))

    async def list_wakes(
        self, workspace: str, *, due_only: bool, after: tuple[str, str] | None, limit: int
    ) -> list[WakeRecord]:
        return await self._read(lambda db: wakes.list_wakes(db, workspace, due_only, after, limit))

    async def release_wake_claims(self) -> None:
        await self._write(wakes.release_claims)

    # --- credentials -----------------------------------------------------------------------

    async def put_credential(self, credential: Credential) -> None:
        args = (credential.digest, encode_record(credential))
        await self._write(lambda db: db.execute(PUT_CREDENTIAL, args))

    async def get_credential(self, digest: str) -> Credential | None:
        row = await self._read(lambda db: db.execute(GET_CREDENTIAL, (digest,)).fetchone())
        return None if row is None else decode_credential(row[0])

    async def list_keys(self) -> list[Credential]:
        rows = await self._read(lambda db: db.execute(LIST_KEYS).fetchall())
        records = (decode_credential(row[0]) for row in rows)
        return [record for record in records if record.kind == "key"]

    async def touch_credential(self, digest: str, at_ms: int) -> None:
        def apply(db: sqlite3.Connection) -> None:
            # On the writer thread: no other write of the record can fall between the read
            # and the write, so a revocation is never undone.
            row = db.execute(GET_CREDENTIAL, (digest,)).fetchone()
            if row is None:
                return
            record = decode_credential(row[0])
            record.last_used_ms = at_ms
            db.execute(PUT_CREDENTIAL, (digest, encode_record(record)))

        await self._write(apply)
