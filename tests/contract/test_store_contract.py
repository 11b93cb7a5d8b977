"""The store contract: what every backend (memory, sqlite, redis, redis-cluster) must do alike.

Each test runs once per backend (the ``store`` / ``backend`` fixtures in conftest.py). The
contract is the docstrings of :mod:`relay.store.base`; notes §7 and §12, seed 004.
"""

from __future__ import annotations

import asyncio
import uuid

import msgspec
import pytest

from protocol.errors import FormatVersionError, SessionMissing, StoreUnavailableError
from relay.store.base import (
    FORMAT_VERSION,
    AppendResult,
    Credential,
    Deadline,
    LogEntry,
    NewEntry,
    ParticipantRecord,
    SessionHeader,
    Store,
)
from tests.contract.conftest import Backend

__all__: list[str] = []


def sid() -> str:
    """A fresh session id."""
    return f"s-{uuid.uuid4()}"


def header(session_id: str | None = None, workspace: str = "ws-a", **kw: object) -> SessionHeader:
    """A session header with every field set to something checkable."""
    fields: dict[str, object] = {
        "session_id": session_id or sid(),
        "workspace": workspace,
        "name": "a session",
        "agent_id": "agent-7",
        "created_at": "2026-11-29T09:00:00.123Z",
        "epoch": uuid.uuid4().hex,
    }
    fields.update(kw)
    return SessionHeader(**fields)  # type: ignore[arg-type]


def entry(
    message_id: str | None = None,
    *,
    type: str = "agent.text.delta",
    sender_id: str = "p-client",
    sender_role: str = "client",
    exclude: str | None = None,
    edges_only: bool = False,
) -> NewEntry:
    """An entry whose stamped bytes are a JSON envelope with the seq spliced in."""
    mid = message_id or str(uuid.uuid4())
    return NewEntry(
        message_id=mid,
        type=type,
        head=b'{"type":"%s","message_id":"%s","payload":{"delta":"\xc3\xa9"},"seq":'
        % (type.encode(), mid.encode()),
        tail=b',"sender":{"role":"%s","participant_id":"%s"}}'
        % (sender_role.encode(), sender_id.encode()),
        sender_id=sender_id,
        sender_role=sender_role,
        exclude=exclude,
        edges_only=edges_only,
    )


def as_written(store: Store, h: SessionHeader) -> SessionHeader:
    """``h`` as ``store`` writes a new session: in its format (a newer one stays)."""
    return msgspec.structs.replace(h, format_version=max(h.format_version, store.format_version))


async def new_session(store: Store, **kw: object) -> str:
    """Create a session and return its id."""
    h = header(**kw)  # type: ignore[arg-type]
    _, created = await store.create_session(h)
    assert created
    return h.session_id


async def filled(store: Store, n: int) -> tuple[str, list[NewEntry]]:
    """A session with ``n`` entries (seqs 1..n)."""
    s = await new_session(store)
    entries = [entry() for _ in range(n)]
    await store.append(s, entries)
    return s, entries


def seqs(entries: list[LogEntry]) -> list[int]:
    """The seqs of read entries."""
    return [e.seq for e in entries]


# --- append ----------------------------------------------------------------------------------


async def test_append_assigns_dense_seqs_from_one(store: Store) -> None:
    """Seqs are dense from 1 across calls, and read returns them in order."""
    s = await new_session(store)
    first = await store.append(s, [entry(), entry(), entry()])
    second = await store.append(s, [entry(), entry()])
    assert first == [AppendResult(seq=1), AppendResult(seq=2), AppendResult(seq=3)]
    assert second == [AppendResult(seq=4), AppendResult(seq=5)]
    assert await store.head_seq(s) == 5
    assert seqs(await store.read(s)) == [1, 2, 3, 4, 5]


async def test_append_is_visible_to_a_fresh_connection(backend: Backend, store: Store) -> None:
    """Once append returns, another client (a new connection) reads the entries."""
    s = await new_session(store)
    new = [entry() for _ in range(3)]
    await store.append(s, new)
    other = backend.reopen(store)
    got = await other.read(s)
    assert [e.message_id for e in got] == [e.message_id for e in new]
    assert await other.head_seq(s) == 3


async def test_acknowledged_appends_survive_a_crash(backend: Backend, store: Store) -> None:
    """After SIGKILL and restart of the backend, every acknowledged append is still there."""
    if not backend.durable:
        pytest.skip("the memory store lives in one process: nothing survives it, by design")
    s = await new_session(store)
    results = await asyncio.gather(*(store.append(s, [entry()]) for _ in range(20)))
    other = await backend.crash(store)
    assert seqs(await other.read(s)) == sorted(r[0].seq for r in results)
    assert await other.head_seq(s) == 20


