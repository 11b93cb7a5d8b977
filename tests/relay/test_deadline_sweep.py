"""Reattach windows that end together end in one sweep (notes §17.1): the deadline loop claims
batch after batch while batches come back full, with a bounded number of expiries running at
once; the memory store drops an ended session's deadlines without touching anyone else's."""

from __future__ import annotations

import asyncio
import time

from relay.hub import _EXPIRING_AT_ONCE
from relay.server import Master
from relay.store.base import Deadline, SessionHeader
from relay.store.memory import MemoryStore
from tests.e2e.conftest import test_settings as settings_for

WINDOWS = 5 * _EXPIRING_AT_ONCE + 7  # several claim batches and several rounds of expiries


async def test_one_sweep_ends_every_window_due_at_once() -> None:
    """Deadlines far more than one batch, all due: one sweep claims every one of them,
    never running more expiries at once than its bound."""
    master = Master(settings_for(reattach_window_s=3600.0))
    await master.start()
    try:
        hub, store = master.hub, master.store
        past = int(time.time() * 1000) - 1000
        for i in range(WINDOWS):
            await store.set_deadline(
                Deadline(session_id=f"s-gone-{i}", participant_id="p", due_ms=past)
            )
        most = 0

        async def watch() -> None:
            nonlocal most
            while True:
                most = max(most, len(hub._expiring))
                await asyncio.sleep(0)

        watcher = asyncio.get_running_loop().create_task(watch())
        await hub._sweep()
        watcher.cancel()
        assert await store.claim_due_deadlines(int(time.time() * 1000), WINDOWS) == []
        assert 0 < most <= _EXPIRING_AT_ONCE
    finally:
        await master.stop()


async def test_ending_a_session_drops_its_deadlines_only() -> None:
    """Archiving or deleting a session in the memory store disarms its participants'
    deadlines and leaves every other session's armed."""
    store = MemoryStore()
    for sid in ("s-a", "s-b", "s-c"):
        header = SessionHeader(
            session_id=sid, workspace="default", created_at="2026-12-08T00:00:00Z", epoch="e1"
        )
        await store.create_session(header)
    for sid, pid in (("s-a", "p1"), ("s-a", "p2"), ("s-b", "p1"), ("s-c", "p1")):
        await store.set_deadline(Deadline(session_id=sid, participant_id=pid, due_ms=1))
    await store.archive_session(
        "s-a", ended_at="2026-12-08T00:00:00Z", ended_at_ms=1, reason="timeout", deleted_by="system"
    )
    await store.delete_session("s-b")
    await store.clear_deadline("s-c", "p1")
    await store.set_deadline(Deadline(session_id="s-c", participant_id="p1", due_ms=2))
    due = await store.claim_due_deadlines(10, 100)
    assert [(d.session_id, d.participant_id, d.due_ms) for d in due] == [("s-c", "p1", 2)]
