"""A store failure of any kind is answered to the sender and never stops the session's worker."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from protocol.errors import FormatVersionError, StoreError, StoreUnavailableError
from relay.server import Master
from relay.store.base import AppendResult, NewEntry
from tests.e2e.conftest import API_KEY
from tests.e2e.conftest import test_settings as settings_for
from tests.support.wire import Peer

__all__: list[str] = []


@pytest.fixture
async def master() -> AsyncIterator[Master]:
    """A master on the memory store (the session worker is the same for every store)."""
    started = Master(settings_for())
    await started.start()
    yield started
    await started.stop()


@pytest.mark.parametrize(
    ("failure", "code"),
    [
        (StoreUnavailableError("redis unreachable"), "store_unavailable"),
        (StoreError("redis error: WRONGTYPE"), "store_unavailable"),
        (FormatVersionError("written by a newer build; upgrade"), "version_unsupported"),
        (KeyError("s-faults"), "not_allowed"),
    ],
)
async def test_a_refused_append_is_answered_and_the_session_goes_on(
    master: Master, monkeypatch: pytest.MonkeyPatch, failure: BaseException, code: str
) -> None:
    """The sender gets a non-fatal session.error naming the frame; the next frame flows."""
    sid = "s-faults"
    client = await Peer.open(master.ws_url, sid, token=API_KEY, create=True)
    edge = await Peer.open(master.ws_url, sid, role="edge", token=API_KEY)
    await client.recv()  # the edge's presence
    real = master.store.append
    failures = [failure]

    async def flaky(session_id: str, entries: Sequence[NewEntry]) -> list[AppendResult]:
        if failures and entries[0].sender_role == "client":
            raise failures.pop()
        return await real(session_id, entries)

    monkeypatch.setattr(master.store, "append", flaky)
    refused = await client.send("agent.state", {"state": "thinking"})
    error: dict[str, Any] = await client.recv()
    assert error["type"] == "session.error"
    assert error["payload"]["error_code"] == code
    assert error["payload"]["fatal"] is False
    assert refused["message_id"] in error["payload"]["message"]
    accepted = await client.send("agent.state", {"state": "responding"})
    got = await edge.recv()
    assert got["message_id"] == accepted["message_id"]
    assert refused["message_id"] not in [e.message_id for e in await master.store.read(sid)]