async def test_concurrent_appends_stay_dense_and_atomic(store: Store) -> None:
    """Concurrent appends (group commit) get dense seqs, each call's entries contiguous."""
    s = await new_session(store)
    calls = [[entry() for _ in range(1 + i % 3)] for i in range(60)]
    results = await asyncio.gather(*(store.append(s, c) for c in calls))
    all_seqs = sorted(r.seq for res in results for r in res)
    assert all_seqs == list(range(1, sum(map(len, calls)) + 1))
    for call, res in zip(calls, results, strict=True):
        got = [r.seq for r in res]
        assert got == list(range(got[0], got[0] + len(call)))
        assert not any(r.duplicate for r in res)
    by_seq = {e.seq: e.message_id for e in await store.read(s)}
    for call, res in zip(calls, results, strict=True):
        assert [by_seq[r.seq] for r in res] == [e.message_id for e in call]


async def test_appends_started_at_once_apply_in_call_order(store: Store) -> None:
    """append_nowait calls chained with ``after`` get seqs in the order they were started."""
    s = await new_session(store)
    calls = [[entry() for _ in range(1 + i % 4)] for i in range(40)]
    futures: list[asyncio.Future[list[AppendResult]]] = []
    for call in calls:
        futures.append(store.append_nowait(s, call, after=futures[-1] if futures else None))
    await asyncio.gather(*futures)
    logged = [e.message_id for e in await store.read(s)]
    assert logged == [e.message_id for call in calls for e in call]


async def test_an_append_after_a_failed_one_is_not_applied(store: Store) -> None:
    """An append chained after a failed one of its session fails too, unapplied."""
    s = await new_session(store)
    await store.append(s, [entry()])
    failed = store.append_nowait(s, [entry()])
    await failed
    # what the caller sees when that previous append failed (Redis down, say)
    failed = asyncio.get_running_loop().create_future()
    failed.set_exception(StoreUnavailableError("redis unreachable"))
    behind = store.append_nowait(s, [entry(), entry()], after=failed)
    with pytest.raises(StoreUnavailableError):
        await behind
    assert seqs(await store.read(s)) == [1, 2]
    assert (await store.append(s, [entry()]))[0].seq == 3


async def test_append_to_unknown_session_raises_session_missing(store: Store) -> None:
    """Appending to a session that does not exist raises SessionMissing and creates nothing."""
    s = sid()
    with pytest.raises(SessionMissing):
        await store.append(s, [entry()])
    assert await store.get_session(s) is None
    assert await store.head_seq(s) == 0


# --- dedupe ----------------------------------------------------------------------------------


async def test_duplicate_message_id_returns_original_seq(store: Store) -> None:
    """A message_id already logged returns its seq with duplicate=True and is not stored again."""
    s = await new_session(store)
    a = entry()
    await store.append(s, [a, entry()])
    again = await store.append(s, [entry(a.message_id)])
    assert again == [AppendResult(seq=1, duplicate=True)]
    assert await store.head_seq(s) == 2
    assert seqs(await store.read(s)) == [1, 2]


async def test_duplicate_within_one_batch(store: Store) -> None:
    """A message_id repeated inside one append is stored once; the repeat points at it."""
    s = await new_session(store)
    a, b = entry(), entry()
    got = await store.append(s, [a, b, entry(a.message_id), entry(b.message_id)])
    assert got == [
        AppendResult(seq=1),
        AppendResult(seq=2),
        AppendResult(seq=1, duplicate=True),
        AppendResult(seq=2, duplicate=True),
    ]
    assert seqs(await store.read(s)) == [1, 2]


async def test_duplicates_across_concurrent_appends(store: Store) -> None:
    """The same message_id appended concurrently is logged once; every copy gets its seq."""
    s = await new_session(store)
    mid = str(uuid.uuid4())
    results = await asyncio.gather(*(store.append(s, [entry(mid)]) for _ in range(10)))
    flat = [r[0] for r in results]
    assert sum(not r.duplicate for r in flat) == 1
    assert {r.seq for r in flat} == {1}
    assert await store.head_seq(s) == 1


async def test_dedupe_is_per_session(store: Store) -> None:
    """The same message_id in two sessions is two entries."""
    s1, s2 = await new_session(store), await new_session(store)
    e = entry()
    assert await store.append(s1, [e]) == [AppendResult(seq=1)]
    assert await store.append(s2, [e]) == [AppendResult(seq=1)]


# --- stored bytes and reads ------------------------------------------------------------------


