"""The SQLite store's own promises (notes §16.2, seed 004): ownership, format and damage checks,
faults (full disk, locked and read-only files, missing directories), torn writes, persistence.

Real database files in the test's temporary directory; the contract every store shares is in
tests/contract. Full disk is provoked with ``PRAGMA max_page_count`` (:meth:`limit_pages`):
SQLite then fails the transaction with SQLITE_FULL, the very error a full disk gives.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import stat
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from protocol.errors import StoreUnavailableError
from relay.store import open_store
from relay.store.base import (
    Credential,
    Deadline,
    NewEntry,
    ParticipantRecord,
    SessionHeader,
    StoreOpenError,
)
from relay.store.sqlite import DB_FORMAT, SqliteStore
from tests.support.mounts import fill, remount, tmpfs

__all__: list[str] = []


def header(session_id: str) -> SessionHeader:
    """A plain header."""
    return SessionHeader(
        session_id=session_id, workspace="ws", created_at="2026-12-01T00:00:00.000Z", epoch="e"
    )


def entry(type: str = "agent.text.delta", message_id: str | None = None) -> NewEntry:
    """An entry with a small JSON envelope."""
    mid = message_id or str(uuid.uuid4())
    return NewEntry(
        message_id=mid,
        type=type,
        head=b'{"type":"%s","message_id":"%s","seq":' % (type.encode(), mid.encode()),
        tail=b"}",
        sender_id="p-c",
        sender_role="client",
    )


def digest(path: Path) -> str:
    """The file's SHA-256 (to show it was not modified)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    """A started store on a fresh file."""
    opened = SqliteStore(tmp_path / "rawp.db")
    await opened.start()
    yield opened
    await opened.close()


async def test_open_store_url_and_missing_directories(tmp_path: Path) -> None:
    """sqlite:PATH opens a SqliteStore; missing parent directories are created."""
    path = tmp_path / "a" / "b" / "rawp.db"
    opened = open_store(f"sqlite:{path}")
    assert isinstance(opened, SqliteStore)
    await opened.start()
    try:
        assert path.exists()
        assert await opened.ping()
    finally:
        await opened.close()


async def test_a_second_owner_is_refused_naming_file_and_pid(store: SqliteStore) -> None:
    """One owner per file: a second store on the same file names the file and the owner."""
    second = SqliteStore(store.path)
    with pytest.raises(StoreOpenError) as refused:
        await second.start()
    message = str(refused.value)
    assert str(store.path) in message
    assert f"pid {os.getpid()}" in message
    assert "\n" not in message


async def test_newer_format_is_refused_with_upgrade_and_left_untouched(tmp_path: Path) -> None:
    """A database of a newer format is refused with "upgrade" (never "corrupt"), unchanged."""
    first = SqliteStore(tmp_path / "rawp.db")
    await first.start()
    await first.close()
    with sqlite3.connect(first.path) as db:
        db.execute(f"PRAGMA user_version = {DB_FORMAT + 1}")
    before = digest(first.path)
    with pytest.raises(StoreOpenError) as refused:
        await SqliteStore(first.path).start()
    assert "upgrade" in str(refused.value)
    assert "damaged" not in str(refused.value)
    assert "corrupt" not in str(refused.value)
    assert digest(first.path) == before


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"name,seq\nx,1\n" * 100, "not a RAWP database"),
        (None, "not a RAWP database"),  # another program's SQLite database
    ],
)
async def test_a_foreign_file_is_refused_and_left_untouched(
    tmp_path: Path, content: bytes | None, words: str
) -> None:
    """A file that is not a RAWP database stops the start with a clear message, unchanged."""
    path = tmp_path / "other.db"
    if content is None:
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE notes (body TEXT)")
            db.execute("INSERT INTO notes VALUES ('mine')")
    else:
        path.write_bytes(content)
    before = digest(path)
    with pytest.raises(StoreOpenError) as refused:
        await SqliteStore(path).start()
    assert words in str(refused.value)
    assert str(path) in str(refused.value)
    assert digest(path) == before


