"""The memory store: appends applied at once (unless replaced, for faults); headers copied."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from relay.hub import new_session_header
from relay.store.base import AppendResult, NewEntry
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