async def test_stored_bytes_are_head_seq_tail(store: Store) -> None:
    """An entry's data is head + str(seq) + tail; every other field round-trips."""
    s = await new_session(store)
    await store.append(s, [entry() for _ in range(9)])
    e = entry(type="session.presence", sender_id="m-1", sender_role="master", exclude="p-9")
    e2 = entry(type="session.renamed", edges_only=True)
    await store.append(s, [e, e2])
    got = await store.read(s, after_seq=9)
    assert got == [
        LogEntry(
            seq=10,
            message_id=e.message_id,
            type="session.presence",
            data=e.head + b"10" + e.tail,
            sender_id="m-1",
            sender_role="master",
            exclude="p-9",
            edges_only=False,
        ),
        LogEntry(
            seq=11,
            message_id=e2.message_id,
            type="session.renamed",
            data=e2.head + b"11" + e2.tail,
            sender_id="p-client",
            sender_role="client",
            exclude=None,
            edges_only=True,
        ),
    ]


async def test_stored_bytes_of_large_entries(store: Store) -> None:
    """Entries of 300 B, 70 KiB and 1 MiB keep their exact bytes."""
    s = await new_session(store)
    sizes = [300, 70_000, 1 << 20]
    new = []
    for n in sizes:
        e = entry()
        e.head = e.head[:-7] + b',"pad":"' + b"x" * n + b'","seq":'
        new.append(e)
    await store.append(s, new)
    got = await store.read(s)
    assert [g.data for g in got] == [e.head + b"%d" % (i + 1) + e.tail for i, e in enumerate(new)]


async def test_read_after_and_before_seq(store: Store) -> None:
    """read returns after_seq < seq < before_seq, oldest first."""
    s, _ = await filled(store, 6)
    assert seqs(await store.read(s, after_seq=2)) == [3, 4, 5, 6]
    assert seqs(await store.read(s, before_seq=3)) == [1, 2]
    assert seqs(await store.read(s, after_seq=2, before_seq=5)) == [3, 4]
    assert await store.read(s, after_seq=3, before_seq=4) == []
    assert await store.read(s, before_seq=1) == []
    assert await store.read(s, after_seq=6) == []
    assert seqs(await store.read(s, before_seq=100)) == [1, 2, 3, 4, 5, 6]


async def test_read_limit_oldest_first(store: Store) -> None:
    """limit keeps the oldest entries of the range when reading oldest first."""
    s, _ = await filled(store, 6)
    assert seqs(await store.read(s, limit=2)) == [1, 2]
    assert seqs(await store.read(s, after_seq=3, limit=2)) == [4, 5]
    assert seqs(await store.read(s, after_seq=3, limit=10)) == [4, 5, 6]
    assert await store.read(s, limit=0) == []


async def test_read_newest_first(store: Store) -> None:
    """newest_first returns the newest entries of the range first; limit keeps the newest."""
    s, _ = await filled(store, 6)
    assert seqs(await store.read(s, newest_first=True)) == [6, 5, 4, 3, 2, 1]
    assert seqs(await store.read(s, newest_first=True, limit=2)) == [6, 5]
    assert seqs(await store.read(s, before_seq=5, newest_first=True, limit=2)) == [4, 3]
    assert seqs(await store.read(s, after_seq=2, before_seq=6, newest_first=True)) == [5, 4, 3]
    assert await store.read(s, newest_first=True, limit=0) == []


async def test_read_unknown_session_is_empty(store: Store) -> None:
    """Reading a session that does not exist returns nothing."""
    assert await store.read(sid()) == []


async def test_head_seq(store: Store) -> None:
    """head_seq is 0 for an empty or unknown log, else the last assigned seq."""
    s = await new_session(store)
    assert await store.head_seq(s) == 0
    assert await store.head_seq(sid()) == 0
    await store.append(s, [entry(), entry()])
    assert await store.head_seq(s) == 2


async def test_trimmed_before_without_retention(store: Store) -> None:
    """Without retention nothing is trimmed: trimmed_before is 1 (head+1 for an empty log)."""
    s = await new_session(store)
    assert await store.trimmed_before(s) == 1
    await store.append(s, [entry() for _ in range(5)])
    assert await store.trimmed_before(s) == 1
    assert await store.trimmed_before(sid()) == 1


async def test_retention_keeps_the_newest_entries(backend: Backend) -> None:
    """With retention N only the newest N entries stay; trimmed_before says where the log starts."""
    store = backend.open(retention=3)
    s, entries = await filled(store, 5)
    assert seqs(await store.read(s)) == [3, 4, 5]
    assert await store.trimmed_before(s) == 3
    assert await store.head_seq(s) == 5
    assert await store.message_seq(s, entries[4].message_id) == 5
    assert await store.append(s, [entry()]) == [AppendResult(seq=6)]
    assert seqs(await store.read(s)) == [4, 5, 6]
    assert seqs(await store.read(s, after_seq=1, limit=1)) == [4]
    assert seqs(await store.read(s, newest_first=True, before_seq=5)) == [4]
    assert await store.trimmed_before(s) == 4


