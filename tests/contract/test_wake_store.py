"""The wake records' contract (notes §17.5), on every backend: put, reschedule, cancel, an
atomic claim under a lease, settle only by the claim's holder, seen, listing, and the end of
a session dropping its records."""

from __future__ import annotations

import asyncio
import uuid

import msgspec

from relay.store.base import Store, WakeRecord
from tests.contract.conftest import Backend
from tests.contract.test_store_contract import header

__all__: list[str] = []


def wake(
    session_id: str, revisit_id: str = "r1", *, due_ms: int = 1000, **kw: object
) -> WakeRecord:
    """A pending record of a fresh request."""
    request_id = uuid.uuid4().hex
    fields: dict[str, object] = {
        "session_id": session_id,
        "wake_id": f"wake:{revisit_id}:{request_id[:16]}",
        "revisit_id": revisit_id,
        "request_id": request_id,
        "workspace": "ws-a",
        "at": "2026-12-08T01:00:00Z",
        "at_ms": due_ms,
        "reason": "check CI ✓",
        "due_ms": due_ms,
    }
    fields.update(kw)
    return WakeRecord(**fields)  # type: ignore[arg-type]


async def session(store: Store) -> str:
    """A new session's id."""
    h = header()
    await store.create_session(h)
    return h.session_id


async def test_a_due_record_is_claimed_once_per_lease(store: Store) -> None:
    """Claims by several callers at once share no record; after the lease it is due again."""
    s = await session(store)
    await store.put_wake(wake(s, "r1", due_ms=1000))
    await store.put_wake(wake(s, "r2", due_ms=5000))
    claims = await asyncio.gather(*(store.claim_due_wakes(2000, 1000) for _ in range(5)))
    got = [r for claim in claims for r in claim]
    assert [r.revisit_id for r in got] == ["r1"]
    assert got[0].claim is not None
    assert got[0].due_ms == 3000
    assert got[0].reason == "check CI ✓"
    assert await store.claim_due_wakes(2999, 1000) == []
    again = await store.claim_due_wakes(3000, 1000)
    assert [r.revisit_id for r in again] == ["r1"]
    assert again[0].claim != got[0].claim


async def test_claims_go_in_due_order_and_follow_every_move(store: Store) -> None:
    """Many due records are claimed earliest first, ``limit`` at a time; a record settled to a
    later time, rescheduled, cancelled or of an ended session is claimed only as it now is."""
    s, gone = await session(store), await session(store)
    for i in range(30):
        await store.put_wake(wake(s, f"r{i:02}", due_ms=1000 + 10 * (29 - i)))
    await store.put_wake(wake(gone, "rg", due_ms=500))
    await store.delete_session(gone)
    await store.put_wake(wake(s, "r00", due_ms=8000))  # rescheduled later
    await store.cancel_wake(s, "r01")
    first = await store.claim_due_wakes(2000, 100_000, 10)
    assert [r.revisit_id for r in first] == [f"r{i:02}" for i in range(29, 19, -1)]
    retry = msgspec.structs.replace(first[0], due_ms=5000)  # could not take it now: at 5000
    assert first[0].claim is not None
    assert await store.settle_wake(retry, first[0].claim)
    rest = await store.claim_due_wakes(2000, 100_000, 100)
    assert [r.revisit_id for r in rest] == [f"r{i:02}" for i in range(19, 1, -1)]
    assert await store.claim_due_wakes(4999, 100_000, 100) == []
    assert [r.revisit_id for r in await store.claim_due_wakes(5000, 100_000, 100)] == ["r29"]
    assert [r.revisit_id for r in await store.claim_due_wakes(8000, 100_000, 100)] == ["r00"]


async def test_only_the_claims_holder_settles(store: Store) -> None:
    """A settle naming a claim that is no longer the record's changes nothing."""
    s = await session(store)
    await store.put_wake(wake(s, due_ms=1000))
    (first,) = await store.claim_due_wakes(1000, 10)
    (second,) = await store.claim_due_wakes(1010, 10)  # the first lease ran out
    assert first.claim is not None
    assert second.claim is not None
    done = msgspec.structs.replace(first, state="due", wake_seq=7, due_ms=None)
    assert not await store.settle_wake(done, first.claim)
    assert await store.settle_wake(
        msgspec.structs.replace(second, state="due", wake_seq=7), second.claim
    )
    stored = await store.get_wake(s, first.wake_id)
    assert stored is not None
    assert (stored.state, stored.wake_seq, stored.claim, stored.due_ms) == ("due", 7, None, None)
    assert await store.claim_due_wakes(10**13, 10) == []  # nothing left to do for it


