"""The durable embedded store: one SQLite file owned by one ``rawp serve`` (notes §16.2, seed 004).

Layout (seed 004's "SQLite with one row per event"): ``log`` holds one row per entry (session
id, seq, type, time, message id, the stored bytes), with a unique (session, message id) index
for dedupe; ``sessions`` is the header beside the log (format version, parent, seed length,
created/ended, reason, revision, plus head/first seq and an *open turn* marker so start-up
finds the sessions to recover without reading any log); participants, deadlines and
credentials have tables of their own, so tokens, keys and reattach windows survive a restart.
``received`` keeps, per session and sender, the message id ``welcome.received`` reports
(written by each append, never trimmed), so a resumed attach reads one row instead of
scanning the log. A database of format 1 (before ``received``) is upgraded in place when
opened: the table is filled from the log in the same transaction that marks format 2.

Writes: one writer thread with its own connection takes every queued write at once and
applies them in one transaction (group commit, no fixed window: while one transaction is
being made durable the next batch queues). WAL with ``synchronous=FULL``: a future completes
only once its transaction is on disk. Each write runs in a savepoint, so one that fails for
its own reason (an unknown session) leaves the rest of the batch applied; a transaction that
fails (disk full, I/O error, locked file) fails every write of its batch with
:class:`~protocol.errors.StoreUnavailableError` and nothing of it is kept. Pipelining is the
Redis store's contract: ``append_nowait(after=)`` queues at once, and the writer skips (fails
unapplied) an append whose predecessor failed.

Reads run on their own connections in a small thread pool (WAL readers never wait for the
writer), so the event loop never touches the disk.

Opening (seed 004 "format rejection"): a file that is not SQLite, a SQLite file that is not a
RAWP database, or a damaged one stops the start with :class:`StoreOpenError` and is never
written to; a database of a newer format is refused with "upgrade". A lock file beside the
database (``PATH.lock``, ``flock``'d, holding the owner's pid) keeps a second process out.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import os
import queue
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

import msgspec

from protocol.errors import FormatVersionError, SessionMissing, StoreUnavailableError

from .base import (
    FORMAT_VERSION,
    AppendResult,
    Credential,
    Deadline,
    LogEntry,
    NewEntry,
    ParticipantRecord,
    SessionHeader,
    Store,
    StoreOpenError,
    received_of,
)

__all__ = ["APPLICATION_ID", "DB_FORMAT", "SqliteStore", "StoreOpenError"]

T = TypeVar("T")

APPLICATION_ID: Final = 0x52415750  # "RAWP" in the SQLite header's application_id field
DB_FORMAT: Final = 2
"""Version of the database layout (``PRAGMA user_version``); a larger one is refused."""

_SQLITE_MAGIC: Final = b"SQLite format 3\x00"
_MAX_BATCH: Final = 1024  # writes per transaction at most (bounds one transaction's time)
_READERS: Final = 2
_BUSY_TIMEOUT_MS: Final = 1000  # another program holding the file: give up after this

# Format 2: what welcome.received reports, per session and sender (format 1 had no table).
RECEIVED_TABLE: Final = """
CREATE TABLE IF NOT EXISTS received (
    session_id TEXT NOT NULL,
    participant_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    PRIMARY KEY (session_id, participant_id)
) WITHOUT ROWID;
"""
SCHEMA: Final = (
    """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    workspace TEXT NOT NULL,
    name TEXT NOT NULL,
    agent_id TEXT,
    created_at TEXT NOT NULL,
    epoch TEXT NOT NULL,
    format_version INTEGER NOT NULL,
    parent_session_id TEXT,
    seed_length INTEGER NOT NULL,
    revision INTEGER NOT NULL,
    ended_at TEXT,
    ended_at_ms INTEGER,
    reason TEXT,
    deleted_by TEXT,
    head INTEGER NOT NULL DEFAULT 0,
    first_seq INTEGER NOT NULL DEFAULT 1,
    open_turn INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS sessions_by_workspace ON sessions (workspace, session_id);
