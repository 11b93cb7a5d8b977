"""A master on the SQLite store (notes §16.2): credentials outlive it, a full disk is survived.

Full disk is provoked with ``PRAGMA max_page_count`` (``SqliteStore.limit_pages``): SQLite
fails the transaction with SQLITE_FULL, the error a full disk gives, without filling one.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import aiohttp

from relay.server import Master
from relay.store.sqlite import SqliteStore
from tests.e2e.conftest import API_KEY
from tests.e2e.conftest import test_settings as settings_for
from tests.e2e.util import http, new_session, wait_until
from tests.support.wire import new_turn_id

__all__: list[str] = []


async def started(path: Path) -> Master:
    """A master on the SQLite file at ``path``."""
    master = Master(settings_for(), store=SqliteStore(path))
    await master.start()
    return master


async def test_session_tokens_and_sessions_survive_a_restart(tmp_path: Path) -> None:
    """A session token issued before a restart still reads its session after it."""
    path = tmp_path / "rawp.db"
    first = await started(path)
    try:
        async with aiohttp.ClientSession() as http:
            created = await http.post(
                f"{first.http_url}/v1/sessions",
                json={"session_id": "s-kept", "name": "kept"},
                headers={"Authorization": f"Bearer {API_KEY}"},
            )
            assert created.status == 201
            token = (await created.json())["token"]["token"]
    finally:
        await first.stop()
    second = await started(path)
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.get(
                f"{second.http_url}/v1/sessions/s-kept",
                headers={"Authorization": f"Bearer {token}"},
            ) as got,
        ):
            assert got.status == 200
            assert (await got.json())["name"] == "kept"
    finally:
        await second.stop()


async def test_full_disk_refuses_with_store_unavailable_and_recovers(tmp_path: Path) -> None:
    """SQLITE_FULL: the sender gets store_unavailable (non-fatal), nothing acknowledged is
    lost, and once space returns the re-sent frame and the next ones go on at the next seqs
    (re-sending from the refused frame, in order: docs/protocol.md §7)."""
    master = await started(tmp_path / "rawp.db")
    try:
        store = master.store
        assert isinstance(store, SqliteStore)
        client, (edge,) = await new_session(master, "s-full")
        turn = new_turn_id()
        await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
        before = await edge.recv()
        used = await store._read(lambda db: db.execute("PRAGMA page_count").fetchone()[0])
        await store.limit_pages(used)
        big = "x" * 200_000  # needs pages the cap does not allow
        refused = await client.send("agent.text.delta", {"block_id": "b", "delta": big})
        error = await client.recv_until(lambda f: f["type"] == "session.error")
        assert error[-1]["payload"]["error_code"] == "store_unavailable"
        assert error[-1]["payload"]["fatal"] is False
        assert await store.message_seq("s-full", refused["message_id"]) is None
        logged = [e.message_id for e in await store.read("s-full")]
        assert refused["message_id"] not in logged
        await store.limit_pages(None)
        await client.send_frame(refused)  # the refused frame again, the same message_id
        again = await client.send("agent.text.delta", {"block_id": "b", "delta": "fine"})
        got = await edge.recv_until(lambda f: f["message_id"] == again["message_id"])
        # the turn's session.status (running, notes §17.4) follows the turn start
        assert [f["seq"] for f in got[-2:]] == [before["seq"] + 2, before["seq"] + 3]
        entries = [e for e in await store.read("s-full") if e.type != "session.status"]
        logged = [e.message_id for e in entries]
        assert logged[-3:] == [before["message_id"], refused["message_id"], again["message_id"]]
    finally:
        await master.stop()


def _copies(path: Path, marker: bytes) -> int:
    """How often ``marker`` occurs in the database file and SQLite's files beside it."""
    found = 0
    for name in (path.name, path.name + "-wal", path.name + "-shm"):
        with contextlib.suppress(FileNotFoundError):
            found += (path.parent / name).read_bytes().count(marker)
    return found


async def _readyz(master: Master) -> tuple[int, Any]:
    """GET /readyz (no credential: load balancers have none)."""
    return await http(master, "GET", "/readyz", token=None)


async def test_a_deleted_session_leaves_no_bytes_on_disk(tmp_path: Path) -> None:
    """DELETE over HTTP: no SQL finds the session and no byte of its frames or name is left
    in rawp.db or rawp.db-wal, also after a restart (before, the WAL held copies of it)."""
    path = tmp_path / "rawp.db"
    marker = "SECRET-" + new_turn_id()[:8]
    master = await started(path)
    try:
        client, (edge,) = await new_session(master, "s-secret")
        turn = new_turn_id()
        await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
        for n in range(20):
            delta = f"{marker} {n} " + marker * (50 * n)  # small and overflow-page frames
            sent = await client.send("agent.text.delta", {"block_id": "b", "delta": delta})
        await edge.recv_until(lambda f: f["message_id"] == sent["message_id"])
        assert _copies(path, marker.encode()) > 0
        await client.close()
        await edge.close()
        status, _ = await http(master, "DELETE", "/v1/session/s-secret")
        assert status == 200
        assert _copies(path, marker.encode()) == 0
    finally:
        await master.stop()
    assert _copies(path, marker.encode()) == 0
    again = await started(path)
    try:
        status, _ = await http(again, "GET", "/v1/sessions/s-secret")
        assert status == 404
        assert _copies(path, marker.encode()) == 0
    finally:
        await again.stop()