async def test_retention_smaller_than_one_batch(backend: Backend) -> None:
    """A batch longer than the retention gets all its seqs; only its newest entries stay."""
    store = backend.open(retention=2)
    s = await new_session(store)
    got = await store.append(s, [entry() for _ in range(5)])
    assert [r.seq for r in got] == [1, 2, 3, 4, 5]
    assert seqs(await store.read(s)) == [4, 5]
    assert await store.trimmed_before(s) == 4


async def test_message_seq(store: Store) -> None:
    """message_seq finds a logged entry's seq; None for unknown ids and sessions."""
    s, entries = await filled(store, 3)
    assert await store.message_seq(s, entries[1].message_id) == 2
    assert await store.message_seq(s, "no-such-message") is None
    assert await store.message_seq(sid(), entries[1].message_id) is None


# --- welcome.received ------------------------------------------------------------------------


async def test_last_received_is_kept_per_sender(backend: Backend, store: Store) -> None:
    """last_received is the sender's last logged frame, or the frame its history reported;
    master entries, a history that kept none and a duplicate change nothing."""
    s = await new_session(store)
    assert await store.last_received(s, "p-client") is None
    await store.append(s, [entry("m1"), entry("m2"), entry("x", sender_id="p-edge")])
    assert await store.last_received(s, "p-client") == "m2"
    history = entry("h1", type="session.history")
    history.received_id = "inner-9"
    empty = entry("h2", type="session.history")
    empty.received_id = ""
    master = entry(sender_id="p-client", sender_role="master")
    await store.append(s, [history, master, empty])
    other = backend.reopen(store)
    assert await other.last_received(s, "p-client") == "inner-9"
    assert await other.last_received(s, "p-edge") == "x"
    await store.append(s, [entry("m1")])  # a duplicate changes nothing
    assert await other.last_received(s, "p-client") == "inner-9"
    assert await other.last_received(s, "p-nobody") is None
    assert await other.last_received(sid(), "p-client") is None


async def test_last_received_survives_a_restart(backend: Backend, store: Store) -> None:
    """What last_received reports outlives the process on the durable backends."""
    if not backend.durable:
        pytest.skip("the memory store lives in one process: nothing survives it, by design")
    s = await new_session(store)
    await store.append(s, [entry("m1"), entry("e1", sender_id="p-edge")])
    other = await backend.crash(store)
    assert await other.last_received(s, "p-client") == "m1"
    assert await other.last_received(s, "p-edge") == "e1"


async def test_last_received_outlives_retention(backend: Backend) -> None:
    """Once retention trimmed a sender's frames, last_received still names its last one."""
    store = backend.open(retention=2)
    s = await new_session(store)
    await store.append(s, [entry("c1"), entry("c2")])
    await store.append(s, [entry(sender_id="p-edge") for _ in range(3)])
    assert await store.trimmed_before(s) == 4
    assert await store.last_received(s, "p-client") == "c2"


async def test_last_received_goes_with_a_deleted_session(store: Store) -> None:
    """A session deleted and created again reports nothing received from anyone."""
    s = await new_session(store)
    await store.append(s, [entry("m1")])
    assert await store.delete_session(s)
    await store.create_session(header(s))
    assert await store.last_received(s, "p-client") is None


# --- sessions --------------------------------------------------------------------------------


async def test_create_session_is_idempotent(store: Store) -> None:
    """A second create of the same id returns the first header and created=False."""
    h = header()
    got, created = await store.create_session(h)
    assert created
    assert got == as_written(store, h)
    other = header(h.session_id, name="another name", epoch="other-epoch")
    again, created_again = await store.create_session(other)
    assert not created_again
    assert again.name == "a session"
    assert again.epoch == h.epoch


async def test_get_session_returns_the_header(store: Store) -> None:
    """get_session returns every header field as created; None for an unknown id."""
    parent = await new_session(store)
    h = header(parent_session_id=parent, seed_length=4, name="named", agent_id=None)
    await store.create_session(h)
    got = await store.get_session(h.session_id)
    assert got == as_written(store, h)
    assert got is not None
    assert got.format_version == store.format_version >= FORMAT_VERSION
    assert await store.get_session(sid()) is None


async def test_newer_format_version_is_refused_with_upgrade(store: Store) -> None:
    """A header written with a newer format_version is refused: 'upgrade', never 'corrupt'."""
    h = header(format_version=store.format_version + 1)
    await store.create_session(h)
    with pytest.raises(FormatVersionError) as info:
        await store.get_session(h.session_id)
    message = str(info.value).lower()
    assert "upgrade" in message
    assert "corrupt" not in message


