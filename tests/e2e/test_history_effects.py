"""Frames inside a client's session.history that do more than fold: renames and endings."""

from __future__ import annotations

import json

from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.e2e.util import hello_close_code, wait_until
from tests.support.wire import Peer, envelope


def _history(session_id: str, frames: list[dict[str, object]]) -> dict[str, object]:
    return {
        "frames": frames,
        "buffer_status": {"policy_applied": "RING", "truncated": False, "lost_frame_count": 0},
        "last_sync_timestamp": "2026-11-29T09:00:00Z",
        "last_message_id": "",
    }


async def test_rename_inside_history_renames_the_session(master: Master) -> None:
    """A session.renamed inside a client's history changes the name new participants see."""
    client = await Peer.open(master.ws_url, "s-hist-rename", token=API_KEY, create=True)
    rename = envelope(
        "s-hist-rename",
        "session.renamed",
        {"session_id": "s-hist-rename", "name": "offline name", "renamed_by": "client"},
    )
    await client.send("session.history", _history("s-hist-rename", [rename]))
    session = master.hub.sessions["s-hist-rename"]
    await wait_until(lambda: session.header.name == "offline name")
    edge = await Peer.open(master.ws_url, "s-hist-rename", role="edge", token=API_KEY)
    assert edge.welcome["payload"]["session"]["name"] == "offline name"
    await client.close()
    await edge.close()


async def test_delete_request_inside_history_ends_the_session(master: Master) -> None:
    """A session.deleted request carried in a client's history runs the termination."""
    client = await Peer.open(master.ws_url, "s-hist-delete", token=API_KEY, create=True)
    edge = await Peer.open(master.ws_url, "s-hist-delete", role="edge", token=API_KEY)
    request = envelope(
        "s-hist-delete",
        "session.deleted",
        {"session_id": "s-hist-delete", "reason": "user_request", "deleted_by": "client"},
    )
    await client.send("session.history", _history("s-hist-delete", [request]))
    deleted = await edge.recv_type("session.deleted")
    assert deleted["payload"]["reason"] == "user_request"
    assert deleted["payload"]["deleted_by"] == "client"
    assert await edge.closed_with() == 1000
    hello = envelope(
        "s-hist-delete",
        "connection.hello",
        {"protocol_version": "1.0.2", "role": "edge", "token": API_KEY},
    )
    assert await hello_close_code(master, json.dumps(hello)) == 4410
