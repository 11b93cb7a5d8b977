"""A master on the SQLite store (notes §16.2): credentials outlive it, a full disk is survived.

Full disk is provoked with ``PRAGMA max_page_count`` (``SqliteStore.limit_pages``): SQLite
fails the transaction with SQLITE_FULL, the error a full disk gives, without filling one.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp

from relay.server import Master
from relay.store.sqlite import SqliteStore
from tests.e2e.conftest import API_KEY
from tests.e2e.conftest import test_settings as settings_for
from tests.e2e.util import new_session
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
