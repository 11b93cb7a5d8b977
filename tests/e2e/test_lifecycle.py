"""Sessions people come back to (notes §17.1, §17.2), against ``rawp serve`` processes.

The reattach window's defaults per store and ``never``; an expiry named "ended" (never
"deleted") in every view the master serves; an ended session carried on by ``continue``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from yarl import URL

from protocol import names
from protocol.client import ClientError, RawpClient, continue_session
from relay.server import Master
from relay.store.sqlite import SqliteStore
from tests.e2e.conftest import API_KEY
from tests.e2e.conftest import test_settings as settings_for
from tests.support.masters import MasterProcess
from tests.support.redis_server import RedisServer
from tests.support.wire import Peer, new_turn_id, usage_payload

__all__: list[str] = []

KEY = "rk_lifecycle"
AUTH = {"Authorization": f"Bearer {KEY}"}


def serve(
    tmp_path: Path, store: str | None = None, *, window: float | str | None = None
) -> Iterator[MasterProcess]:
    """One ``rawp serve`` on ``store`` (default: a SQLite file) with ``--reattach-window``
    ``window`` (None: the store's default), stopped at the end."""
    master = MasterProcess(
        "n1",
        store or f"sqlite:{tmp_path / 'rawp.db'}",
        api_key=KEY,
        log_dir=tmp_path,
        reattach_window=window,
    )
    master.spawn()
    try:
        master.wait_ready()
        yield master
    finally:
        master.stop()


async def welcome_window(master: MasterProcess, session_id: str) -> Any:
    """The ``reattach_window_ms`` a client's welcome states."""
    client = await Peer.open(master.ws_url, session_id, token=KEY, create=True)
    await client.close()
    return client.welcome["payload"]["reattach_window_ms"]


async def call(master: MasterProcess, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """One HTTP request; (status, JSON answer or text)."""
    async with (
        aiohttp.ClientSession() as http,
        # Sent as written (encoded): ids below are written as path segments already.
        http.request(
            method, URL(master.http_url + path, encoded=True), json=body, headers=AUTH
        ) as answer,
    ):
        if answer.content_type == "application/json" or "json" in answer.content_type:
            return answer.status, await answer.json(content_type=None)
        return answer.status, await answer.text()


async def one_turn(client: Peer, index: int, text: str) -> None:
    """A whole turn with one text block, its usage, and the master's ack of it."""
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": index})
    await client.send("agent.text.delta", {"block_id": f"b{index}", "delta": text})
    await client.send("agent.text.done", {"block_id": f"b{index}"})
    await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    last = await client.send("session.usage", usage_payload(turn))
    client.show_acks = True
    await client.recv_until(
        lambda f: (
            f["type"] == "connection.ack"
            and f["payload"].get("last_message_id") == last["message_id"]
        )
    )
    client.show_acks = False


async def ended(master: MasterProcess, session_id: str) -> dict[str, Any]:
    """Wait until the session ended (archived); its GET answer."""
    async with asyncio.timeout(20):
        while True:
            path = f"/v1/sessions/{names.path_segment(session_id)}"
            status, got = await call(master, "GET", path)
            if status == 200 and got["status"] == "terminated":
                return dict(got)
            await asyncio.sleep(0.1)


async def expired_session(master: MasterProcess, session_id: str) -> None:
    """A session whose agent streamed one turn, left and did not come back in time."""
    client = await Peer.open(master.ws_url, session_id, token=KEY, create=True)
    await one_turn(client, 0, "kept across the end")
    await client.close()
    await ended(master, session_id)


@pytest.fixture
def sqlite_master(tmp_path: Path) -> Iterator[MasterProcess]:
    """``rawp serve`` on SQLite with the default window."""
    yield from serve(tmp_path)


@pytest.fixture
def short_master(tmp_path: Path) -> Iterator[MasterProcess]:
    """``rawp serve`` on SQLite with a 1 s window, so sessions end during the test."""
    yield from serve(tmp_path, window=1)


async def test_sqlite_default_window_is_seven_days(sqlite_master: MasterProcess) -> None:
    """On SQLite (the default store) a detached agent is waited for 7 days."""
    assert await welcome_window(sqlite_master, "s-week") == 7 * 86_400_000


async def test_redis_default_window_is_seven_days(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """On Redis a detached agent is waited for 7 days."""
    for master in serve(tmp_path, redis_server.url):
        assert await welcome_window(master, "s-week-redis") == 7 * 86_400_000


async def test_memory_default_window_stays_two_minutes(tmp_path: Path) -> None:
    """On memory (nothing kept across a restart) the window stays 120 s."""
    for master in serve(tmp_path, "memory"):
        assert await welcome_window(master, "s-minutes") == 120_000


async def test_never_window_welcomes_minus_one_and_never_expires(tmp_path: Path) -> None:
    """``--reattach-window never``: the welcome says -1, and a detached agent's session is
    still live (idle) after the time a short window would have ended it."""
    for master in serve(tmp_path, window="never"):
        assert await welcome_window(master, "s-never") == -1
        await asyncio.sleep(1.5)  # past a 1 s window's expiry and the sweep's tick
        status, got = await call(master, "GET", "/v1/sessions/s-never")
        assert status == 200
        assert got["status"] == "idle"
        assert got["connection"] == "detached"


async def test_expiry_is_named_ended_in_export_and_log(short_master: MasterProcess) -> None:
    """An expiry is "ended: the agent did not come back within 1 second" in the Markdown
    export, and the logged session.deleted names the window; nothing says "deleted"."""
    await expired_session(short_master, "s-gone")
    status, text = await call(short_master, "GET", "/v1/sessions/s-gone/export?format=md")
    assert status == 200
    assert "ended: the agent did not come back within 1 second" in text
    assert "deleted" not in text.lower()
    status, events = await call(short_master, "GET", "/v1/sessions/s-gone/events")
    last = events["events"][0]  # newest first
    assert last["type"] == "session.deleted"
    assert last["payload"]["reattach_window_ms"] == 1000


async def test_hello_for_ended_session_closes_4410_naming_continue(
    short_master: MasterProcess,
) -> None:
    """A hello for an ended id closes 4410, saying why and that it can be continued."""
    await expired_session(short_master, "s-over")
    peer = await Peer.open(short_master.ws_url, "s-over", token=KEY, expect_welcome=False)
    assert await peer.closed_with() == 4410
    reason = peer.ws.close_reason or ""
    assert "did not come back within 1 second" in reason
    assert "continue" in reason


async def test_continue_carries_an_ended_session_on(short_master: MasterProcess) -> None:
    """``continue`` makes a live child holding the whole log but the end; the agent that
    attaches reads its history and its next turn index follows the old session's."""
    await expired_session(short_master, "s-old")
    _, old_events = await call(short_master, "GET", "/v1/sessions/s-old/events")
    old_head = old_events["events"][0]["seq"]  # newest first
    status, made = await call(short_master, "POST", "/v1/sessions/s-old/continue", {})
    assert status == 201
    new = made["session"]
    assert new["parent_session_id"] == "s-old"
    # all but the end: the session.status (terminated) and the session.deleted
    assert new["seed_length"] == old_head - 2
    assert new["status"] == "idle"
    new_id = new["session_id"]
    agent = await Peer.open(short_master.ws_url, new_id, token=KEY, resume={"last_seq": 0})
    backlog = await agent.recv_type("session.history")
    texts = [f["payload"].get("delta") for f in backlog["payload"]["frames"]]
    assert "kept across the end" in texts
    await one_turn(agent, 1, "and on")  # turn_index 1: the old session had turn 0
    await agent.close()


async def test_continue_with_a_named_id_is_idempotent(short_master: MasterProcess) -> None:
    """Asking twice with the same named id returns the same session (200, no new token)."""
    await expired_session(short_master, "s-twice")
    body = {"session_id": "s-twice-2"}
    first, made = await call(short_master, "POST", "/v1/sessions/s-twice/continue", body)
    again, same = await call(short_master, "POST", "/v1/sessions/s-twice/continue", body)
    assert (first, again) == (201, 200)
    assert same["created"] is False
    assert same["token"] is None
    assert same["session"]["session_id"] == made["session"]["session_id"] == "s-twice-2"


async def test_continue_on_a_live_session_is_not_ended(sqlite_master: MasterProcess) -> None:
    """``continue`` on a live session is 409 ``not_ended``, and nothing is made."""
    client = await Peer.open(sqlite_master.ws_url, "s-live", token=KEY, create=True)
    status, problem = await call(
        sqlite_master, "POST", "/v1/sessions/s-live/continue", {"session_id": "s-live-2"}
    )
    await client.close()
    assert status == 409
    assert problem["code"] == "not_ended"
    missing, _ = await call(sqlite_master, "GET", "/v1/sessions/s-live-2")
    assert missing == 404


async def test_never_window_arms_no_deadline_that_comes_due(tmp_path: Path) -> None:
    """Under ``never`` a detached participant's deadline is not due even a century on."""
    store = SqliteStore(tmp_path / "never.db")
    master = Master(settings_for(reattach_window_s=math.inf), store=store)
    await master.start()
    try:
        client = await Peer.open(master.ws_url, "s-century", token=API_KEY, create=True)
        await client.close()
        century = int((time.time() + 100 * 365 * 86400) * 1000)
        async with asyncio.timeout(5):
            while not (await store.list_participants("s-century"))[0].detached_at_ms:
                await asyncio.sleep(0.02)
        assert await store.claim_due_deadlines(century) == []
    finally:
        await master.stop()


async def test_python_client_continues_and_the_agent_reads_its_history(
    short_master: MasterProcess,
) -> None:
    """``continue_session()`` carries an ended session on; a RawpClient attached to the new
    session from the start reads the old conversation; a live session is refused."""
    await expired_session(short_master, "s-py")
    made = await continue_session(short_master.http_url, "s-py", api_key=KEY)
    assert made.created
    assert made.parent_session_id == "s-py"
    assert made.token is not None
    agent = RawpClient(
        short_master.ws_url, made.session_id, role="client", token=KEY, from_start=True
    )
    await agent.connect()
    try:
        texts = [b.text for b in agent.view.blocks if getattr(b, "text", None)]
        async with asyncio.timeout(10):
            while "kept across the end" not in "".join(texts):
                await asyncio.sleep(0.05)
                texts = [str(getattr(b, "text", "")) for b in agent.view.blocks]
    finally:
        await agent.close()
    with pytest.raises(ClientError, match="not_ended"):
        await continue_session(short_master.http_url, made.session_id, api_key=KEY)


async def test_python_client_continues_ids_that_need_encoding(short_master: MasterProcess) -> None:
    """continue_session() reaches the session whose id holds ':' or is '..' (one encoded path
    segment the master decodes back), never another route or a parent path."""
    for session_id in ("s:py.1", ".."):
        await expired_session(short_master, session_id)
        made = await continue_session(short_master.http_url, session_id, api_key=KEY)
        assert (made.created, made.parent_session_id) == (True, session_id)
        again = await continue_session(
            short_master.http_url, session_id, api_key=KEY, new_session_id=made.session_id
        )
        assert (again.created, again.session_id) == (False, made.session_id)
