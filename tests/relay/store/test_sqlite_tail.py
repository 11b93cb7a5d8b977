"""The SQLite store's in-memory log tails (relay/store/sqlite/tail.py): a read they answer is
the file's answer, and whenever that is not certain the file answers.

The model test drives :class:`LogTails` alone against a list; the store tests use real files
in the test's temporary directory and compare each read with the file's own rows.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import StoreUnavailableError
from relay.store.base import AppendResult, LogEntry, NewEntry, SessionHeader
from relay.store.sqlite import SqliteStore
from relay.store.sqlite.appending import append_entries
from relay.store.sqlite.reader import Readers
from relay.store.sqlite.rows import entry_of
from relay.store.sqlite.statements import READ_RANGE
from relay.store.sqlite.tail import MAX_ENTRIES, LogTails

__all__: list[str] = []


def entry(message_id: str | None = None, size: int = 0) -> NewEntry:
    """An entry whose stamped bytes are a JSON envelope with the seq spliced in."""
    mid = message_id or str(uuid.uuid4())
    return NewEntry(
        message_id=mid,
        type="agent.text.delta",
        head=b'{"message_id":"%s","pad":"%s","seq":' % (mid.encode(), b"x" * size),
        tail=b"}",
        sender_id="p-c",
        sender_role="client",
    )


# --- the tails alone, against a model of the log ----------------------------------------------

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 40), st.integers(0, 2)),
        st.tuples(st.just("drop"), st.just(0), st.just(0)),
        st.tuples(st.just("fail"), st.integers(1, 5), st.just(0)),
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(
    ops=_ops,
    retention=st.one_of(st.none(), st.integers(1, 60)),
    reads=st.lists(
        st.tuples(
            st.integers(0, 700), st.one_of(st.none(), st.integers(0, 800)), st.integers(-1, 50)
        ),
        max_size=8,
    ),
)
def test_what_a_tail_answers_is_the_log(
    ops: list[tuple[str, int, int]],
    retention: int | None,
    reads: list[tuple[int, int | None, int]],
) -> None:
    """Appends (some repeating message ids), lost answers and drops: every read the tail
    answers equals the log's entries, and the newest entry is always answered from it."""
    tails = LogTails(retention)
    log: list[LogEntry] = []  # what the file holds, trimmed as the store trims
    seen: set[str] = set()
    for op, count, dups in ops:
        if op == "drop":
            tails.drop("s")
            continue
        batch = [entry() for _ in range(count)]
        batch += [
            NewEntry(**{**_fields(log[-1 - i]), "head": b"", "tail": b""})
            for i in range(min(dups, len(log)))
        ]
        results: list[AppendResult] = []
        head = log[-1].seq if log else 0
        for e in batch:
            if e.message_id in seen:
                dup = next(x.seq for x in log if x.message_id == e.message_id)
                results.append(AppendResult(seq=dup, duplicate=True))
                continue
            head += 1
            seen.add(e.message_id)
            log.append(e.committed(head))
            results.append(AppendResult(seq=head))
        if op == "fail":
            tails.drop("s")  # the store's answer to a lost append (it may have committed)
        else:
            tails.appended("s", batch, results)
        if retention is not None:
            log = log[-retention:]
        if log and op == "append" and any(not r.duplicate for r in results):
            assert tails.read("s", log[-1].seq - 1, None, None) == [log[-1]]
    for after, before, limit in reads:
        got = tails.read("s", after, before, None if limit < 0 else limit)
        if got is None:
            continue
        want = [e for e in log if e.seq > after and (before is None or e.seq < before)]
        assert got == (want if limit < 0 else want[:limit])


def _fields(e: LogEntry) -> dict[str, Any]:
    return {
        "message_id": e.message_id,
        "type": e.type,
        "sender_id": e.sender_id,
        "sender_role": e.sender_role,
    }


def test_a_tail_is_bounded() -> None:
    """At most MAX_ENTRIES entries per session; older reads go to the file."""
    tails = LogTails(None)
    batch = [entry() for _ in range(MAX_ENTRIES + 10)]
    tails.appended("s", batch, [AppendResult(seq=i + 1) for i in range(len(batch))])
    assert tails.read("s", 0, None, None) is None
    kept = tails.read("s", 10, None, None)
    assert kept is not None
    assert len(kept) == MAX_ENTRIES
    assert kept[0].seq == 11


