"""The SQLite store's reader threads: every queued read at once, one wake-up per batch.

Reads run off the event loop (the loop never touches the disk), each reader thread on a
read-only connection of its own (WAL: readers never wait for the writer). A thread takes
every read queued by the time it wakes and answers the whole batch with one
``call_soon_threadsafe``, as the writer settles its group commits: in a reconnect storm the
attaches' reads queue together and cost a few thread wake-ups, not several each. With a
thread pool each read was a submit, a worker wake-up and a loop wake-up of its own; on a
30 sessions × 100 edges storm, 29 % of the master's samples were those context switches
(bench/results/storm-profile.md, round 10; ``make bench ARGS=storm`` runs the SQLite storms).

A read that fails inside SQLite fails alone with
:class:`~protocol.errors.StoreUnavailableError` naming the file; any other exception of a
read is its own answer.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

from .jobs import Health, settle_batch, take_batch, unavailable

__all__ = ["Read", "Readers"]

T = TypeVar("T")

_MAX_BATCH: Final = 256  # reads per wake-up at most (a batch's answers wait for its last)


@dataclass(eq=False, slots=True)
class Read(Generic[T]):
    """One queued read: ``query`` runs on a reader thread, on that thread's connection."""

    query: Callable[[sqlite3.Connection], T]
    future: asyncio.Future[T]
    loop: asyncio.AbstractEventLoop
    result: Any = None
    error: BaseException | None = field(default=None)


class Readers:
    """``count`` reader threads sharing one queue of reads."""

    def __init__(
        self,
        path: Path,
        connect: Callable[[], sqlite3.Connection],
        *,
        count: int,
        health: Health | None = None,
    ) -> None:
        self._path = path
        self._health = health or Health()
        self._connect = connect
        self._jobs: queue.SimpleQueue[Read[Any] | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._run, name=f"rawp-sqlite-reader-{i}", daemon=True)
            for i in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def read(self, query: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        """Queue ``query``; the future completes on the calling loop with its answer."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put(Read(query, future, loop))
        return future

    def close(self) -> None:
        """Answer every read queued so far, then stop the threads (blocks until they end)."""
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join()

    def _run(self) -> None:
        connection: sqlite3.Connection | None = None
        try:
            while True:
                # a stop (one per thread) comes after the reads queued before it
                batch, stopping = take_batch(self._jobs, _MAX_BATCH)
                if not batch:
                    return
                if connection is None:
                    connection = self._open(batch)
                if connection is not None:
                    for read in batch:
                        self._answer(connection, read)
                settle_batch(batch)
                if stopping:
                    return
        finally:
            if connection is not None:
                connection.close()

    def _open(self, batch: list[Read[Any]]) -> sqlite3.Connection | None:
        """This thread's connection, opened at its first read; None (the batch failed) if
        SQLite cannot open it, and the next batch tries again."""
        try:
            return self._connect()
        except sqlite3.Error as exc:
            self._health.note(exc)
            for read in batch:
                read.error = unavailable(self._path, exc)
            return None

    def _answer(self, connection: sqlite3.Connection, read: Read[Any]) -> None:
        try:
            read.result = read.query(connection)
        except sqlite3.Error as exc:
            self._health.note(exc)  # a malformed page read: readiness says so
            read.error = unavailable(self._path, exc)
        except Exception as exc:  # the read's own answer, as a thread pool would give it
            read.error = exc