async def test_a_damaged_database_is_refused_and_left_untouched(tmp_path: Path) -> None:
    """A RAWP database whose schema page is overwritten is reported damaged, not modified."""
    first = SqliteStore(tmp_path / "rawp.db")
    await first.start()
    await first.create_session(header("s-1"))
    await first.close()
    data = bytearray(first.path.read_bytes())
    data[100:4096] = b"\xa5" * (4096 - 100)  # page 1 after the file header: sqlite_master
    first.path.write_bytes(bytes(data))
    before = digest(first.path)
    with pytest.raises(StoreOpenError) as refused:
        await SqliteStore(first.path).start()
    assert "damaged" in str(refused.value)
    assert digest(first.path) == before


async def test_a_read_only_file_is_refused(tmp_path: Path) -> None:
    """A database file marked read-only stops the start with a message naming it."""
    first = SqliteStore(tmp_path / "rawp.db")
    await first.start()
    await first.close()
    first.path.chmod(stat.S_IRUSR | stat.S_IRGRP)
    before = digest(first.path)
    with pytest.raises(StoreOpenError) as refused:
        await SqliteStore(first.path).start()
    assert "read-only" in str(refused.value)
    assert str(first.path) in str(refused.value)
    assert digest(first.path) == before


async def test_full_disk_refuses_loses_nothing_acknowledged_and_recovers(
    store: SqliteStore,
) -> None:
    """SQLITE_FULL: the append fails store_unavailable, acknowledged entries stay, and once
    space returns appends go on at the next seq."""
    await store.create_session(header("s-full"))
    acknowledged = await store.append("s-full", [entry() for _ in range(10)])
    used = await store._read(lambda db: db.execute("PRAGMA page_count").fetchone()[0])
    await store.limit_pages(used)
    big = [
        NewEntry(
            message_id=str(uuid.uuid4()),
            type="agent.text.delta",
            head=b'{"seq":',
            tail=b',"pad":"' + b"x" * 8192 + b'"}',
            sender_id="p-c",
            sender_role="client",
        )
        for _ in range(20)
    ]
    with pytest.raises(StoreUnavailableError, match="full"):
        await store.append("s-full", big)
    # (readiness while full: test_readiness_stays_refused_while_a_full_disk_refuses_frames)
    assert [e.seq for e in await store.read("s-full")] == [r.seq for r in acknowledged]
    await store.limit_pages(None)
    assert await store.ping()  # readiness recovers by itself once space returns
    again = await store.append("s-full", [entry()])
    assert again[0].seq == 11


async def test_a_file_locked_by_another_program_fails_writes_then_recovers(
    store: SqliteStore,
) -> None:
    """Another program holding the write lock: writes fail store_unavailable (after the busy
    timeout), and succeed again once it lets go."""
    await store.create_session(header("s-lock"))
    other = sqlite3.connect(store.path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreUnavailableError, match="locked"):
            await store.append("s-lock", [entry()])
        other.execute("ROLLBACK")
    finally:
        other.close()
    assert (await store.append("s-lock", [entry()]))[0].seq == 1


async def test_a_torn_final_transaction_loses_only_that_batch(
    store: SqliteStore, tmp_path: Path
) -> None:
    """A WAL whose last transaction is torn (power loss mid-write) opens with every earlier
    batch intact and nothing of the torn one half-written."""
    await store.create_session(header("s-torn"))
    await store.append("s-torn", [entry() for _ in range(5)])
    await store.append("s-torn", [entry() for _ in range(5)])
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(store.path, copy / "rawp.db")
    wal = store.path.with_name("rawp.db-wal")
    torn = wal.read_bytes()
    (copy / "rawp.db-wal").write_bytes(torn[: len(torn) - 200])  # the last frame, cut
    reopened = SqliteStore(copy / "rawp.db")
    await reopened.start()
    try:
        got = [e.seq for e in await reopened.read("s-torn")]
        assert got == list(range(1, 6))  # the first batch; the torn second one not at all
        assert await reopened.head_seq("s-torn") == 5
        assert (await reopened.append("s-torn", [entry()]))[0].seq == 6
    finally:
        await reopened.close()