async def test_a_reschedule_replaces_and_a_cancel_drops_the_pending_record(store: Store) -> None:
    """put_wake replaces the revisit's pending record; cancel_wake drops it; others stay."""
    s = await session(store)
    old = wake(s, "r1", due_ms=1000)
    await store.put_wake(old)
    new = wake(s, "r1", due_ms=9000)
    await store.put_wake(new)
    await store.put_wake(wake(s, "r2", due_ms=9000))
    assert await store.get_wake(s, old.wake_id) is None
    listed = await store.list_wakes("ws-a", due_only=False, after=None, limit=10)
    assert sorted(r.revisit_id for r in listed) == ["r1", "r2"]
    await store.cancel_wake(s, "r1")
    await store.cancel_wake(s, "unknown")
    listed = await store.list_wakes("ws-a", due_only=False, after=None, limit=10)
    assert [r.revisit_id for r in listed] == ["r2"]


async def test_seen_makes_due_records_done_and_keeps_a_pending_webhook(store: Store) -> None:
    """wakes_seen returns the due records; those without a pending webhook go, the others stay
    for their webhook (not listed due any more), and a later settle keeps them done."""
    s = await session(store)
    plain, hooked = wake(s, "r1"), wake(s, "r2")
    for record in (plain, hooked):
        await store.put_wake(record)
    claimed = {r.revisit_id: r for r in await store.claim_due_wakes(1000, 100)}
    for rid, webhook in (("r1", None), ("r2", "pending")):
        r = claimed[rid]
        assert r.claim is not None
        due = msgspec.structs.replace(r, state="due", wake_seq=3, webhook=webhook, due_ms=1000)
        assert await store.settle_wake(due, r.claim)
    assert len(await store.list_wakes("ws-a", due_only=True, after=None, limit=10)) == 2
    (posting,) = await store.claim_due_wakes(2000, 100)  # the webhook attempt
    seen = await store.wakes_seen(s)
    assert sorted(r.revisit_id for r in seen) == ["r1", "r2"]
    assert all(r.state == "due" for r in seen)
    assert await store.wakes_seen(s) == []
    assert await store.list_wakes("ws-a", due_only=True, after=None, limit=10) == []
    assert await store.get_wake(s, plain.wake_id) is None
    assert posting.claim is not None
    sent = msgspec.structs.replace(posting, webhook="sent", attempts=1, due_ms=None)
    assert await store.settle_wake(sent, posting.claim)
    assert await store.get_wake(s, hooked.wake_id) is None  # done, webhook sent: gone


async def test_listing_pages_by_session_and_wake(store: Store) -> None:
    """list_wakes pages in (session_id, wake_id) order from a cursor, one workspace only."""
    ids = sorted([await session(store) for _ in range(3)])
    for s in ids:
        await store.put_wake(wake(s, "r1"))
        await store.put_wake(wake(s, "r2"))
    await store.put_wake(wake(ids[0], "other", workspace="ws-b"))
    seen: list[tuple[str, str]] = []
    after = None
    while True:
        page = await store.list_wakes("ws-a", due_only=False, after=after, limit=4)
        seen += [(r.session_id, r.wake_id) for r in page]
        if len(page) < 4:
            break
        after = seen[-1]
    assert len(seen) == 6
    assert seen == sorted(seen)


async def test_the_end_of_a_session_drops_its_records(store: Store) -> None:
    """Deleting or archiving a session removes its wake records."""
    deleted, archived = await session(store), await session(store)
    for s in (deleted, archived):
        await store.put_wake(wake(s))
    await store.delete_session(deleted)
    await store.archive_session(
        archived,
        ended_at="2026-12-08T01:00:00Z",
        ended_at_ms=1,
        reason="timeout",
        deleted_by="system",
    )
    assert await store.list_wakes("ws-a", due_only=False, after=None, limit=10) == []
    assert await store.claim_due_wakes(10**13, 10) == []


async def test_claims_survive_and_release_takes_them_back(backend: Backend, store: Store) -> None:
    """A claimed record is still there after a crash (durable stores); release_wake_claims
    makes it due at once."""
    s = await session(store)
    await store.put_wake(wake(s, due_ms=1000))
    assert len(await store.claim_due_wakes(1000, 10**9)) == 1
    if backend.durable:
        store = await backend.crash(store)
    else:
        return
    assert await store.claim_due_wakes(2000, 10) == []  # still under the dead claim's lease
    await store.release_wake_claims()
    assert len(await store.claim_due_wakes(2000, 10)) == 1