CREATE INDEX IF NOT EXISTS sessions_archived ON sessions (ended_at_ms)
    WHERE ended_at_ms IS NOT NULL;
CREATE INDEX IF NOT EXISTS sessions_open_turn ON sessions (open_turn) WHERE open_turn = 1;
CREATE TABLE IF NOT EXISTS log (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    time_ms INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    data BLOB NOT NULL,
    sender_id TEXT NOT NULL,
    sender_role TEXT NOT NULL,
    exclude TEXT,
    edges_only INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE UNIQUE INDEX IF NOT EXISTS log_message_id ON log (session_id, message_id);
CREATE TABLE IF NOT EXISTS tombstones (session_id TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS participants (
    session_id TEXT NOT NULL,
    participant_id TEXT NOT NULL,
    attached INTEGER NOT NULL,
    record BLOB NOT NULL,
    PRIMARY KEY (session_id, participant_id)
);
CREATE INDEX IF NOT EXISTS participants_attached ON participants (attached) WHERE attached = 1;
CREATE TABLE IF NOT EXISTS deadlines (
    session_id TEXT NOT NULL,
    participant_id TEXT NOT NULL,
    due_ms INTEGER NOT NULL,
    PRIMARY KEY (session_id, participant_id)
);
CREATE INDEX IF NOT EXISTS deadlines_due ON deadlines (due_ms);
CREATE TABLE IF NOT EXISTS credentials (digest TEXT PRIMARY KEY, record BLOB NOT NULL);
"""
    + RECEIVED_TABLE
)
_TABLES_V1: Final = frozenset(
    {"sessions", "log", "tombstones", "participants", "deadlines", "credentials"}
)
_TABLES: Final = _TABLES_V1 | {"received"}

_HEADER_COLUMNS: Final = (
    "session_id, workspace, name, agent_id, created_at, epoch, format_version, "
    "parent_session_id, seed_length, revision, ended_at, ended_at_ms, reason, deleted_by"
)
INSERT_SESSION: Final = (
    f"INSERT OR IGNORE INTO sessions ({_HEADER_COLUMNS}, head, first_seq) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
SELECT_HEADER: Final = f"SELECT {_HEADER_COLUMNS} FROM sessions WHERE session_id = ?"
LIST_HEADERS: Final = (
    f"SELECT {_HEADER_COLUMNS} FROM sessions WHERE workspace = ? AND session_id > ? "
    "ORDER BY session_id LIMIT ?"
)
SELECT_POSITION: Final = "SELECT head, first_seq, format_version FROM sessions WHERE session_id = ?"
UPDATE_AFTER_APPEND: Final = (
    "UPDATE sessions SET head = ?, first_seq = ?, revision = revision + ?, "
    "open_turn = coalesce(?, open_turn) WHERE session_id = ?"
)
RENAME: Final = "UPDATE sessions SET name = ?, revision = revision + 1 WHERE session_id = ?"
ARCHIVE: Final = (
    "UPDATE sessions SET ended_at = ?, ended_at_ms = ?, reason = ?, deleted_by = ?, "
    "open_turn = 0, revision = revision + 1 WHERE session_id = ?"
)
ARCHIVED_BEFORE: Final = (
    "SELECT session_id FROM sessions WHERE ended_at_ms IS NOT NULL AND ended_at_ms < ? "
    "ORDER BY ended_at_ms LIMIT ?"
)
RECOVERY_CANDIDATES: Final = (
    "SELECT session_id FROM sessions WHERE open_turn = 1 AND ended_at IS NULL "
    "UNION SELECT session_id FROM participants WHERE attached = 1"
)
DELETE_SESSION: Final = "DELETE FROM sessions WHERE session_id = ?"
DELETE_LOG: Final = "DELETE FROM log WHERE session_id = ?"
DELETE_PARTICIPANTS: Final = "DELETE FROM participants WHERE session_id = ?"
DELETE_DEADLINES: Final = "DELETE FROM deadlines WHERE session_id = ?"
ADD_TOMBSTONE: Final = "INSERT OR IGNORE INTO tombstones (session_id) VALUES (?)"
DROP_TOMBSTONE: Final = "DELETE FROM tombstones WHERE session_id = ?"
HAS_TOMBSTONE: Final = "SELECT 1 FROM tombstones WHERE session_id = ?"
INSERT_ENTRY: Final = (
    "INSERT OR IGNORE INTO log (session_id, seq, type, time_ms, message_id, data, sender_id, "
    "sender_role, exclude, edges_only) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
SEQ_OF_MESSAGE: Final = "SELECT seq FROM log WHERE session_id = ? AND message_id = ?"
PUT_RECEIVED: Final = (
    "INSERT OR REPLACE INTO received (session_id, participant_id, message_id) VALUES (?, ?, ?)"
)
GET_RECEIVED: Final = "SELECT message_id FROM received WHERE session_id = ? AND participant_id = ?"
DELETE_RECEIVED: Final = "DELETE FROM received WHERE session_id = ?"
TRIM_LOG: Final = "DELETE FROM log WHERE session_id = ? AND seq < ?"
_ENTRY_COLUMNS: Final = "seq, message_id, type, data, sender_id, sender_role, exclude, edges_only"
READ_RANGE: Final = (
    f"SELECT {_ENTRY_COLUMNS} FROM log WHERE session_id = ? AND seq > ? AND seq < ? "
    "ORDER BY seq {order} LIMIT ?"
)
COPY_PREFIX: Final = (
    "INSERT INTO log (session_id, seq, type, time_ms, message_id, data, sender_id, sender_role, "
    "exclude, edges_only) SELECT ?, seq, type, time_ms, message_id, data, sender_id, "
    "sender_role, exclude, edges_only FROM log WHERE session_id = ? AND seq <= ?"
)
PREFIX_BOUNDS: Final = "SELECT min(seq), max(seq) FROM log WHERE session_id = ?"
PUT_PARTICIPANT: Final = (
    "INSERT OR REPLACE INTO participants (session_id, participant_id, attached, record) "
    "SELECT ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM sessions WHERE session_id = ?)"
)
GET_PARTICIPANT: Final = (
    "SELECT record FROM participants WHERE session_id = ? AND participant_id = ?"
)
LIST_PARTICIPANTS: Final = (
    "SELECT record FROM participants WHERE session_id = ? ORDER BY participant_id"
)
REMOVE_PARTICIPANT: Final = "DELETE FROM participants WHERE session_id = ? AND participant_id = ?"
SET_DEADLINE: Final = (
    "INSERT OR REPLACE INTO deadlines (session_id, participant_id, due_ms) VALUES (?, ?, ?)"
)
CLEAR_DEADLINE: Final = "DELETE FROM deadlines WHERE session_id = ? AND participant_id = ?"
DUE_DEADLINES: Final = (
    "SELECT session_id, participant_id, due_ms FROM deadlines WHERE due_ms <= ? "
    "ORDER BY due_ms LIMIT ?"
)
PROBE_WRITE: Final = f"PRAGMA user_version = {DB_FORMAT}"  # rewrites the header page
PUT_CREDENTIAL: Final = "INSERT OR REPLACE INTO credentials (digest, record) VALUES (?, ?)"
GET_CREDENTIAL: Final = "SELECT record FROM credentials WHERE digest = ?"

# Frame types that move the open-turn marker; a history may reopen a turn (unfinalization),
# so it sets the marker too: recovery folds the state and finds out (a marker, not a verdict).
_OPENS_TURN: Final = frozenset({"session.turn.start", "session.history"})
_CLOSES_TURN: Final = frozenset({"session.turn.end"})

_enc = msgspec.msgpack.Encoder()
_participant_dec = msgspec.msgpack.Decoder(ParticipantRecord)
_credential_dec = msgspec.msgpack.Decoder(Credential)


@dataclass(eq=False, slots=True)
class _Write(Generic[T]):
    """One queued write: ``apply`` runs on the writer thread inside the batch transaction."""

    apply: Callable[[sqlite3.Connection], T]
    future: asyncio.Future[T]
    loop: asyncio.AbstractEventLoop
    after: _Write[Any] | None = None
    failed: bool = False  # written and read by the writer thread only
    result: Any = None
    error: BaseException | None = field(default=None)


def _settle_all(writes: list[_Write[Any]]) -> None:
    """On the event loop: complete the writes' futures (unless their callers gave up)."""
    for write in writes:
        if write.future.done():
            continue
        if write.error is not None:
            write.future.set_exception(write.error)
        else:
            write.future.set_result(write.result)


def _unavailable(path: Path, exc: sqlite3.Error) -> StoreUnavailableError:
    return StoreUnavailableError(f"sqlite store {path}: {exc}")


class _Writer(threading.Thread):
    """The single writer: group-commits every queued write, one transaction per batch."""

    def __init__(self, connection: sqlite3.Connection, path: Path) -> None:
        super().__init__(name="rawp-sqlite-writer", daemon=True)
        self.connection = connection
        self.path = path
        self.jobs: queue.SimpleQueue[_Write[Any] | None] = queue.SimpleQueue()
        self.healthy = True

    def run(self) -> None:
        stopping = False
        while not stopping:
            first = self.jobs.get()
            if first is None:
                break
            batch = [first]
            while len(batch) < _MAX_BATCH:
                try:
                    more = self.jobs.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                    break
                batch.append(more)
            self._commit(batch)
            by_loop: dict[asyncio.AbstractEventLoop, list[_Write[Any]]] = {}
            for write in batch:
                by_loop.setdefault(write.loop, []).append(write)
            for loop, writes in by_loop.items():
                # one wake-up per loop and batch; a loop that closed meanwhile has nobody
                # waiting, and the writer goes on
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(_settle_all, writes)
        self.connection.close()

    def _commit(self, batch: list[_Write[Any]]) -> None:
        db = self.connection
        try:
            db.execute("BEGIN IMMEDIATE")
            for write in batch:
                if write.after is not None and write.after.failed:
                    write.failed = True
                    write.error = StoreUnavailableError("not applied: the write before it failed")
                    continue
                db.execute("SAVEPOINT one_write")
                try:
                    write.result = write.apply(db)
                except sqlite3.Error:
                    raise  # the transaction's problem, not this write's: fail the batch
                except Exception as exc:  # this write's own refusal (e.g. SessionMissing)
                    db.execute("ROLLBACK TO one_write")
                    write.failed = True
                    write.error = exc
                db.execute("RELEASE one_write")
            db.execute("COMMIT")  # synchronous=FULL: on disk when this returns
            self.healthy = True
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            self.healthy = False
            error = _unavailable(self.path, exc)
            for write in batch:
                write.failed = True
                write.error = error
                write.result = None


def _open_connection(path: Path, *, read_only: bool) -> sqlite3.Connection:
    uri = f"{path.resolve().as_uri()}?mode={'ro' if read_only else 'rw'}"
    db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    db.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
    return db


def _inspect(path: Path) -> int:
    """Check an existing file without writing to it; its format (0: a new, empty database).

    Raises :class:`StoreOpenError` for anything rawp must not touch (seed 004).
    """
    with path.open("rb") as f:
        magic = f.read(len(_SQLITE_MAGIC))
    if not magic:
        return 0  # an empty file: a database nobody wrote yet
    if magic != _SQLITE_MAGIC:
        raise StoreOpenError(f"{path} is not a RAWP database (not an SQLite file); left untouched")
    try:
        db = _open_connection(path, read_only=True)
        try:
            app_id = db.execute("PRAGMA application_id").fetchone()[0]
            version = db.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            db.close()
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc):
            raise StoreOpenError(f"{path} is locked by another program ({exc})") from None
        raise StoreOpenError(
            f"{path} is damaged and cannot be read ({exc}); left untouched"
        ) from None
    except sqlite3.DatabaseError as exc:
        raise StoreOpenError(
            f"{path} is damaged and cannot be read ({exc}); left untouched"
        ) from None
    if app_id == 0 and not tables:
        return 0
    if app_id != APPLICATION_ID:
        raise StoreOpenError(f"{path} is not a RAWP database (another program's SQLite file)")
    if version > DB_FORMAT:
        raise StoreOpenError(
            f"{path} was written by a newer rawp (database format {version} > {DB_FORMAT}): "
            "upgrade rawp to open it"
        )
    needed = _TABLES if version >= 2 else _TABLES_V1
    if not tables >= needed:
        raise StoreOpenError(
            f"{path} is damaged: tables {sorted(needed - tables)} are missing; left untouched"
        )
    return max(1, int(version))


class _Lock:
    """``PATH.lock``, ``flock``'d for the store's lifetime, holding the owner's pid."""

    def __init__(self, db_path: Path) -> None:
        self.path = db_path.with_name(db_path.name + ".lock")
        self._fd: int | None = None

    def acquire(self, db_path: Path) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StoreOpenError(
                f"{db_path} is in use by another rawp process (pid {holder}, lock file "
                f"{self.path}); stop it or choose another --store"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def _header(row: Sequence[Any]) -> SessionHeader:
    return SessionHeader(
        session_id=row[0],
        workspace=row[1],
        name=row[2],
        agent_id=row[3],
        created_at=row[4],
        epoch=row[5],
        format_version=row[6],
        parent_session_id=row[7],
        seed_length=row[8],
        revision=row[9],
        ended_at=row[10],
        ended_at_ms=row[11],
        reason=row[12],
        deleted_by=row[13],
    )


def _entry(row: Sequence[Any]) -> LogEntry:
    return LogEntry(
        seq=row[0],
        message_id=row[1],
        type=row[2],
        data=bytes(row[3]),
        sender_id=row[4],
        sender_role=row[5],
        exclude=row[6],
        edges_only=bool(row[7]),
    )


def _check_version(header: SessionHeader) -> SessionHeader:
    if header.format_version > FORMAT_VERSION:
        raise FormatVersionError(
            f"session {header.session_id} was written by a newer build (format "
            f"{header.format_version} > {FORMAT_VERSION}); upgrade this master"
        )
    return header


class SqliteStore(Store):
    """One SQLite database file, owned by this process (notes §16.2)."""

    name = "sqlite"

    def __init__(self, path: str | os.PathLike[str], *, retention: int | None = None) -> None:
        self.path = Path(path)
        self._retention = retention
        self._lock = _Lock(self.path)
        self._writer: _Writer | None = None
        self._readers: concurrent.futures.ThreadPoolExecutor | None = None
        self._reader_local = threading.local()
        self._reader_connections: list[sqlite3.Connection] = []
        self._reader_guard = threading.Lock()
        self._writes: weakref.WeakKeyDictionary[asyncio.Future[Any], _Write[Any]] = (
            weakref.WeakKeyDictionary()
        )

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
        self._lock.acquire(path)
        try:
            found = _inspect(path) if path.exists() else 0
            # mode bits too: a file marked read-only is refused even for root
            if path.exists() and (not os.access(path, os.W_OK) or not path.stat().st_mode & 0o222):
                raise StoreOpenError(f"{path} is read-only: rawp must be able to write it")
            if not os.access(path.parent, os.W_OK):
                raise StoreOpenError(f"{path.parent} is read-only: SQLite writes its WAL there")
            try:
                writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
                writer.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
                mode = writer.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise StoreOpenError(f"{path}: SQLite refused WAL mode ({mode})")
                writer.execute("PRAGMA synchronous = FULL")
                if not found:
                    writer.executescript(
                        f"BEGIN; {SCHEMA} PRAGMA application_id = {APPLICATION_ID}; "
                        f"PRAGMA user_version = {DB_FORMAT}; COMMIT;"
                    )
                elif found < DB_FORMAT:
                    _upgrade_to_2(writer)
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc):
                    raise StoreOpenError(f"{path} is locked by another program ({exc})") from None
                raise StoreOpenError(f"{path} cannot be opened for writing ({exc})") from None
        except BaseException:
            self._lock.release()
            raise
        self._writer = _Writer(writer, path)
        self._writer.start()
        self._readers = concurrent.futures.ThreadPoolExecutor(
            _READERS, thread_name_prefix="rawp-sqlite-reader"
        )

    async def close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.jobs.put(None)  # after every queued write: they are committed first
            await asyncio.to_thread(writer.join)
        readers, self._readers = self._readers, None
        if readers is not None:
            readers.shutdown(wait=True)
        with self._reader_guard:
            for connection in self._reader_connections:
                connection.close()
            self._reader_connections.clear()
        self._lock.release()

    async def ping(self) -> bool:
        if self._writer is None:
            return False
        try:
            if not self._writer.healthy:
                # The last transaction failed (disk full, locked): a small write tells
                # whether writes work again, so readiness recovers without traffic.
                await self._write(lambda db: db.execute(PROBE_WRITE))
            await self._read(lambda db: db.execute("SELECT 1").fetchone())
        except StoreUnavailableError:
            return False
        return True

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
        after: _Write[Any] | None = None,
    ) -> asyncio.Future[T]:
        writer = self._writer
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if writer is None:
            future.set_exception(StoreUnavailableError(f"sqlite store {self.path} is closed"))
            return future
        write = _Write(apply, future, loop, after)
        self._writes[future] = write
        writer.jobs.put(write)
        return future

    def _reader(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._reader_local, "db", None)
        if connection is None:
            connection = _open_connection(self.path, read_only=True)
            self._reader_local.db = connection
            with self._reader_guard:
                self._reader_connections.append(connection)
        return connection

    async def _read(self, query: Callable[[sqlite3.Connection], T]) -> T:
        readers = self._readers
        if readers is None:
            raise StoreUnavailableError(f"sqlite store {self.path} is closed")

        def run() -> T:
            try:
                return query(self._reader())
            except sqlite3.Error as exc:
                raise _unavailable(self.path, exc) from None

        return await asyncio.get_running_loop().run_in_executor(readers, run)

    # --- sessions --------------------------------------------------------------------------

    async def create_session(self, header: SessionHeader) -> tuple[SessionHeader, bool]:
        def apply(db: sqlite3.Connection) -> tuple[SessionHeader, bool]:
            h = header
            inserted = db.execute(
                INSERT_SESSION,
                (
                    h.session_id, h.workspace, h.name, h.agent_id, h.created_at, h.epoch,
                    h.format_version, h.parent_session_id, h.seed_length, h.revision,
                    h.ended_at, h.ended_at_ms, h.reason, h.deleted_by, 0, 1,
                ),
            ).rowcount  # fmt: skip
            if inserted:
                db.execute(DROP_TOMBSTONE, (h.session_id,))
                return header, True
            return _header(db.execute(SELECT_HEADER, (h.session_id,)).fetchone()), False

        return await self._write(apply)

    async def get_session(self, session_id: str) -> SessionHeader | None:
        row = await self._read(lambda db: db.execute(SELECT_HEADER, (session_id,)).fetchone())
        return None if row is None else _check_version(_header(row))

    async def is_deleted(self, session_id: str) -> bool:
        row = await self._read(lambda db: db.execute(HAS_TOMBSTONE, (session_id,)).fetchone())
        return row is not None

    async def list_sessions(
        self, workspace: str, *, after: str | None = None, limit: int = 100
    ) -> list[SessionHeader]:
        rows = await self._read(
            lambda db: db.execute(LIST_HEADERS, (workspace, after or "", limit)).fetchall()
        )
        return [_header(r) for r in rows]

    async def rename_session(self, session_id: str, name: str) -> None:
        await self._write(lambda db: db.execute(RENAME, (name, session_id)))

    async def delete_session(self, session_id: str) -> bool:
        def apply(db: sqlite3.Connection) -> bool:
            db.execute(DELETE_DEADLINES, (session_id,))
            existed = db.execute(DELETE_SESSION, (session_id,)).rowcount > 0
            if not existed:
                return False
            db.execute(DELETE_LOG, (session_id,))
            db.execute(DELETE_RECEIVED, (session_id,))
            db.execute(DELETE_PARTICIPANTS, (session_id,))
            db.execute(ADD_TOMBSTONE, (session_id,))
            return True

        return await self._write(apply)

    async def archive_session(
        self, session_id: str, *, ended_at: str, ended_at_ms: int, reason: str, deleted_by: str
    ) -> bool:
        def apply(db: sqlite3.Connection) -> bool:
            args = (ended_at, ended_at_ms, reason, deleted_by, session_id)
            if db.execute(ARCHIVE, args).rowcount == 0:
                return False
            db.execute(DELETE_PARTICIPANTS, (session_id,))
            db.execute(DELETE_DEADLINES, (session_id,))
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
        previous: _Write[Any] | None = None
        if after is not None:
            previous = self._writes.get(after)
            if previous is None:  # not one of ours: wait for it as the base class does
                return super().append_nowait(session_id, entries, after=after)
        batch = list(entries)
        retention = self._retention
        return self._write(lambda db: _append(db, session_id, batch, retention), previous)

    async def read(
        self,
        session_id: str,
        *,
        after_seq: int = 0,
        before_seq: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[LogEntry]:
        query = READ_RANGE.format(order="DESC" if newest_first else "ASC")
        before = 2**62 if before_seq is None else before_seq
        args = (session_id, after_seq, before, -1 if limit is None else limit)
        rows = await self._read(lambda db: db.execute(query, args).fetchall())
        return [_entry(r) for r in rows]

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
            h = header
            db.execute(
                INSERT_SESSION,
                (
                    h.session_id, h.workspace, h.name, h.agent_id, h.created_at, h.epoch,
                    h.format_version, h.parent_session_id, h.seed_length, h.revision,
                    h.ended_at, h.ended_at_ms, h.reason, h.deleted_by,
                    high or 0, low or 1,
                ),
            )  # fmt: skip
            db.execute(DROP_TOMBSTONE, (h.session_id,))
            return True

        return await self._write(apply)

    # --- participants and deadlines --------------------------------------------------------

    async def put_participant(self, session_id: str, record: ParticipantRecord) -> None:
        packed = _enc.encode(record)
        pid = record.participant_id
        args = (session_id, pid, int(record.attached), packed, session_id)
        await self._write(lambda db: db.execute(PUT_PARTICIPANT, args))

    async def get_participant(
        self, session_id: str, participant_id: str
    ) -> ParticipantRecord | None:
        row = await self._read(
            lambda db: db.execute(GET_PARTICIPANT, (session_id, participant_id)).fetchone()
        )
        return None if row is None else _participant_dec.decode(row[0])

    async def list_participants(self, session_id: str) -> list[ParticipantRecord]:
        rows = await self._read(lambda db: db.execute(LIST_PARTICIPANTS, (session_id,)).fetchall())
        return [_participant_dec.decode(r[0]) for r in rows]

    async def remove_participant(self, session_id: str, participant_id: str) -> None:
        await self._write(lambda db: db.execute(REMOVE_PARTICIPANT, (session_id, participant_id)))

    async def set_deadline(self, deadline: Deadline) -> None:
        args = (deadline.session_id, deadline.participant_id, deadline.due_ms)
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
        record = None if row is None else _participant_dec.decode(row[0])
        return record, None if received is None else str(received[0])

    async def put_attached(self, session_id: str, record: ParticipantRecord) -> None:
        """Both statements in one write: one transaction, one fsync (Store.put_attached)."""
        packed = _enc.encode(record)
        pid = record.participant_id
        args = (session_id, pid, int(record.attached), packed, session_id)

        def apply(db: sqlite3.Connection) -> None:
            db.execute(PUT_PARTICIPANT, args)
            db.execute(CLEAR_DEADLINE, (session_id, pid))

        await self._write(apply)

    async def claim_due_deadlines(self, now_ms: int, limit: int = 100) -> list[Deadline]:
        if limit <= 0:
            return []

        def apply(db: sqlite3.Connection) -> list[Deadline]:
            rows = db.execute(DUE_DEADLINES, (now_ms, limit)).fetchall()
            db.executemany(CLEAR_DEADLINE, [(r[0], r[1]) for r in rows])
            return [Deadline(session_id=r[0], participant_id=r[1], due_ms=r[2]) for r in rows]

        return await self._write(apply)

    # --- credentials -----------------------------------------------------------------------

    async def put_credential(self, credential: Credential) -> None:
        args = (credential.digest, _enc.encode(credential))
        await self._write(lambda db: db.execute(PUT_CREDENTIAL, args))

    async def get_credential(self, digest: str) -> Credential | None:
        row = await self._read(lambda db: db.execute(GET_CREDENTIAL, (digest,)).fetchone())
        return None if row is None else _credential_dec.decode(row[0])


def _upgrade_to_2(db: sqlite3.Connection) -> None:
    """Format 1 → 2 in one transaction: the ``received`` table, filled from the log by the
    rule :meth:`Store.last_received` states (the last frame of the sender's, or the last
    frame inside its last history that kept any)."""
    from protocol import codec  # only here: the store reads no frame on its hot paths
    from protocol.errors import ProtocolError
    from protocol.frames import History

    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute(RECEIVED_TABLE)
        received: dict[tuple[str, str], str] = {}
        rows = db.execute(
            "SELECT session_id, sender_id, type, message_id, data FROM log "
            "WHERE sender_role != 'master' ORDER BY session_id, seq"
        )
        for session_id, sender_id, kind, message_id, data in rows:
            got: str | None = message_id
            if kind == "session.history":
                got = None
                with contextlib.suppress(ProtocolError):
                    frame = codec.decode(bytes(data))
                    if isinstance(frame, History) and frame.payload.frames:
                        got = codec.decode(bytes(frame.payload.frames[-1])).message_id
            if got is not None:
                received[session_id, sender_id] = got
        db.executemany(PUT_RECEIVED, [(s, p, m) for (s, p), m in received.items()])
        db.execute(f"PRAGMA user_version = {DB_FORMAT}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _append(
    db: sqlite3.Connection,
    session_id: str,
    entries: Sequence[NewEntry],
    retention: int | None,
) -> list[AppendResult]:
    """On the writer thread, inside the batch's transaction: seqs, dedupe, rows, trim."""
    position = db.execute(SELECT_POSITION, (session_id,)).fetchone()
    if position is None:
        raise SessionMissing(session_id)
    head, first, version = int(position[0]), int(position[1]), int(position[2])
    if version > FORMAT_VERSION:
        raise FormatVersionError(
            f"session {session_id} was written by a newer build (format {version} > "
            f"{FORMAT_VERSION}); upgrade this master"
        )
    now_ms = int(time.time() * 1000)
    results: list[AppendResult] = []
    received: dict[str, str] = {}  # sender id → what welcome.received reports, once logged
    added = 0
    open_turn: int | None = None
    for e in entries:
        seq = head + 1
        row = (
            session_id, seq, e.type, now_ms, e.message_id, b"%s%d%s" % (e.head, seq, e.tail),
            e.sender_id, e.sender_role, e.exclude, int(e.edges_only),
        )  # fmt: skip
        if db.execute(INSERT_ENTRY, row).rowcount == 0:  # the (session, message id) index
            dup = db.execute(SEQ_OF_MESSAGE, (session_id, e.message_id)).fetchone()
            results.append(AppendResult(seq=int(dup[0]), duplicate=True))
            continue
        head = seq
        added += 1
        results.append(AppendResult(seq=seq))
        got = received_of(e)
        if got is not None:
            received[e.sender_id] = got
        if e.type in _OPENS_TURN:
            open_turn = 1
        elif e.type in _CLOSES_TURN:
            open_turn = 0
    if retention is not None and head - first + 1 > retention:
        first = head - retention + 1
        db.execute(TRIM_LOG, (session_id, first))
    db.execute(UPDATE_AFTER_APPEND, (head, first, added, open_turn, session_id))
    if received:
        db.executemany(PUT_RECEIVED, [(session_id, p, m) for p, m in received.items()])
    return results
