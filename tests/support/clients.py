"""Helpers for tests of the client library against in-process masters on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from protocol import codec
from protocol.client import Backoff
from protocol.frames import Frame, GenericFrame, History
from protocol.state import SenderRole
from protocol.view import SessionView
from relay.server import Master
from relay.store.base import LogEntry
from relay.store.memory import MemoryStore
from tests.e2e.conftest import test_settings as master_settings

__all__ = [
    "FAST",
    "KeptStore",
    "client_frame_ids",
    "log_frames",
    "replayed_view",
    "start_master",
    "wait_until",
]

FAST = Backoff(initial=0.02, maximum=0.2)
"""Reconnect quickly in tests (still exponential with full jitter)."""


class KeptStore(MemoryStore):
    """A memory store that outlives the master using it (``close`` keeps the data)."""

    async def close(self) -> None:
        return None


async def start_master(store: MemoryStore | None = None, **changes: Any) -> Master:
    """A started master with the e2e test settings (and ``store``, if given)."""
    master = Master(master_settings(**changes), store=store)
    await master.start()
    return master


async def wait_until(
    condition: Callable[[], bool] | Callable[[], Awaitable[bool]],
    *,
    within: float = 10.0,
    what: str = "condition",
) -> None:
    """Poll ``condition`` until it holds; fail with ``what`` after ``within`` seconds."""
    async with asyncio.timeout(within):
        while True:
            result = condition()
            if not isinstance(result, bool):
                result = await result
            if result:
                return
            await asyncio.sleep(0.01)
    raise AssertionError(what)  # pragma: no cover - the timeout raises first


def log_frames(entries: list[LogEntry]) -> list[tuple[Frame | GenericFrame, SenderRole]]:
    """The log's frames, decoded, with the role that sent each."""
    return [(codec.decode(e.data), e.sender_role) for e in entries]  # type: ignore[misc]


def client_frame_ids(entries: list[LogEntry]) -> list[str]:
    """Message ids of every client frame in the log, in log order, histories opened."""
    ids: list[str] = []
    for entry in entries:
        if entry.sender_role != "client":
            continue
        frame = codec.decode(entry.data)
        if isinstance(frame, History):
            ids.extend(codec.decode(raw).message_id for raw in frame.payload.frames)
        else:
            ids.append(frame.message_id)
    return ids


def replayed_view(session_id: str, entries: list[LogEntry]) -> SessionView:
    """A fresh view that folded the whole log from seq 1."""
    return SessionView.replay(session_id, log_frames(entries))
