"""The master's log names an ending as the views do: an expiry is ``session_ended``
(reason ``timeout``), a deletion ``session_deleted`` — never "deleted" for a session that is
archived and can be continued (notes §17.1)."""

from __future__ import annotations

import structlog

from protocol.client import RawpClient
from tests.e2e.conftest import API_KEY
from tests.support.clients import FAST, start_master, wait_until


def _endings(logs: list[dict[str, object]]) -> list[tuple[object, object]]:
    return [
        (entry["event"], entry.get("reason"))
        for entry in logs
        if entry["event"] in ("session_ended", "session_deleted")
    ]


async def test_an_expiry_is_logged_ended_and_a_deletion_deleted() -> None:
    """A window that runs out logs session_ended/timeout; a delete logs session_deleted."""
    master = await start_master(reattach_window_s=0.3)
    try:
        with structlog.testing.capture_logs() as logs:
            async with RawpClient(
                master.ws_url,
                "s-log-expiry",
                role="client",
                token=API_KEY,
                create=True,
                backoff=FAST,
            ) as agent:
                await agent.flush(timeout=5)
            await wait_until(lambda: bool(_endings(logs)), what="the expiry's log line")
            async with RawpClient(
                master.ws_url,
                "s-log-delete",
                role="client",
                token=API_KEY,
                create=True,
                backoff=FAST,
            ) as agent:
                await agent.flush(timeout=5)
                await master.hub.delete("s-log-delete", reason="user_request", deleted_by="edge")
            await wait_until(lambda: len(_endings(logs)) == 2, what="the deletion's log line")
    finally:
        await master.stop()
    assert _endings(logs) == [("session_ended", "timeout"), ("session_deleted", "user_request")]