async def test_participants_deadlines_and_credentials_survive_a_restart(tmp_path: Path) -> None:
    """What the master keeps beside the log is still there after close and reopen."""
    first = SqliteStore(tmp_path / "rawp.db")
    await first.start()
    await first.create_session(header("s-keep"))
    record = ParticipantRecord(participant_id="p-1", role="client", generation=3, cursor=7)
    await first.put_participant("s-keep", record)
    await first.set_deadline(Deadline(session_id="s-keep", participant_id="p-1", due_ms=5))
    key = Credential(digest="d" * 64, kind="key", workspace="ws", grants=["all"])
    await first.put_credential(key)
    await first.close()
    second = SqliteStore(first.path)
    await second.start()
    try:
        assert await second.get_participant("s-keep", "p-1") == record
        assert await second.get_credential("d" * 64) == key
        assert await second.claim_due_deadlines(10) == [
            Deadline(session_id="s-keep", participant_id="p-1", due_ms=5)
        ]
    finally:
        await second.close()


async def test_recovery_candidates_follow_the_open_turn_marker(store: SqliteStore) -> None:
    """Sessions inside a turn, or with participants recorded attached, are the candidates;
    the others (and archived ones) are not, so start-up reads no other log."""
    for name in ("s-open", "s-closed", "s-attached", "s-archived"):
        await store.create_session(header(name))
    await store.append("s-open", [entry("session.turn.start")])
    await store.append("s-closed", [entry("session.turn.start"), entry("session.turn.end")])
    await store.put_participant(
        "s-attached", ParticipantRecord(participant_id="p", role="client", attached=True)
    )
    await store.append("s-archived", [entry("session.turn.start")])
    await store.archive_session(
        "s-archived", ended_at="x", ended_at_ms=1, reason="error", deleted_by="client"
    )
    assert await store.recovery_candidates() == ["s-attached", "s-open"]


def _sent(message_id: str, data: dict[str, object], sender: str, role: str = "client") -> NewEntry:
    """An entry whose stored bytes are ``data`` (with its seq), sent by ``sender``."""
    body = json.dumps({**data, "message_id": message_id}).encode()
    return NewEntry(
        message_id=message_id,
        type=str(data["type"]),
        head=body[:-1] + b',"seq":',
        tail=b"}",
        sender_id=sender,
        sender_role=role,
    )


