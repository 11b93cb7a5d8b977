"""An attach the store cannot record attaches nothing (relay/session/attach.py, relay/ws.py)."""

from __future__ import annotations

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
