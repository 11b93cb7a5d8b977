"""A session made from the dependencies it is handed, with no hub: the public API."""

from __future__ import annotations

import asyncio
from typing import Any

import relay.session
from protocol.frames import PresenceChange, Sender
from protocol.state import SessionState
from relay.config import Settings
from relay.coordination import SoleNode
from relay.hub import new_session_header
from relay.metrics import Metrics
from relay.session import Session, SessionDeps, builders
from relay.store.memory import MemoryStore


def _deps(store: MemoryStore, forgotten: list[Any]) -> SessionDeps:
    return SessionDeps(
        settings=Settings(node_id="n-test"),
        store=store,
        metrics=Metrics(),
        master_sender=Sender(role="master", participant_id="n-test"),
        coordinator=SoleNode("n-test", forgotten.append),
        new_lock=asyncio.Lock,
        forget=forgotten.append,
    )


async def _made(store: MemoryStore, forgotten: list[Any]) -> Session:
    header = new_session_header("s-unit", "default")
    await store.start()
    await store.create_session(header)
    return Session(_deps(store, forgotten), header, SessionState(), 0)


def test_the_public_names_are_importable() -> None:
    """Everything in ``relay.session.__all__`` is there."""
    for name in relay.session.__all__:
        assert getattr(relay.session, name) is not None


async def test_master_frames_are_logged_and_head_follows() -> None:
    """append_master folds, logs and advances the head, with only the handed-in store."""
    store = MemoryStore()
    session = await _made(store, [])
    change = PresenceChange(participant_id="p-1", role="edge", state="attached")
    async with session.lock:
        assert await session.append_master([builders.presence(session.id, [change])])
    assert session.head == 1
    assert [e.type for e in await store.read(session.id)] == ["session.presence"]


async def test_terminate_logs_the_end_and_forgets_the_session() -> None:
    """terminate logs session.deleted last and hands the session to ``forget``."""
    store = MemoryStore()
    forgotten: list[Any] = []
    session = await _made(store, forgotten)
    await session.terminate("master_request", "master")
    assert session.terminated
    assert session.ended.is_set()
    assert forgotten == [session]
    assert await store.get_session(session.id) is None  # a deletion purges