async def test_list_sessions_pages_by_session_id(store: Store) -> None:
    """list_sessions pages a workspace's sessions in session_id order, after a cursor."""
    ids = sorted(f"s-{i:02d}-{uuid.uuid4().hex[:6]}" for i in range(5))
    for i in reversed(ids):
        await store.create_session(header(i, workspace="ws-list"))
    await store.create_session(header("s-00-other", workspace="ws-other"))
    page1 = await store.list_sessions("ws-list", limit=2)
    page2 = await store.list_sessions("ws-list", after=page1[-1].session_id, limit=2)
    page3 = await store.list_sessions("ws-list", after=page2[-1].session_id, limit=2)
    assert [h.session_id for h in page1 + page2 + page3] == ids
    assert len(page3) == 1
    assert await store.list_sessions("ws-list", after=ids[-1]) == []
    assert [h.session_id for h in await store.list_sessions("ws-other")] == ["s-00-other"]
    assert await store.list_sessions("ws-none") == []
    assert all(h.workspace == "ws-list" for h in page1 + page2 + page3)


async def test_list_revision_changes_with_log_and_header(store: Store) -> None:
    """The listed revision changes whenever the log or the header changes, and only then."""
    s = await new_session(store, workspace="ws-rev")

    async def revision() -> int:
        (h,) = await store.list_sessions("ws-rev")
        return h.revision

    r0 = await revision()
    assert await revision() == r0
    await store.append(s, [entry()])
    r1 = await revision()
    assert r1 != r0
    await store.rename_session(s, "renamed")
    r2 = await revision()
    assert r2 not in (r0, r1)
    got = await store.get_session(s)
    assert got is not None
    assert got.revision == r2


async def test_an_append_of_duplicates_only_leaves_the_revision(store: Store) -> None:
    """Re-sent entries change nothing, so the session's revision stays where it was."""
    s = await new_session(store)
    e = entry()
    await store.append(s, [e])

    async def revision() -> int:
        header = await store.get_session(s)
        assert header is not None
        return header.revision

    before = await revision()
    assert (await store.append(s, [entry(e.message_id)]))[0].duplicate
    assert await revision() == before


async def test_rename_session(store: Store) -> None:
    """rename changes the header's name (seen by get and list); unknown ids are ignored."""
    s = await new_session(store, workspace="ws-rename")
    await store.rename_session(s, "new name ✓")
    got = await store.get_session(s)
    assert got is not None
    assert got.name == "new name ✓"
    (listed,) = await store.list_sessions("ws-rename")
    assert listed.name == "new name ✓"
    await store.rename_session(sid(), "nobody")
    assert await store.get_session(sid()) is None


async def test_delete_removes_everything_and_leaves_a_tombstone(store: Store) -> None:
    """delete drops header, log, participants and deadlines, and is_deleted becomes true."""
    s, entries = await filled(store, 3)
    await store.put_participant(s, ParticipantRecord(participant_id="p-1", role="edge"))
    await store.set_deadline(Deadline(session_id=s, participant_id="p-1", due_ms=10))
    keep = await new_session(store)
    await store.set_deadline(Deadline(session_id=keep, participant_id="p-2", due_ms=10))
    assert not await store.is_deleted(s)
    assert await store.delete_session(s)
    assert await store.get_session(s) is None
    assert await store.is_deleted(s)
    assert await store.read(s) == []
    assert await store.head_seq(s) == 0
    assert await store.message_seq(s, entries[0].message_id) is None
    assert await store.list_participants(s) == []
    assert await store.get_participant(s, "p-1") is None
    assert [h.session_id for h in await store.list_sessions("ws-a")] == [keep]
    assert [d.session_id for d in await store.claim_due_deadlines(1_000)] == [keep]


async def test_delete_unknown_session(store: Store) -> None:
    """Deleting an unknown session returns False and leaves no tombstone."""
    s = sid()
    assert not await store.delete_session(s)
    assert not await store.is_deleted(s)


async def test_recreate_after_delete(store: Store) -> None:
    """A deleted id can be created again: a new, empty log, no tombstone."""
    s, _ = await filled(store, 3)
    await store.put_participant(s, ParticipantRecord(participant_id="p-1", role="edge"))
    await store.delete_session(s)
    h2 = header(s, name="second life")
    got, created = await store.create_session(h2)
    assert created
    assert got == as_written(store, h2)
    assert not await store.is_deleted(s)
    assert await store.head_seq(s) == 0
    assert await store.read(s) == []
    assert await store.list_participants(s) == []
    assert await store.append(s, [entry()]) == [AppendResult(seq=1)]


# --- fork ------------------------------------------------------------------------------------


