"""The memory store: appends applied at once (unless replaced, for faults); copies handed out."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from relay.hub import new_session_header
from relay.store.base import AppendResult, NewEntry, ParticipantRecord
from relay.store.memory import MemoryStore

__all__: list[str] = []


def _entry(message_id: str) -> NewEntry:
    return NewEntry(
        message_id=message_id,
        type="agent.text.delta",
        head=b'{"seq":',
        tail=b"}",
        sender_id="p-1",
        sender_role="client",
    )


async def _store() -> MemoryStore:
    store = MemoryStore()
    await store.create_session(new_session_header("s-mem", "default", name=""))
    return store


async def test_an_append_is_applied_before_append_nowait_returns() -> None:
    """No task per append: the future is done and the entry readable at once."""
    store = await _store()
    future = store.append_nowait("s-mem", [_entry("m-1")])
    assert future.done()
    assert [r.seq for r in future.result()] == [1]
    assert [e.message_id for e in await store.read("s-mem")] == ["m-1"]


async def test_an_append_behind_a_failed_one_fails_unapplied() -> None:
    """Chained behind a refused append, the next is refused too and nothing is logged."""
    store = await _store()
    failed = store.append_nowait("s-none", [_entry("m-1")])  # no such session
    later = store.append_nowait("s-mem", [_entry("m-2")], after=failed)
    with pytest.raises(Exception, match="append before it failed"):
        await later
    with pytest.raises(Exception, match="s-none"):
        await failed
    assert await store.read("s-mem") == []


@pytest.mark.parametrize("where", ["instance", "class"])
async def test_a_replaced_append_is_the_one_called(
    monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Fault injection replaces append on the instance or the class: append_nowait calls it."""
    store = await _store()
    calls: list[str] = []

    async def refused(*args: object) -> list[AppendResult]:
        entries: Sequence[NewEntry] = args[-1]  # type: ignore[assignment]
        calls.extend(e.message_id for e in entries)
        raise ConnectionError("store unreachable")

    if where == "instance":
        monkeypatch.setattr(store, "append", refused)
    else:
        monkeypatch.setattr(MemoryStore, "append", refused)
    with pytest.raises(ConnectionError):
        await store.append_nowait("s-mem", [_entry("m-1")])
    assert calls == ["m-1"]
    assert await store.read("s-mem") == []


async def test_a_header_it_hands_out_is_a_copy() -> None:
    """Changing a header the store handed out (as a session does before writing) changes
    nothing stored until it is written: the store says what was written, like a database."""
    store = MemoryStore()
    created, _ = await store.create_session(new_session_header("s-copy", "default", name="a"))
    created.name = "unwritten"
    got = await store.get_session("s-copy")
    assert got is not None
    assert got.name == "a"
    got.name = "unwritten too"
    listed = await store.list_sessions("default")
    assert [h.name for h in listed] == ["a"]
    listed[0].name = "still unwritten"
    await store.rename_session("s-copy", "b")
    again = await store.get_session("s-copy")
    assert again is not None
    assert again.name == "b"


async def test_a_participant_record_goes_in_and_out_as_a_copy() -> None:
    """Changing a record after a write, or one read back, changes nothing stored (as a
    serializing store): a write that failed leaves the store as it was."""
    store = await _store()
    record = ParticipantRecord(participant_id="p-1", role="edge", attached=True)
    await store.put_participant("s-mem", record)
    record.attached = False
    read = await store.get_participant("s-mem", "p-1")
    assert read is not None
    assert read.attached is True
    read.cursor = 7
    listed = await store.list_participants("s-mem")
    assert [(r.attached, r.cursor) for r in listed] == [(True, 0)]
    listed[0].generation = 3
    again = await store.get_participant("s-mem", "p-1")
    assert again is not None
    assert again.generation == 0
