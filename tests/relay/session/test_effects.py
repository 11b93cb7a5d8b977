"""The effects of committed entries, applied in one place whoever committed them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from protocol import codec
from protocol.frames import Frame, Sender
from protocol.state import SessionState
from relay.config import Settings
from relay.coordination import SoleNode
from relay.hub import new_session_header
from relay.metrics import Metrics
from relay.session import Session, SessionDeps
from relay.store.base import LogEntry
from relay.store.memory import MemoryStore
from tests.protocol import strategies as S

__all__: list[str] = []

NODE = "n-here"
OTHER = "n-other"


class RecordingNode(SoleNode):
    """One node's coordinator that records the sessions another node ended."""

    def __init__(self) -> None:
        super().__init__(NODE, lambda session: None)
        self.ended: list[Any] = []

    def ended_elsewhere(self, session: object) -> None:
        """Record ``session``."""
        self.ended.append(session)


async def _made(store: MemoryStore, node: RecordingNode) -> Session:
    header = new_session_header(S.SESSION_ID, "default")
    header.name = "before"
    await store.start()
    await store.create_session(header)
    deps = SessionDeps(
        settings=Settings(node_id=NODE),
        store=store,
        metrics=Metrics(),
        master_sender=Sender(role="master", participant_id=NODE),
        coordinator=node,
        new_lock=asyncio.Lock,
        forget=lambda session: None,
    )
    return Session(deps, header, SessionState(), 0)


def _entry(seq: int, frame: Frame, sender_id: str, role: str) -> LogEntry:
    return LogEntry(
        seq=seq,
        message_id=frame.message_id,
        type=frame.type,
        data=codec.encode(frame),
        sender_id=sender_id,
        sender_role=role,
    )


async def test_another_nodes_rename_renames_here_and_its_owner_writes_the_header(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another node's rename, live or inside a history, changes the name here, not the store."""
    store = MemoryStore()
    session = await _made(store, RecordingNode())
    writes: list[str] = []

    async def rename_session(session_id: str, name: str) -> None:
        writes.append(name)

    monkeypatch.setattr(store, "rename_session", rename_session)
    async with session.lock:
        await session.receive(_entry(1, S.renamed("live", "edge"), "p-edge", "edge"))
    assert session.header.name == "live"
    buffered = S.history([S.renamed("buffered", "client")])
    async with session.lock:
        await session.receive(_entry(2, buffered, "p-client", "client"))
    assert session.header.name == "buffered"
    assert session.seen(codec.decode(buffered.payload.frames[0]).message_id)  # logged once
    assert writes == []  # the owner node writes it


async def test_another_nodes_end_ends_the_session_here_and_our_own_does_not() -> None:
    """The master's session.deleted of another node ends the session on this node too; one
    this node's master logged is its own termination's, read back."""
    node = RecordingNode()
    session = await _made(MemoryStore(), node)
    async with session.lock:
        await session.receive(_entry(1, S.deleted(), NODE, "master"))
    assert node.ended == []
    other = await _made(MemoryStore(), node)
    async with other.lock:
        await other.receive(_entry(1, S.deleted(), OTHER, "master"))
    assert node.ended == [other]


async def test_a_master_rename_this_node_logs_writes_the_header() -> None:
    """The owner of a rename writes the header's name, whoever asked for it (here the master)."""
    store = MemoryStore()
    session = await _made(store, RecordingNode())
    async with session.lock:
        assert await session.append_master([S.renamed("by-master", "master")])
    header = await store.get_session(session.id)
    assert header is not None
    assert header.name == "by-master"
    assert session.header.name == "by-master"
