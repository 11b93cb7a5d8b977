"""A revoked credential's stuck stream is cut on every event loop the master runs on.

``rawp serve`` runs on uvloop when it is installed, whose transports are not asyncio's
classes; the stream behind a reader that stopped reading must be cut there too, and the
credential's invalidity is logged once, not at every round of the watch (each test of this
folder runs on both loops: conftest.py).
"""

from __future__ import annotations

import asyncio

import structlog

from relay.revocation import CHECK_INTERVAL_S
from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.relay.test_revocation import _flood, _no_streams, _stuck_reader, _until_true
from tests.support.wire import Peer


async def test_a_stuck_reader_is_cut_after_revocation_and_logged_once(master: Master) -> None:
    """Megabytes queued behind a reader that never reads: cut once revoked, one log line."""
    client = await Peer.open(master.ws_url, "s-stuck-loop", token=API_KEY, create=True)
    token, record = await master.hub.auth.issue_token("default", "s-stuck-loop")
    sock = await _stuck_reader(master, "s-stuck-loop", token)
    await _flood(master, client, "s-stuck-loop")
    with structlog.testing.capture_logs() as logs:
        await master.hub.auth.revoke(record.digest)
        await _until_true(lambda: _no_streams(master))
        await asyncio.sleep(CHECK_INTERVAL_S * 3)  # a few more rounds of the watch
    invalid = [entry for entry in logs if entry["event"] == "credential_invalid"]
    assert len(invalid) == 1, invalid
    sock.close()
    await client.close()
