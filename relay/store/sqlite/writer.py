"""The SQLite store's single writer thread: group commit, one transaction per batch.

The writer has its own connection and takes every queued write at once, applying them in one
transaction (no fixed window: while one transaction is being made durable the next batch
queues). WAL with ``synchronous=FULL``: a future completes only once its transaction is on
disk. Each write runs in a savepoint, so one that fails for its own reason (an unknown session)
leaves the rest of the batch applied; a transaction that fails (disk full, I/O error, locked
file) fails every write of its batch with :class:`~protocol.errors.StoreUnavailableError` and
nothing of it is kept. A write queued ``after`` another is skipped (failed unapplied) when that
one failed: the pipelining the Redis store's contract asks for.
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

from .jobs import settle_batch, take_batch, unavailable

__all__ = ["Write", "Writer"]

T = TypeVar("T")

_MAX_BATCH: Final = 1024  # writes per transaction at most (bounds one transaction's time)


@dataclass(eq=False, slots=True)
class Write(Generic[T]):
    """One queued write: ``apply`` runs on the writer thread inside the batch transaction."""

    apply: Callable[[sqlite3.Connection], T]
    future: asyncio.Future[T]
    loop: asyncio.AbstractEventLoop
    after: Write[Any] | None = None
    failed: bool = False  # written and read by the writer thread only
    result: Any = None
    error: BaseException | None = field(default=None)


class Writer(threading.Thread):
    """The single writer: group-commits every queued write, one transaction per batch."""

    def __init__(self, connection: sqlite3.Connection, path: Path) -> None:
        super().__init__(name="rawp-sqlite-writer", daemon=True)
        self.connection = connection
        self.path = path
        self.jobs: queue.SimpleQueue[Write[Any] | None] = queue.SimpleQueue()
        self.healthy = True

    def run(self) -> None:
        stopping = False
        while not stopping:
            batch, stopping = take_batch(self.jobs, _MAX_BATCH)
            if not batch:
                break
            self._commit(batch)
            settle_batch(batch)
        self.connection.close()

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
            self.healthy = True
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            self.healthy = False
            error = unavailable(self.path, exc)
            for write in batch:
                write.failed = True
                write.error = error
                write.result = None
