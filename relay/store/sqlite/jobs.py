"""What the SQLite store's threads share: a job's answer, taking a batch, settling it.

The writer (writer.py) and the readers (reader.py) each take every job queued by the time they
wake (:func:`take_batch`) and hand the whole batch's answers to the event loop with one
``call_soon_threadsafe`` (:func:`settle_batch`): a burst of reads or writes costs a few thread
and loop wake-ups, not several per job. A failure inside SQLite becomes the store's
:class:`~protocol.errors.StoreUnavailableError`, naming the file (:func:`unavailable`), and
what it says of the file (full, damaged) is kept in the store's :class:`Health`.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

from protocol.errors import StoreUnavailableError

__all__ = ["BUSY_TIMEOUT_MS", "Answered", "Health", "settle_batch", "take_batch", "unavailable"]

J = TypeVar("J")

BUSY_TIMEOUT_MS: Final = 1000
"""Every connection's: another program holding the file is given up on after this."""

_SQLITE_CORRUPT: Final = 11
_SQLITE_FULL: Final = 13
_SQLITE_NOTADB: Final = 26


class Health:
    """What the store's threads learnt of the file, for readiness (each field is written by
    one assignment, read by the event loop).

    ``full``: a transaction failed for want of space (a full disk or a capped file), kept
    until the store sees room again (not merely until some small write succeeds: those go
    through while frames are still refused). ``damaged``: SQLite found the file malformed,
    kept for the process's life (a damaged page stays damaged until repaired offline).
    """

    def __init__(self) -> None:
        self.write_failed = False
        self.full = False
        self.damaged: str | None = None

    def note(self, exc: sqlite3.Error) -> None:
        """Learn from a failure of SQLite's."""
        code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF  # the primary result code
        if code == _SQLITE_FULL:
            self.full = True
        elif code in (_SQLITE_CORRUPT, _SQLITE_NOTADB) and self.damaged is None:
            self.damaged = str(exc)


class Answered(Protocol):
    """A queued job a store thread answered: its future, its loop, its result or error."""

    @property
    def future(self) -> asyncio.Future[Any]: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def result(self) -> Any: ...

    @property
    def error(self) -> BaseException | None: ...


def _settle_all(jobs: Sequence[Answered]) -> None:
    """On the event loop: complete the jobs' futures (unless their callers gave up)."""
    for job in jobs:
        if job.future.done():
            continue
        if job.error is not None:
            job.future.set_exception(job.error)
        else:
            job.future.set_result(job.result)


def take_batch(
    jobs: queue.SimpleQueue[J | None], limit: int, timeout: float | None = None
) -> tuple[list[J], bool]:
    """From a store thread: wait for a job, then take every job queued meanwhile (at most
    ``limit``); True beside them when a stop (None) came after them. Raises ``queue.Empty``
    when ``timeout`` passes first."""
    first = jobs.get(timeout=timeout)
    if first is None:
        return [], True
    batch = [first]
    while len(batch) < limit:
        try:
            more = jobs.get_nowait()
        except queue.Empty:
            break
        if more is None:
            return batch, True
        batch.append(more)
    return batch, False


def settle_batch(batch: Sequence[Answered]) -> None:
    """From a store thread: complete a batch's futures, one wake-up per loop and batch (a
    loop that closed meanwhile has nobody waiting, and the thread goes on)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Answered]] = {}
    for job in batch:
        by_loop.setdefault(job.loop, []).append(job)
    for loop, jobs in by_loop.items():
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle_all, jobs)


def unavailable(path: Path, exc: sqlite3.Error) -> StoreUnavailableError:
    """A failure of SQLite as the store's error, naming the file."""
    return StoreUnavailableError(f"sqlite store {path}: {exc}")