async def test_fork_copies_the_prefix(store: Store) -> None:
    """fork copies entries 1..at_seq into a new session with the caller's header."""
    src, entries = await filled(store, 5)
    h = header(parent_session_id=src, seed_length=3, name="fork")
    assert await store.fork_session(src, h, 3)
    fork = h.session_id
    assert await store.get_session(fork) == as_written(store, h)
    assert await store.read(fork) == await store.read(src, before_seq=4)
    assert await store.head_seq(fork) == 3
    assert await store.message_seq(fork, entries[2].message_id) == 3
    assert await store.message_seq(fork, entries[3].message_id) is None
    # the copy is independent of the source: both go on from their own heads
    assert await store.append(fork, [entry(entries[3].message_id)]) == [AppendResult(seq=4)]
    assert await store.append(src, [entry()]) == [AppendResult(seq=6)]
    assert await store.head_seq(fork) == 4
    assert sorted(x.session_id for x in await store.list_sessions("ws-a")) == sorted([src, fork])


async def test_fork_of_a_long_log(store: Store) -> None:
    """fork copies a prefix of 1,500 entries exactly (backends may copy in chunks)."""
    src = await new_session(store)
    for _ in range(3):
        await store.append(src, [entry() for _ in range(600)])
    h = header(parent_session_id=src, seed_length=1_500)
    assert await store.fork_session(src, h, 1_500)
    assert await store.read(h.session_id) == await store.read(src, before_seq=1_501)


async def test_fork_beyond_head_copies_everything(store: Store) -> None:
    """at_seq past the head copies the whole log; at_seq 0 copies nothing."""
    src, _ = await filled(store, 4)
    h = header(parent_session_id=src, seed_length=4)
    assert await store.fork_session(src, h, 99)
    assert seqs(await store.read(h.session_id)) == [1, 2, 3, 4]
    empty = header(parent_session_id=src)
    assert await store.fork_session(src, empty, 0)
    assert await store.head_seq(empty.session_id) == 0
    assert await store.append(empty.session_id, [entry()]) == [AppendResult(seq=1)]


async def test_fork_refuses_unknown_source_or_existing_target(store: Store) -> None:
    """fork returns False when the source is missing or the new id exists, changing nothing."""
    src, _ = await filled(store, 2)
    taken = await new_session(store)
    await store.append(taken, [entry()])
    assert not await store.fork_session(sid(), header(), 1)
    assert not await store.fork_session(src, header(taken), 2)
    assert await store.head_seq(taken) == 1


# --- participants ----------------------------------------------------------------------------


async def test_participants_put_get_list_remove(store: Store) -> None:
    """Participant records are inserted, replaced, listed and removed per session (every
    field kept: a declined presence, too)."""
    s = await new_session(store)
    client = ParticipantRecord(participant_id="p-c", role="client", attached=True, node_id="n1")
    edge = ParticipantRecord(
        participant_id="p-e", role="edge", cursor=7, detached_at_ms=5, presence=False
    )
    await store.put_participant(s, client)
    await store.put_participant(s, edge)
    assert await store.get_participant(s, "p-e") == edge
    listed = sorted(await store.list_participants(s), key=lambda r: r.participant_id)
    assert listed == [client, edge]
    moved = ParticipantRecord(participant_id="p-e", role="edge", cursor=9, generation=2)
    await store.put_participant(s, moved)
    assert await store.get_participant(s, "p-e") == moved
    await store.remove_participant(s, "p-c")
    assert await store.get_participant(s, "p-c") is None
    assert await store.list_participants(s) == [moved]
    await store.remove_participant(s, "p-unknown")
    assert await store.get_participant(sid(), "p-e") is None


async def test_participant_of_unknown_session_is_not_kept(store: Store) -> None:
    """put_participant on a session that does not exist stores nothing."""
    s = sid()
    await store.put_participant(s, ParticipantRecord(participant_id="p-1", role="edge"))
    assert await store.get_participant(s, "p-1") is None
    assert await store.list_participants(s) == []


async def test_participant_and_received_reads_both(store: Store) -> None:
    """participant_and_received: the record and last_received of one participant together."""
    s = await new_session(store)
    assert await store.participant_and_received(s, "p-client") == (None, None)
    record = ParticipantRecord(participant_id="p-client", role="client", generation=3)
    await store.put_participant(s, record)
    assert await store.participant_and_received(s, "p-client") == (record, None)
    await store.append(s, [entry("m1"), entry("x", sender_id="p-edge")])
    assert await store.participant_and_received(s, "p-client") == (record, "m1")
    assert await store.participant_and_received(s, "p-edge") == (None, "x")


# --- deadlines -------------------------------------------------------------------------------


