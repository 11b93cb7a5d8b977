"""Ended is not erased (notes §16.1): a session ended by expiry stays readable, then purges.

Over the memory and the SQLite store (Redis: the same code paths, archive_session in the
contract suite). After the reattach window runs out the whole transcript is read back through
HTTP events, export and an SSE replay from seq 0; attaching closes 4410; DELETE purges.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from relay.server import Master
from relay.store.base import Store
from relay.store.memory import MemoryStore
from relay.store.sqlite import SqliteStore
from tests.e2e.conftest import API_KEY
from tests.e2e.conftest import test_settings as settings_for
from tests.e2e.util import hello, hello_close_code, http, new_session, wait_until
from tests.support.wire import new_turn_id

__all__: list[str] = []


@pytest.fixture(params=["memory", "sqlite"])
async def master(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Master]:
    """A master with a short reattach window on the store under test."""
    store: Store = MemoryStore() if request.param == "memory" else SqliteStore(tmp_path / "r.db")
    started = Master(settings_for(reattach_window_s=0.3), store=store)
    await started.start()
    yield started
    await started.stop()


async def send_json(master: Master, method: str, path: str, body: Any) -> tuple[int, Any]:
    """One HTTP request with a JSON body; (status, problem code or None)."""
    headers = {"Authorization": f"Bearer {API_KEY}"}
    async with (
        aiohttp.ClientSession() as client,
        client.request(method, master.http_url + path, json=body, headers=headers) as response,
    ):
        answer = await response.json(content_type=None)
        return response.status, answer.get("code")


async def sse_replay(master: Master, session_id: str) -> list[dict[str, Any]]:
    """Every event of an SSE stream read from seq 0 until the master ends it."""
    headers = {"Authorization": f"Bearer {API_KEY}"}
    url = f"{master.http_url}/v1/sessions/{session_id}/events/stream?after_seq=0"
    events: list[dict[str, Any]] = []
    async with (
        asyncio.timeout(10),
        aiohttp.ClientSession() as client,
        client.get(url, headers=headers) as response,
    ):
        assert response.status == 200
        async for line in response.content:
            if line.startswith(b"data: "):
                events.append(json.loads(line[len(b"data: ") :]))
    return events


async def test_expired_session_is_readable_whole_then_purged_by_delete(master: Master) -> None:
    """Expiry archives: get, events, export and SSE replay from 0 show the whole transcript;
    attach closes 4410; DELETE purges it (404 afterwards)."""
    sid = "s-archive-expiry"
    client, (edge,) = await new_session(master, sid)
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send("agent.text.delta", {"block_id": "b1", "delta": "kept "})
    await client.send("agent.text.done", {"block_id": "b1"})
    await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    await edge.recv_until(lambda f: f["type"] == "session.turn.end")
    await client.close()
    await edge.recv_until(lambda f: f["type"] == "session.deleted", timeout=10.0)

    async def archived() -> bool:
        status, body = await http(master, "GET", f"/v1/sessions/{sid}")
        return status == 200 and body["status"] == "terminated"

    await wait_until(archived)
    status, body = await http(master, "GET", f"/v1/sessions/{sid}")
    assert (body["reason"], body["deleted_by"]) == ("timeout", "system")
    assert body["ended_at"]
    assert body["participants"] == []

    status, events = await http(master, "GET", f"/v1/sessions/{sid}/events?order=asc&limit=1000")
    assert status == 200
    logged = events["events"]
    assert [e["seq"] for e in logged] == list(range(1, len(logged) + 1))
    types = [e["type"] for e in logged]
    assert "agent.text.delta" in types
    assert types[-1] == "session.deleted"
    assert logged[-1]["payload"]["reason"] == "timeout"

    status, exported = await http(master, "GET", f"/v1/sessions/{sid}/export?format=json")
    assert status == 200
    assert [e["message_id"] for e in exported["events"]] == [e["message_id"] for e in logged]
    assert exported["session"]["status"] == "terminated"
    replayed = await sse_replay(master, sid)
    assert [e["message_id"] for e in replayed] == [e["message_id"] for e in logged]

    status, listing = await http(master, "GET", "/v1/sessions")
    assert sid in [s["session_id"] for s in listing["sessions"]]
    assert await hello_close_code(master, hello(sid)) == 4410
    assert await hello_close_code(master, hello(sid, role="edge")) == 4410

    renamed = await send_json(master, "PATCH", f"/v1/sessions/{sid}", {"name": "again"})
    appended = await send_json(
        master,
        "POST",
        f"/v1/sessions/{sid}/events",
        {"type": "user.message", "payload": {"text": "hi"}},
    )
    assert renamed == appended == (409, "archived")  # read-only
    status, forked = await http(master, "POST", f"/v1/sessions/{sid}/fork")
    assert status == 201, forked
    assert forked["session"]["status"] == "idle"
    # all but the end (the session.status terminated and the session.deleted), then the
    # copied client's presence closed: expired
    assert forked["session"]["head_seq"] == len(logged) - 2 + 1

    status, _ = await http(master, "DELETE", f"/v1/session/{sid}")
    assert status == 200
    status, _ = await http(master, "GET", f"/v1/sessions/{sid}")
    assert status == 404
    assert await master.store.read(sid) == []


async def test_archives_past_their_retention_are_purged(tmp_path: Path) -> None:
    """With a zero archive retention the purge loop removes an expired session by itself."""
    store = SqliteStore(tmp_path / "r.db")
    started = Master(settings_for(reattach_window_s=0.2, archive_retention_s=0.0), store=store)
    await started.start()
    try:
        from relay.archive import purge_archives

        sid = "s-archive-purge"
        client, (edge,) = await new_session(started, sid)
        await client.close()
        await edge.recv_until(lambda f: f["type"] == "session.deleted", timeout=10.0)
        await wait_until(lambda: store.archived_before(2**62))
        purger = asyncio.ensure_future(purge_archives(started.hub, 0.05))
        try:
            await wait_until(lambda: store.is_deleted(sid))
        finally:
            purger.cancel()
        assert await store.get_session(sid) is None
    finally:
        await started.stop()


@pytest.mark.parametrize(
    ("text", "seconds"), [("30d", 30 * 86400.0), ("12h", 43200.0), ("15m", 900.0), ("90", 90.0)]
)
def test_archive_retention_takes_durations(text: str, seconds: float) -> None:
    """--archive-retention reads 30d, 12h, 15m, 90 (seconds); the default is 30 days."""
    from relay.config import Settings, parse_duration

    assert parse_duration(text) == seconds
    assert Settings().archive_retention_s == 30 * 86400.0


async def test_writes_to_an_archived_session_answer_409_archived(master: Master) -> None:
    """Cancel (with or without a turn), append and rename on an archive: 409 ``archived``."""
    sid = "s-archive-writes"
    client, (edge,) = await new_session(master, sid)
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send(
        "session.error", {"error_code": "agent_crashed", "message": "x", "fatal": True}
    )
    await edge.recv_until(lambda f: f["type"] == "session.deleted", timeout=10.0)
    await wait_until(lambda: _archived(master, sid))
    path = f"/v1/sessions/{sid}"
    assert await send_json(master, "POST", f"{path}/cancel", {}) == (409, "archived")
    assert await send_json(master, "POST", f"{path}/cancel", {"turn_id": turn}) == (409, "archived")
    appended = {"type": "control.cancel", "payload": {"turn_id": turn}}
    assert await send_json(master, "POST", f"{path}/events", appended) == (409, "archived")
    assert await send_json(master, "PATCH", path, {"name": "again"}) == (409, "archived")


async def _archived(master: Master, session_id: str) -> bool:
    header = await master.store.get_session(session_id)
    return header is not None and header.archived


async def test_a_session_being_archived_is_never_404(master: Master) -> None:
    """GETs racing the end of a session see it live or archived, never 404 in between."""
    sid = "s-archive-race"
    client, edges = await new_session(master, sid, edges=3)
    statuses: list[int] = []
    stop = asyncio.Event()

    async def poll() -> None:
        while not stop.is_set():
            status, _ = await http(master, "GET", f"/v1/sessions/{sid}")
            statuses.append(status)

    pollers = [asyncio.create_task(poll()) for _ in range(4)]
    await asyncio.sleep(0.05)
    await client.send(
        "session.error", {"error_code": "agent_crashed", "message": "x", "fatal": True}
    )
    await wait_until(lambda: _archived(master, sid))
    await asyncio.sleep(0.05)
    stop.set()
    await asyncio.gather(*pollers)
    assert statuses
    assert set(statuses) == {200}, sorted(set(statuses))
    for edge in edges:
        await edge.close()
