"""The SQLite store's reader threads (relay/store/sqlite/reader.py): batched answers, failures
kept to their own read, every queued read answered before the threads stop.

Real SQLite connections on a file in the test's temporary directory.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol.errors import StoreUnavailableError
from relay.store.sqlite.jobs import Health
from relay.store.sqlite.reader import Readers

__all__: list[str] = []


@pytest.fixture
def database(tmp_path: Path) -> Path:
    """A file with one table of ten rows."""
    path = tmp_path / "reads.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (n INTEGER)")
    db.executemany("INSERT INTO t VALUES (?)", [(n,) for n in range(10)])
    db.commit()
    db.close()
    return path


@pytest.fixture
def readers(database: Path) -> Iterator[Readers]:
    """One reader thread on ``database``."""
    r = Readers(database, lambda: sqlite3.connect(database, check_same_thread=False), count=1)
    yield r
    r.close()


def _row(n: int) -> Callable[[sqlite3.Connection], object]:
    return lambda db: db.execute("SELECT n FROM t WHERE n = ?", (n,)).fetchone()


async def test_reads_queued_together_are_answered_in_one_loop_step(
    readers: Readers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads queued while the thread is busy are answered together: one loop wake-up for the
    batch (two in all with the read before it), all done with the first."""
    loop = asyncio.get_running_loop()
    real = loop.call_soon_threadsafe
    wakeups: list[object] = []

    def counted(callback: Callable[..., object], *args: object, **kwargs: Any) -> Any:
        wakeups.append(callback)
        return real(callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_soon_threadsafe", counted)  # the real loop, counted
    release = threading.Event()
    blocker = readers.read(lambda db: release.wait(10))
    queued = [readers.read(_row(n)) for n in range(10)]
    await asyncio.sleep(0.05)  # the thread is inside the blocker, the others queue
    release.set()
    await blocker
    await asyncio.sleep(0)  # the blocker's batch was settled first
    first = await queued[0]
    assert all(f.done() for f in queued), "a batch's reads settle in one loop step"
    assert first == (0,)
    assert [f.result() for f in queued] == [(n,) for n in range(10)]
    assert 1 <= len(wakeups) <= 2, "eleven reads, at most two batches"


async def test_a_failing_read_fails_alone(readers: Readers) -> None:
    """SQLite's error is the store's (naming the file); the reads beside it are answered."""
    bad = readers.read(lambda db: db.execute("SELECT * FROM missing_table").fetchall())
    own = readers.read(lambda db: 1 / 0)
    good = readers.read(lambda db: db.execute("SELECT count(*) FROM t").fetchone())
    with pytest.raises(StoreUnavailableError, match=r"reads\.db"):
        await bad
    with pytest.raises(ZeroDivisionError):
        await own
    assert await good == (10,)


async def test_a_cancelled_read_does_not_stop_the_others(readers: Readers) -> None:
    """A caller that gave up is skipped when its batch is settled."""
    release = threading.Event()
    blocker = readers.read(lambda db: release.wait(10))
    gone = readers.read(lambda db: db.execute("SELECT 1").fetchone())
    kept = readers.read(lambda db: db.execute("SELECT 2").fetchone())
    gone.cancel()
    release.set()
    assert await blocker is True
    assert await kept == (2,)
    assert gone.cancelled()


async def test_close_answers_what_was_queued_then_ends_the_threads(database: Path) -> None:
    """Every read queued before close is answered; the threads and connections end."""
    opened: list[sqlite3.Connection] = []

    def connect() -> sqlite3.Connection:
        db = sqlite3.connect(database, check_same_thread=False)
        opened.append(db)
        return db

    r = Readers(database, connect, count=2)
    futures = [
        r.read(lambda db: db.execute("SELECT count(*) FROM t").fetchone()) for _ in range(20)
    ]
    await asyncio.to_thread(r.close)
    await asyncio.sleep(0)
    assert all(f.done() and f.result() == (10,) for f in futures)
    assert opened, "the threads opened their connections"
    for db in opened:
        with pytest.raises(sqlite3.ProgrammingError):
            db.execute("SELECT 1")  # closed by the thread that owned it


async def test_a_connection_that_cannot_open_fails_its_batch_and_is_tried_again(
    tmp_path: Path, database: Path
) -> None:
    """An open that fails answers the batch unavailable; the next read opens again."""
    attempts: list[int] = []

    def connect() -> sqlite3.Connection:
        attempts.append(1)
        if len(attempts) == 1:
            return sqlite3.connect(f"{(tmp_path / 'absent' / 'x.db').as_uri()}?mode=ro", uri=True)
        return sqlite3.connect(database, check_same_thread=False)

    r = Readers(database, connect, count=1)
    try:
        with pytest.raises(StoreUnavailableError):
            await r.read(lambda db: db.execute("SELECT 1").fetchone())
        assert await r.read(lambda db: db.execute("SELECT 1").fetchone()) == (1,)
        assert len(attempts) == 2
    finally:
        await asyncio.to_thread(r.close)


async def test_a_read_of_a_malformed_page_marks_the_file_damaged(tmp_path: Path) -> None:
    """A read that meets a garbled page fails store_unavailable and records the damage in
    the store's Health (readiness reads it); a full-disk or lock failure would not."""
    path = tmp_path / "garbled.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (body TEXT)")
    db.executemany("INSERT INTO t VALUES (?)", [("x" * 500,) for _ in range(200)])
    db.commit()
    db.close()
    data = bytearray(path.read_bytes())
    data[-4096:] = bytes(range(256)) * 16  # the last page: a leaf of t
    path.write_bytes(bytes(data))
    health = Health()
    r = Readers(
        path, lambda: sqlite3.connect(path, check_same_thread=False), count=1, health=health
    )
    try:
        assert await r.read(lambda db: db.execute("SELECT 1").fetchone()) == (1,)
        assert health.damaged is None
        with pytest.raises(StoreUnavailableError, match="malformed"):
            await r.read(lambda db: db.execute("SELECT count(*), max(body) FROM t").fetchone())
        assert health.damaged is not None
        assert not health.full
    finally:
        r.close()