async def test_deadlines_are_claimed_when_due(store: Store) -> None:
    """claim_due_deadlines returns what is due by now (earliest first) and removes it."""
    s = await new_session(store)
    d1 = Deadline(session_id=s, participant_id="p-1", due_ms=100)
    d2 = Deadline(session_id=s, participant_id="p-2", due_ms=200)
    d3 = Deadline(session_id=s, participant_id="p-3", due_ms=300)
    for d in (d3, d1, d2):
        await store.set_deadline(d)
    assert await store.claim_due_deadlines(99) == []
    assert await store.claim_due_deadlines(100) == [d1]
    assert await store.claim_due_deadlines(250) == [d2]
    await store.clear_deadline(s, "p-3")
    await store.clear_deadline(s, "p-unknown")
    assert await store.claim_due_deadlines(10_000) == []


async def test_put_attached_stores_the_record_and_disarms_its_deadline(store: Store) -> None:
    """put_attached: the record is stored and that participant's deadline only is gone."""
    s = await new_session(store)
    await store.set_deadline(Deadline(session_id=s, participant_id="p-1", due_ms=100))
    other = Deadline(session_id=s, participant_id="p-2", due_ms=100)
    await store.set_deadline(other)
    record = ParticipantRecord(participant_id="p-1", role="edge", attached=True, generation=2)
    await store.put_attached(s, record)
    assert await store.get_participant(s, "p-1") == record
    assert await store.claim_due_deadlines(10_000) == [other]


async def test_put_detached_stores_the_record_and_arms_its_deadline(store: Store) -> None:
    """put_detached: the record is stored and that participant's deadline armed (moved)."""
    s = await new_session(store)
    await store.set_deadline(Deadline(session_id=s, participant_id="p-1", due_ms=900))
    record = ParticipantRecord(
        participant_id="p-1", role="edge", attached=False, generation=2, detached_at_ms=50
    )
    armed = Deadline(session_id=s, participant_id="p-1", due_ms=100)
    await store.put_detached(s, record, armed)
    assert await store.get_participant(s, "p-1") == record
    assert await store.claim_due_deadlines(200) == [armed]


async def test_a_deadline_put_detached_armed_goes_with_its_deleted_session(store: Store) -> None:
    """delete drops a deadline put_detached armed (and one put_attached disarmed stays gone)."""
    s = await new_session(store)
    detached = ParticipantRecord(participant_id="p-1", role="edge", detached_at_ms=50)
    await store.put_detached(s, detached, Deadline(session_id=s, participant_id="p-1", due_ms=100))
    await store.put_detached(
        s,
        ParticipantRecord(participant_id="p-2", role="edge", detached_at_ms=50),
        Deadline(session_id=s, participant_id="p-2", due_ms=100),
    )
    await store.put_attached(s, ParticipantRecord(participant_id="p-2", role="edge", attached=True))
    assert await store.delete_session(s)
    assert await store.claim_due_deadlines(10_000) == []


async def test_set_deadline_moves_it(store: Store) -> None:
    """Setting a participant's deadline again replaces the earlier one."""
    s = await new_session(store)
    await store.set_deadline(Deadline(session_id=s, participant_id="p-1", due_ms=100))
    await store.set_deadline(Deadline(session_id=s, participant_id="p-1", due_ms=500))
    assert await store.claim_due_deadlines(200) == []
    assert await store.claim_due_deadlines(600) == [
        Deadline(session_id=s, participant_id="p-1", due_ms=500)
    ]


async def test_claim_respects_limit_and_order(store: Store) -> None:
    """claim takes at most ``limit`` deadlines, the earliest first."""
    s = await new_session(store)
    all_ = [Deadline(session_id=s, participant_id=f"p-{i}", due_ms=1_000 - i) for i in range(5)]
    for d in all_:
        await store.set_deadline(d)
    first = await store.claim_due_deadlines(5_000, limit=2)
    assert [d.due_ms for d in first] == [996, 997]
    rest = await store.claim_due_deadlines(5_000, limit=10)
    assert [d.due_ms for d in rest] == [998, 999, 1_000]


async def test_moved_and_cleared_deadlines_are_claimed_once_at_their_last_due(
    store: Store,
) -> None:
    """After many moves and clears, a claim returns each live deadline once, at its last due."""
    s = await new_session(store)
    for round_ in range(5):
        for i in range(60):
            due = 10_000 + 100 * i - round_
            await store.set_deadline(Deadline(session_id=s, participant_id=f"p-{i}", due_ms=due))
    for i in range(0, 60, 3):
        await store.clear_deadline(s, f"p-{i}")
    assert await store.claim_due_deadlines(9_000) == []
    got = await store.claim_due_deadlines(20_000, limit=1_000)
    expected = [10_000 + 100 * i - 4 for i in range(60) if i % 3]
    assert [d.due_ms for d in got] == expected
    assert [d.participant_id for d in got] == [f"p-{i}" for i in range(60) if i % 3]
    assert await store.claim_due_deadlines(20_000, limit=1_000) == []