async def test_readyz_refuses_while_a_full_disk_refuses_frames(tmp_path: Path) -> None:
    """While frames are refused for want of space /readyz answers 503 saying so (before, it
    stayed 200), and 200 again once space returns."""
    master = await started(tmp_path / "rawp.db")
    try:
        store = master.store
        assert isinstance(store, SqliteStore)
        assert (await _readyz(master))[0] == 200
        client, (edge,) = await new_session(master, "s-full")
        await client.send("session.turn.start", {"turn_id": new_turn_id(), "turn_index": 0})
        await edge.recv()
        used = await store._read(lambda db: db.execute("PRAGMA page_count").fetchone()[0])
        await store.limit_pages(used + 2)
        await client.send("agent.text.delta", {"block_id": "b", "delta": "x" * 200_000})
        error = await client.recv_until(lambda f: f["type"] == "session.error")
        assert error[-1]["payload"]["error_code"] == "store_unavailable"
        for _ in range(3):  # every probe, not the first only
            status, body = await _readyz(master)
            assert status == 503
            assert body["code"] == "store_unavailable"
            assert "disk is full" in body["detail"]
            assert str(tmp_path) not in body["detail"]  # anyone may ask /readyz
        await store.limit_pages(None)
        assert (await _readyz(master))[0] == 200
    finally:
        await master.stop()


async def test_readyz_refuses_a_damaged_file(tmp_path: Path) -> None:
    """A page garbled deep inside the file: the master starts (what is not damaged stays
    readable), and /readyz answers 503 naming the damage once the background check found
    it (before, 200 while reads of the damaged session answered 503)."""
    path = tmp_path / "rawp.db"
    master = await started(path)
    try:
        for n in range(4):
            client, (edge,) = await new_session(master, f"s-{n}")
            await client.send("session.turn.start", {"turn_id": new_turn_id(), "turn_index": 0})
            for _ in range(40):
                last = await client.send("agent.text.delta", {"block_id": "b", "delta": "y" * 300})
            await edge.recv_until(lambda f, m=last["message_id"]: f["message_id"] == m)
            await client.close()
            await edge.close()
    finally:
        await master.stop()
    data = bytearray(path.read_bytes())
    page = len(data) // 4096 // 2
    data[page * 4096 : (page + 1) * 4096] = bytes(range(256)) * 16
    path.write_bytes(bytes(data))
    damaged = await started(path)
    try:
        store = damaged.store
        assert isinstance(store, SqliteStore)
        await wait_until(lambda: store.integrity_checked, timeout=30)
        status, body = await _readyz(damaged)
        assert status == 503
        assert "damaged" in body["detail"]
    finally:
        await damaged.stop()


async def test_an_archive_purged_past_its_retention_leaves_no_bytes(tmp_path: Path) -> None:
    """The purge loop removes an archive past its retention, and no byte of its frames is
    left in rawp.db or rawp.db-wal (before, the WAL kept copies of it)."""
    from relay.archive import purge_archives

    path = tmp_path / "rawp.db"
    marker = "ARCHIVED-" + new_turn_id()[:8]
    store = SqliteStore(path)
    master = Master(settings_for(reattach_window_s=0.2, archive_retention_s=0.0), store=store)
    await master.start()
    try:
        client, (edge,) = await new_session(master, "s-archived")
        await client.send("session.turn.start", {"turn_id": new_turn_id(), "turn_index": 0})
        for n in range(10):
            sent = await client.send("agent.text.delta", {"block_id": "b", "delta": marker * n})
        await edge.recv_until(lambda f: f["message_id"] == sent["message_id"])
        await client.close()  # the window runs out: archived (reason timeout)
        await edge.recv_until(lambda f: f["type"] == "session.deleted", timeout=10.0)
        await wait_until(lambda: store.archived_before(2**62))
        assert _copies(path, marker.encode()) > 0  # archived: still readable
        purger = asyncio.ensure_future(purge_archives(master.hub, 0.05))
        try:
            await wait_until(lambda: store.is_deleted("s-archived"))
        finally:
            purger.cancel()
        assert _copies(path, marker.encode()) == 0
    finally:
        await master.stop()
    assert _copies(path, marker.encode()) == 0
