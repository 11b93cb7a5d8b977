"""An attach the store cannot record attaches nothing (relay/session/attach.py, relay/ws.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from protocol.errors import CloseCode, StoreUnavailableError
from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.support.wire import Peer


def _fail_put_attached_once(master: Master) -> list[str]:
    """Make the store refuse the next attach's record write; returns the ids it refused."""
    store = master.hub.store
    real: Callable[..., Any] = store.put_attached
    refused: list[str] = []

    async def once(session_id: str, record: Any) -> None:
        store.put_attached = real  # type: ignore[method-assign]
        refused.append(record.participant_id)
        raise StoreUnavailableError("the store is down for this test")

    store.put_attached = once  # type: ignore[method-assign]
    return refused


async def test_an_edge_whose_record_cannot_be_written_closes_1013_and_leaves_no_ghost(
    master: Master,
) -> None:
    """1013 (try again later), no participant left in the session; the retry attaches."""
    client = await Peer.open(master.ws_url, "s-outage", token=API_KEY, create=True)
    refused = _fail_put_attached_once(master)
    edge = await Peer.open(
        master.ws_url, "s-outage", role="edge", token=API_KEY, expect_welcome=False
    )
    assert await edge.closed_with(5.0) == CloseCode.TRY_AGAIN_LATER
    session = master.hub.sessions["s-outage"]
    assert refused
    assert refused[0] not in session.participants
    assert list(session.participants) == [client.participant_id]
    again = await Peer.open(master.ws_url, "s-outage", role="edge", token=API_KEY)
    presence = await client.recv_type("session.presence")
    assert presence["payload"]["participant_id"] == again.participant_id  # the ghost never was
    assert sorted(session.participants) == sorted([client.participant_id, again.participant_id])
    await again.close()
    await client.close()


async def test_a_client_whose_record_cannot_be_written_leaves_the_session_clientless(
    master: Master,
) -> None:
    """The session does not keep the refused client as its client: the retry attaches."""
    refused = _fail_put_attached_once(master)
    client = await Peer.open(
        master.ws_url, "s-outage-c", token=API_KEY, create=True, expect_welcome=False
    )
    assert await client.closed_with(5.0) == CloseCode.TRY_AGAIN_LATER
    session = master.hub.sessions["s-outage-c"]
    assert session.client_id is None
    assert not session.participants
    again = await Peer.open(master.ws_url, "s-outage-c", token=API_KEY)
    assert again.participant_id != refused[0]
    assert session.client_id == again.participant_id
    await again.close()


async def _detached(master: Master, session_id: str, participant_id: str) -> None:
    """Until the session no longer holds ``participant_id`` attached."""
    async with asyncio.timeout(5.0):
        while participant_id in master.hub.sessions[session_id].participants:
            await asyncio.sleep(0.005)


async def test_a_takeover_does_not_repeat_what_the_superseded_socket_was_sent(
    master: Master,
) -> None:
    """The backlog after a takeover starts where the older connection's writes stopped."""
    client = await Peer.open(master.ws_url, "s-takeover", token=API_KEY, create=True)
    edge = await Peer.open(master.ws_url, "s-takeover", role="edge", token=API_KEY, presence=False)
    for n in range(3):
        await client.send("agent.text.delta", {"block_id": "b", "delta": str(n)})
    for _ in range(3):
        assert (await edge.recv())["type"] == "agent.text.delta"
    again = await Peer.open(
        master.ws_url,
        "s-takeover",
        role="edge",
        token=API_KEY,
        participant_id=edge.participant_id,
        presence=False,
    )
    history = await again.recv_type("session.history")
    assert history["payload"]["frames"] == []
    assert history["payload"]["buffer_status"]["lost_frame_count"] == 0
    await again.close()
    await client.close()


async def test_a_backlog_once_sent_is_not_sent_or_counted_lost_again(master: Master) -> None:
    """After a reattach, the next reattach's backlog starts after the previous backlog."""
    client = await Peer.open(master.ws_url, "s-twice", token=API_KEY, create=True)
    edge = await Peer.open(master.ws_url, "s-twice", role="edge", token=API_KEY, presence=False)
    pid = edge.participant_id
    await edge.close()
    await _detached(master, "s-twice", pid)
    for n in range(2):
        await client.send("agent.text.delta", {"block_id": "b", "delta": str(n)})
    for buffer, frames, lost in (({"policy": "RING", "capacity_bytes": 0}, 0, 2), (None, 0, 0)):
        back = await Peer.open(
            master.ws_url,
            "s-twice",
            role="edge",
            token=API_KEY,
            participant_id=pid,
            buffer=buffer,
            presence=False,
        )
        history = await back.recv_type("session.history")
        assert len(history["payload"]["frames"]) == frames
        assert history["payload"]["buffer_status"]["lost_frame_count"] == lost
        await back.close()
        await _detached(master, "s-twice", pid)
    await client.close()
