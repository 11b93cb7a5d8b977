"""The SQLite store's single writer thread: group commit, one transaction per batch.

The writer has its own connection and takes every queued write at once, applying them in one
transaction (no fixed window: while one transaction is being made durable the next batch
queues). WAL with ``synchronous=FULL``: a future completes only once its transaction is on
disk. Each write runs in a savepoint, so one that fails for its own reason (an unknown session)
leaves the rest of the batch applied; a transaction that fails (disk full, I/O error, locked
file) fails every write of its batch with :class:`~protocol.errors.StoreUnavailableError` and
nothing of it is kept. A write queued ``after`` another is skipped (failed unapplied) when that
one failed: the pipelining the Redis store's contract asks for.

A write marked ``scrub`` (a purge) is answered once its bytes are gone from the files too:
after its transaction the WAL is checkpointed into the database and truncated (the writer
connection overwrites deleted content with zeros, ``secure_delete``), so none of the old page
images that held it stays in ``-wal``. The other writes of its batch are answered first; a
checkpoint that readers hold up is tried again until it completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

from protocol.errors import StoreUnavailableError

from .jobs import BUSY_TIMEOUT_MS, Health, settle_batch, take_batch, unavailable

__all__ = ["Write", "Writer"]

T = TypeVar("T")

_MAX_BATCH: Final = 1024  # writes per transaction at most (bounds one transaction's time)
_SCRUB_RETRY_S: Final = 1.0  # a checkpoint readers held up is tried again this often
# How long a purge's checkpoint waits for readers: short, as every write waits behind it (a
# long read, the integrity check, is not waited for but tried again later).
_SCRUB_WAIT_MS: Final = 50


@dataclass(eq=False, slots=True)
class Write(Generic[T]):
    """One queued write: ``apply`` runs on the writer thread inside the batch transaction."""

    apply: Callable[[sqlite3.Connection], T]
    future: asyncio.Future[T]
    loop: asyncio.AbstractEventLoop
    after: Write[Any] | None = None
    scrub: bool = False  # a purge: answered once the WAL no longer holds what it removed
    failed: bool = False  # written and read by the writer thread only
    result: Any = None
    error: BaseException | None = field(default=None)


class Writer(threading.Thread):
    """The single writer: group-commits every queued write, one transaction per batch."""

    def __init__(self, connection: sqlite3.Connection, path: Path, health: Health) -> None:
        super().__init__(name="rawp-sqlite-writer", daemon=True)
        self.connection = connection
        self.path = path
        self.health = health
        self.jobs: queue.SimpleQueue[Write[Any] | None] = queue.SimpleQueue()
        self._scrub_pending = False

    def run(self) -> None:
        stopping = False
        while not stopping:
            wait = _SCRUB_RETRY_S if self._scrub_pending else None
            try:
                batch, stopping = take_batch(self.jobs, _MAX_BATCH, wait)
            except queue.Empty:
                self._scrub()
                continue
            if not batch:
                break
            self._commit(batch)
            purges = [w for w in batch if w.scrub and not w.failed]
            if purges:
                settle_batch([w for w in batch if not (w.scrub and not w.failed)])
                self._scrub_pending = True
                self._scrub()
                settle_batch(purges)
            else:
                settle_batch(batch)
        if self._scrub_pending:
            self._scrub()
        self.connection.close()

    def _scrub(self) -> None:
        """Checkpoint the WAL into the database and truncate it; pending again while a
        reader holds it up (busy) or the checkpoint fails."""
        db = self.connection
        try:
            db.execute(f"PRAGMA busy_timeout = {_SCRUB_WAIT_MS}")
            try:
                busy = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            finally:
                db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        except sqlite3.Error as exc:
            self.health.note(exc)
            busy = 1
        self._scrub_pending = bool(busy)

    def _commit(self, batch: list[Write[Any]]) -> None:
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
            self.health.write_failed = False
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            self.health.write_failed = True
            self.health.note(exc)
            error = unavailable(self.path, exc)
            for write in batch:
                write.failed = True
                write.error = error
                write.result = None