async def test_each_deadline_goes_to_exactly_one_claimer(backend: Backend, store: Store) -> None:
    """Concurrent claimers (separate connections) split the due deadlines with no overlap."""
    sessions = [await new_session(store) for _ in range(4)]
    want = {
        Deadline(session_id=s, participant_id=f"p-{i}", due_ms=1_000 + i)
        for s in sessions
        for i in range(50)
    }
    for d in want:
        await store.set_deadline(d)
    claimers = [backend.reopen(store) for _ in range(8)]

    async def claim_all(c: Store) -> list[Deadline]:
        got: list[Deadline] = []
        while batch := await c.claim_due_deadlines(10_000, limit=7):
            got += batch
            await asyncio.sleep(0)
        return got

    results = await asyncio.gather(*(claim_all(c) for c in claimers))
    claimed = [d for r in results for d in r]
    assert len(claimed) == len(want)
    assert set(claimed) == want


# --- credentials and health ------------------------------------------------------------------


async def test_credentials_put_get(store: Store) -> None:
    """Credentials are stored and found by digest; a put replaces; unknown digests are None."""
    key = Credential(digest="a" * 64, kind="key", workspace="ws-a", created_at_ms=17)
    token = Credential(
        digest="b" * 64,
        kind="token",
        workspace="ws-a",
        session_id="s-1",
        grants=["edge", "client"],
        expires_at_ms=99,
    )
    await store.put_credential(key)
    await store.put_credential(token)
    assert await store.get_credential("a" * 64) == key
    assert await store.get_credential("b" * 64) == token
    assert await store.get_credential("c" * 64) is None
    revoked = Credential(digest="b" * 64, kind="token", workspace="ws-a", revoked=True)
    await store.put_credential(revoked)
    assert await store.get_credential("b" * 64) == revoked


async def test_ping(store: Store) -> None:
    """ping is true while the backend answers."""
    assert await store.ping()


# --- archived sessions (notes §16.1) ---------------------------------------------------------


async def archive(store: Store, session_id: str, ended_at_ms: int = 1_000) -> bool:
    """Archive a session as an expiry would."""
    return await store.archive_session(
        session_id,
        ended_at="2026-11-29T10:00:00.000Z",
        ended_at_ms=ended_at_ms,
        reason="timeout",
        deleted_by="system",
    )


async def test_archive_keeps_header_and_log_and_drops_participants(store: Store) -> None:
    """An archived session keeps its header (now ended) and its log; participants and
    deadlines go, and the revision changes."""
    s = await new_session(store)
    await store.append(s, [entry(), entry()])
    await store.put_participant(s, ParticipantRecord(participant_id="p-1", role="client"))
    await store.set_deadline(Deadline(session_id=s, participant_id="p-1", due_ms=5))
    before = await store.get_session(s)
    assert before is not None
    assert not before.archived
    revision = before.revision  # (memory hands out its own header object)
    assert await archive(store, s)
    after = await store.get_session(s)
    assert after is not None
    assert after.archived
    assert (after.ended_at, after.ended_at_ms) == ("2026-11-29T10:00:00.000Z", 1_000)
    assert (after.reason, after.deleted_by) == ("timeout", "system")
    assert after.revision != revision
    assert seqs(await store.read(s)) == [1, 2]
    assert await store.list_participants(s) == []
    assert await store.claim_due_deadlines(10) == []
    assert not await store.is_deleted(s)
    listed = await store.list_sessions("ws-a")
    assert [h.session_id for h in listed] == [s]
    assert listed[0].archived


async def test_archive_of_unknown_session_is_false(store: Store) -> None:
    """Archiving a session that does not exist changes nothing."""
    assert not await archive(store, sid())
    assert await store.archived_before(10**15) == []


async def test_archived_before_lists_expired_archives_oldest_first(store: Store) -> None:
    """archived_before names archives that ended before the cutoff, oldest first, limited."""
    late, early, live = await new_session(store), await new_session(store), await new_session(store)
    await archive(store, late, ended_at_ms=2_000)
    await archive(store, early, ended_at_ms=1_000)
    assert await store.archived_before(3_000) == [early, late]
    assert await store.archived_before(2_000) == [early]
    assert await store.archived_before(3_000, limit=1) == [early]
    assert live not in await store.archived_before(10**15)


async def test_delete_purges_an_archived_session(store: Store) -> None:
    """Deleting an archived session removes it for good and from the archive listing."""
    s = await new_session(store)
    await store.append(s, [entry()])
    await archive(store, s)
    assert await store.delete_session(s)
    assert await store.get_session(s) is None
    assert await store.read(s) == []
    assert await store.archived_before(10**15) == []