async def test_a_format_1_database_is_upgraded_with_received_from_its_log(tmp_path: Path) -> None:
    """Opening a format-1 file (no ``received`` table) fills the table from the log and marks
    format 2: a frame, a history's last inner frame, master entries and empty histories."""
    store = SqliteStore(tmp_path / "rawp.db")
    await store.start()
    s = "s-upgrade"
    await store.create_session(header(s))
    at = "2026-12-01T00:00:00.000Z"
    inner = {"type": "agent.text.delta", "message_id": "inner-9", "session_id": s}
    inner |= {"timestamp": at, "payload": {"block_id": "b", "delta": "x"}}

    def history(frames: list[dict[str, object]]) -> dict[str, object]:
        status = {"policy_applied": "RING", "truncated": False, "lost_frame_count": 0}
        payload = {"frames": frames, "buffer_status": status | {"buffer_high_watermark": 1}}
        payload |= {"last_sync_timestamp": at, "last_message_id": "inner-9"}
        return {"type": "session.history", "session_id": s, "timestamp": at, "payload": payload}

    delta = {"type": "agent.text.delta", "session_id": s, "timestamp": at}
    await store.append(
        s,
        [
            _sent("c1", delta, "p-client"),
            _sent("h1", history([inner]), "p-client"),
            _sent("h2", history([]), "p-client"),
            _sent("e1", delta, "p-edge"),
            _sent("m1", delta, "p-edge", role="master"),
        ],
    )
    await store.close()
    with sqlite3.connect(store.path) as db:
        db.execute("DROP TABLE received")
        db.execute("PRAGMA user_version = 1")
    again = SqliteStore(store.path)
    await again.start()
    try:
        assert await again.last_received(s, "p-client") == "inner-9"
        assert await again.last_received(s, "p-edge") == "e1"
        await again.append(s, [_sent("c2", delta, "p-client")])
        assert await again.last_received(s, "p-client") == "c2"
    finally:
        await again.close()
    with sqlite3.connect(store.path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == DB_FORMAT == 2


# --- one owner per file, whatever its name --------------------------------------------------


@pytest.mark.parametrize("link", ["symlink", "hard link", "symlinked directory"])
async def test_a_second_owner_through_another_name_is_refused(
    store: SqliteStore, tmp_path: Path, link: str
) -> None:
    """The lock is on the file, not its name: a second store reaching the owned file through
    a symlink, a hard link or a symlinked directory is refused (before, it opened the file
    and both appended their own seqs to the same log). In one process the refusal comes from
    the process's own table; across processes from the file's flock (test_serve_cli)."""
    other = tmp_path / "elsewhere"
    other.mkdir()
    if link == "symlink":
        alias = other / "alias.db"
        alias.symlink_to(store.path)
    elif link == "hard link":
        alias = other / "alias.db"
        os.link(store.path, alias)
    else:
        (other / "dir").symlink_to(store.path.parent, target_is_directory=True)
        alias = other / "dir" / store.path.name
    second = SqliteStore(alias)
    with pytest.raises(StoreOpenError) as refused:
        await second.start()
    message = str(refused.value)
    assert "in use by another" in message
    assert str(alias) in message
    assert f"pid {os.getpid()}" in message
    await store.create_session(header("s-own"))
    assert (await store.append("s-own", [entry()]))[0].seq == 1  # the owner goes on


# --- what a refused start leaves behind ----------------------------------------------------


def _names(directory: Path) -> list[str]:
    """The names in ``directory``, sorted."""
    return sorted(p.name for p in directory.iterdir())


def _wal_database(path: Path, **pragmas: int) -> None:
    """Another program's SQLite file in WAL mode, with ``pragmas`` set."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA journal_mode = WAL")
        for name, value in pragmas.items():
            db.execute(f"PRAGMA {name} = {value}")
        db.commit()


@pytest.mark.parametrize("case", ["newer format", "foreign", "user_version only", "read-only"])
async def test_a_refused_start_leaves_no_files_behind(tmp_path: Path, case: str) -> None:
    """A refused start creates no -wal, -shm or lock file beside the database (a read-only
    look at a WAL database used to leave an empty -wal and a -shm), and leaves it unchanged."""
    path = tmp_path / "rawp.db"
    if case == "newer format":
        made = SqliteStore(path)
        await made.start()
        await made.close()
        with contextlib.closing(sqlite3.connect(path)) as db:
            db.execute(f"PRAGMA user_version = {DB_FORMAT + 1}")
            db.commit()
    elif case == "foreign":
        _wal_database(path, application_id=7)
    elif case == "user_version only":
        _wal_database(path, user_version=7)
    else:
        made = SqliteStore(path)
        await made.start()
        await made.close()
        path.chmod(stat.S_IRUSR | stat.S_IRGRP)
    before = _names(tmp_path)
    content = digest(path)
    with pytest.raises(StoreOpenError):
        await SqliteStore(path).start()
    assert _names(tmp_path) == before
    assert digest(path) == content


async def test_an_sqlite_file_with_only_a_user_version_is_not_taken_over(tmp_path: Path) -> None:
    """user_version 7 and no tables is another program's file: refused, not made RAWP's."""
    path = tmp_path / "theirs.db"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA user_version = 7")
        db.commit()
    before = digest(path)
    with pytest.raises(StoreOpenError, match="not a RAWP database") as refused:
        await SqliteStore(path).start()
    assert "user_version 7" in str(refused.value)
    assert digest(path) == before
    fresh = tmp_path / "fresh.db"
    sqlite3.connect(fresh).close()  # an SQLite file with nothing at all in it is anybody's
    opened = SqliteStore(fresh)
    await opened.start()
    await opened.close()


# --- purges leave no bytes ------------------------------------------------------------------


def _copies(path: Path, marker: bytes) -> int:
    """How often ``marker`` occurs in the database file and SQLite's files beside it."""
    found = 0
    for name in (path.name, path.name + "-wal", path.name + "-shm"):
        with contextlib.suppress(FileNotFoundError):
            found += (path.parent / name).read_bytes().count(marker)
    return found


def _marked(marker: str, size: int) -> NewEntry:
    """An entry whose stored bytes repeat ``marker`` to ``size`` bytes (overflow pages too)."""
    mid = str(uuid.uuid4())
    pad = (marker * (size // len(marker) + 1))[:size]
    return NewEntry(
        message_id=mid,
        type="agent.text.delta",
        head=b'{"delta":"' + pad.encode() + b'","seq":',
        tail=b"}",
        sender_id="p-c",
        sender_role="client",
    )


@pytest.mark.parametrize("how", ["delete", "retention purge"])
async def test_a_purged_session_leaves_no_bytes_in_the_files(tmp_path: Path, how: str) -> None:
    """After a deletion, or the purge of an archive past its retention, none of the
    session's content is left in rawp.db or rawp.db-wal (before, the WAL held copies of it,
    also after a restart), while the other sessions' content stays whole."""
    marker, kept = "PURGE-ME-7f3a", "KEEP-ME-0c91"
    store = SqliteStore(tmp_path / "rawp.db")
    await store.start()
    try:
        for sid, text in (("s-gone", marker), ("s-kept", kept)):
            await store.create_session(msgspec.structs.replace(header(sid), name=text))
        for size in (40, 600, 9000):  # in-page, larger and overflow-page entries
            for _ in range(5):
                await store.append("s-gone", [_marked(marker, size)])
                await store.append("s-kept", [_marked(kept, size)])
        await store.rename_session("s-gone", marker + "-renamed")
        assert _copies(store.path, marker.encode()) > 0
        if how == "delete":
            assert await store.delete_session("s-gone")
        else:
            await store.archive_session(
                "s-gone", ended_at="x", ended_at_ms=1, reason="timeout", deleted_by="master"
            )
            assert await store.archived_before(2) == ["s-gone"]
            assert await store.delete_session("s-gone")  # what the purge loop does
        assert _copies(store.path, marker.encode()) == 0
        assert await store.read("s-gone") == []
        assert len(await store.read("s-kept")) == 15
    finally:
        await store.close()
    assert _copies(store.path, marker.encode()) == 0
    again = SqliteStore(store.path)
    await again.start()
    try:
        assert _copies(store.path, marker.encode()) == 0
        assert len(await again.read("s-kept")) == 15
        assert await again.is_deleted("s-gone")
    finally:
        await again.close()
    assert _copies(store.path, kept.encode()) > 0


# --- readiness: a full disk, a damaged file ---------------------------------------------------


async def test_readiness_stays_refused_while_a_full_disk_refuses_frames(store: SqliteStore) -> None:
    """A capped file: once a frame is refused for want of space, ping() is False (before,
    the probe's one-page rewrite fit and readiness said yes while frames were refused), also
    after a small write succeeds; once the room is back, it is True again."""
    await store.create_session(header("s-full"))
    await store.append("s-full", [entry()])
    used = await store._read(lambda db: db.execute("PRAGMA page_count").fetchone()[0])
    await store.limit_pages(used + 2)
    with pytest.raises(StoreUnavailableError, match="full"):
        await store.append("s-full", [_marked("x", 200_000)])
    assert not await store.ping()
    assert "full" in (store.unready_reason() or "")
    await store.rename_session("s-full", "small")  # fits: the disk is not writable for frames
    assert not await store.ping()
    assert not await store.ping()
    await store.limit_pages(None)
    assert await store.ping()
    assert store.unready_reason() is None
    assert (await store.append("s-full", [_marked("x", 200_000)]))[0].seq == 2


def _shrink(path: Path, by: int) -> None:
    """Give ``by`` bytes of ``path`` back to its file system."""
    os.truncate(path, path.stat().st_size - by)


async def test_readiness_follows_a_real_full_disk(tmp_path: Path) -> None:
    """On a real, full tmpfs: a frame is refused store_unavailable and ping() is False, also
    once a little space is free (small writes fit, frames do not); once space is freed
    ping() is True again and the frame is taken."""
    with tmpfs(tmp_path / "disk", size="24m") as disk:
        store = SqliteStore(disk / "rawp.db")
        await store.start()
        try:
            await store.create_session(header("s-disk"))
            await store.append("s-disk", [entry()])
            fill(disk / "ballast")
            refused = 0
            for _ in range(20):  # the WAL's free room first, then the disk's end
                try:
                    await store.append("s-disk", [_marked("x", 500_000)])
                except StoreUnavailableError:
                    refused += 1
                    break
            assert refused
            assert not await store.ping()
            _shrink(disk / "ballast", 256 << 10)  # room for a page, not for frames
            assert not await store.ping()  # (before, the one-page probe fit: ready)
            with pytest.raises(StoreUnavailableError):
                await store.append("s-disk", [_marked("x", 500_000)])
            assert not await store.ping()
            (disk / "ballast").unlink()
            assert await store.ping()
            await store.append("s-disk", [_marked("x", 500_000)])
        finally:
            await store.close()


async def test_a_damaged_page_refuses_readiness(tmp_path: Path) -> None:
    """A page garbled deep in the log (no start-up query reads it): the store starts, the
    background check finds it and ping() is False (before, readiness said yes while reads
    of that session failed), naming the damage; sessions elsewhere stay readable."""
    path = tmp_path / "rawp.db"
    made = SqliteStore(path)
    await made.start()
    for n in range(5):
        await made.create_session(header(f"s-{n}"))
        for _ in range(10):
            await made.append(f"s-{n}", [_marked(f"s-{n}", 300) for _ in range(20)])
    await made.close()
    data = bytearray(path.read_bytes())
    page = len(data) // 4096 // 2
    data[page * 4096 : (page + 1) * 4096] = bytes(range(256)) * 16
    path.write_bytes(bytes(data))
    damaged = SqliteStore(path)
    await damaged.start()
    try:
        for _ in range(500):  # the check runs in the background (a tiny file: milliseconds)
            if damaged.integrity_checked:
                break
            await asyncio.sleep(0.01)
        assert damaged.integrity_checked
        assert not await damaged.ping()
        assert "damaged" in (damaged.unready_reason() or "")
        readable = 0
        for n in range(5):
            with contextlib.suppress(StoreUnavailableError):
                readable += len(await damaged.read(f"s-{n}")) > 0
        assert readable >= 1  # the store serves what is not damaged
    finally:
        await damaged.close()


# --- a read-only file system ----------------------------------------------------------------


@pytest.mark.parametrize("existing", [True, False])
async def test_a_read_only_file_system_is_refused_as_read_only(
    tmp_path: Path, existing: bool
) -> None:
    """On a read-only mount (root's chmod does not bite; a mount does) the start is refused
    StoreOpenError "read-only" (exit 7), for a database there and for a new one, leaving
    nothing; before, the lock file's creation failed as an OSError: "cannot reach the
    store", exit 4."""
    with tmpfs(tmp_path / "ro", size="8m") as mount:
        path = mount / "rawp.db"
        if existing:
            made = SqliteStore(path)
            await made.start()
            await made.close()
            for leftover in mount.iterdir():
                if leftover != path:
                    leftover.unlink()
        remount(mount, read_only=True)
        before = _names(mount)
        with pytest.raises(StoreOpenError, match="read-only file system") as refused:
            await SqliteStore(path).start()
        assert str(path) in str(refused.value)
        assert _names(mount) == before


async def test_a_purge_held_up_by_a_long_read_scrubs_the_wal_once_it_ends(
    tmp_path: Path,
) -> None:
    """A read transaction open elsewhere keeps the WAL: the purge is answered all the same
    (writes do not wait on that reader), and the WAL is truncated once the read ends."""
    marker = "HELD-UP-5d2e"
    store = SqliteStore(tmp_path / "rawp.db")
    await store.start()
    reader = sqlite3.connect(store.path, isolation_level=None)
    try:
        await store.create_session(header("s-held"))
        for _ in range(5):
            await store.append("s-held", [_marked(marker, 3000)])
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM log").fetchone()  # a snapshot: the WAL stays
        assert await store.delete_session("s-held")
        assert _copies(store.path, marker.encode()) > 0  # the reader's snapshot holds it
        reader.execute("COMMIT")
        for _ in range(100):  # retried every second by the writer
            if _copies(store.path, marker.encode()) == 0:
                break
            await asyncio.sleep(0.1)
        assert _copies(store.path, marker.encode()) == 0
    finally:
        reader.close()
        await store.close()


async def test_a_store_whose_reads_fail_is_not_ready(store: SqliteStore) -> None:
    """Readiness needs an answer: with no reader to answer (here, the reader threads gone)
    ping() is False although nothing was learnt of the file."""
    assert await store.ping()
    readers, store._readers = store._readers, None
    try:
        assert not await store.ping()
        assert store.unready_reason() is None  # /readyz then says "not reachable"
    finally:
        store._readers = readers
    assert await store.ping()