# --- the store -------------------------------------------------------------------------------


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    """A started store on a fresh file."""
    s = SqliteStore(tmp_path / "rawp.db")
    await s.start()
    await s.create_session(_header("s"))
    yield s
    await s.close()


def _header(session_id: str) -> SessionHeader:
    return SessionHeader(
        session_id=session_id, workspace="ws", created_at="2026-12-01T00:00:00.000Z", epoch="e"
    )


def _file_rows(path: Path, session_id: str, after: int) -> list[LogEntry]:
    """The log's rows after ``after``, read from the file by a connection of the test's own."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = db.execute(READ_RANGE.format(order="ASC"), (session_id, after, 2**62, -1))
        return [entry_of(r) for r in rows.fetchall()]
    finally:
        db.close()


@pytest.fixture
def file_reads(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every read that went to the reader threads (the file)."""
    calls: list[object] = []
    real = Readers.read

    def counted(self: Readers, query: Any) -> Any:
        calls.append(query)
        return real(self, query)

    monkeypatch.setattr(Readers, "read", counted)
    return calls


async def test_a_backlog_read_after_appends_needs_no_file_read(
    store: SqliteStore, file_reads: list[object]
) -> None:
    """The newest entries come from memory, and they are the file's rows."""
    await store.append("s", [entry() for _ in range(30)])
    file_reads.clear()
    got = await store.read("s", after_seq=10, before_seq=31, limit=11)
    assert file_reads == []
    assert got == _file_rows(store.path, "s", 10)[:11]


async def test_an_append_that_failed_sends_reads_to_the_file(
    store: SqliteStore, file_reads: list[object]
) -> None:
    """An append that failed (here after writing its rows, which SQLite rolls back): the
    tail is not trusted for that log any more, the file answers."""
    await store.append("s", [entry() for _ in range(3)])

    def written_then_failed(*args: Any) -> Any:
        append_entries(*args)
        raise sqlite3.OperationalError("disk I/O error")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("relay.store.sqlite.store.append_entries", written_then_failed)
        with pytest.raises(StoreUnavailableError):
            await store.append("s", [entry()])
    file_reads.clear()
    got = await store.read("s", after_seq=2)
    assert len(file_reads) == 1, "answered by the file"
    assert got == _file_rows(store.path, "s", 2)


async def test_an_append_given_up_on_sends_reads_to_the_file(store: SqliteStore) -> None:
    """An append its caller cancelled still commits: its answer is lost to the tail, so the
    next read comes from the file, and holds it."""
    await store.append("s", [entry() for _ in range(3)])
    store.append_nowait("s", [entry()]).cancel()
    for _ in range(500):  # until the writer has committed it
        if len(_file_rows(store.path, "s", 0)) == 4:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0)  # the cancellation's callbacks have run: the master knows of it
    got = await store.read("s", after_seq=2)
    assert [e.seq for e in got] == [3, 4]
    assert got == _file_rows(store.path, "s", 2)


async def test_a_deleted_and_recreated_session_reads_its_new_log(store: SqliteStore) -> None:
    """A delete drops the tail: nothing of the deleted log is read, and the session made again
    under the same id reads only its own."""
    await store.append("s", [entry() for _ in range(5)])
    assert await store.delete_session("s")
    assert await store.read("s", after_seq=0) == []
    await store.create_session(_header("s"))
    fresh = entry()
    await store.append("s", [fresh])
    got = await store.read("s", after_seq=0)
    assert [e.message_id for e in got] == [fresh.message_id]
    assert got == _file_rows(store.path, "s", 0)


async def test_a_trimmed_log_reads_the_same_from_memory_and_file(tmp_path: Path) -> None:
    """With retention, what the tail answers is what the file kept."""
    store = SqliteStore(tmp_path / "trim.db", retention=5)
    await store.start()
    try:
        await store.create_session(_header("s"))
        for _ in range(4):
            await store.append("s", [entry() for _ in range(3)])
        kept = _file_rows(store.path, "s", 0)
        assert [e.seq for e in kept] == [8, 9, 10, 11, 12]
        assert await store.read("s", after_seq=7) == kept
        assert await store.read("s", after_seq=0) == kept
    finally:
        await store.close()
