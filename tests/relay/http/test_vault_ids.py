"""``vault_ids`` belong to the session (notes §17.6, §17.12): stored at create, returned by GET
and the list, copied by fork; more than 10 or malformed is 400 — on memory, SQLite, Redis."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from relay.server import Master
from tests.e2e.conftest import test_settings as settings_for
from tests.relay.http.conftest import Api
from tests.support.redis_server import RedisServer

VAULTS = ["vault-a", "team:secrets.v2", "x" * 128]


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def api_on(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Api]:
    """A JSON client for a master on each store."""
    store = "memory"
    if request.param == "sqlite":
        store = f"sqlite:{tmp_path / 'rawp.db'}"
    elif request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        with contextlib.closing(server.client()) as c:
            c.flushall()
        store = server.url
    master = Master(settings_for(store=store))
    await master.start()
    try:
        async with aiohttp.ClientSession() as http:
            yield Api(http, master.http_url)
    finally:
        await master.stop()


async def test_vault_ids_are_stored_returned_listed_and_forked(api_on: Api) -> None:
    """Create with vault_ids: the answer, GET, the list and a fork all carry them."""
    api = api_on
    made = await api.create("s-vault", vault_ids=VAULTS)
    assert made.body["session"]["vault_ids"] == VAULTS
    got = await api.get("/v1/sessions/s-vault")
    assert got.body["vault_ids"] == VAULTS
    listed = await api.get("/v1/sessions")
    assert {s["session_id"]: s["vault_ids"] for s in listed.body["sessions"]}["s-vault"] == VAULTS
    fork = await api.post("/v1/sessions/s-vault/fork", {"session_id": "s-vault-fork"})
    assert fork.status == 201, fork.text
    assert fork.body["session"]["vault_ids"] == VAULTS
    assert (await api.get("/v1/sessions/s-vault-fork")).body["vault_ids"] == VAULTS
    plain = await api.create("s-novault")
    assert plain.body["session"]["vault_ids"] == []


@pytest.mark.parametrize(
    "vault_ids",
    [
        [f"v{i}" for i in range(11)],
        ["x" * 129],
        [""],
        ["has space"],
        ["slash/ed"],
        ["ünïcode"],
        [1],
        "vault-a",
        [None],
    ],
)
async def test_more_or_malformed_vault_ids_are_400_and_create_nothing(
    api: Api, vault_ids: Any
) -> None:
    """11 ids, an id too long, empty or outside the grammar, not strings: 400 naming the
    field; no session is created."""
    reply = await api.post("/v1/sessions", {"session_id": "s-bad", "vault_ids": vault_ids})
    assert reply.status == 400, reply.text
    assert reply.problem["code"] == "invalid_body"
    assert "vault_ids" in reply.problem["detail"]
    assert (await api.get("/v1/sessions/s-bad")).status == 404


async def test_vault_ids_survive_a_restart_and_a_file_without_their_column(
    tmp_path: Path,
) -> None:
    """A database of an earlier build (no vault_ids column) gains it at open, its sessions
    keep an empty list; a session's ids survive a restart."""
    db = tmp_path / "rawp.db"
    store = f"sqlite:{db}"
    master = Master(settings_for(store=store))
    await master.start()
    async with aiohttp.ClientSession() as http:
        api = Api(http, master.http_url)
        await api.create("s-old")
    await master.stop()
    with contextlib.closing(sqlite3.connect(db)) as conn:  # as an earlier build left it
        conn.execute("ALTER TABLE sessions DROP COLUMN vault_ids")
        conn.commit()
    master = Master(settings_for(store=store))
    await master.start()
    async with aiohttp.ClientSession() as http:
        api = Api(http, master.http_url)
        assert (await api.get("/v1/sessions/s-old")).body["vault_ids"] == []
        await api.create("s-new", vault_ids=["v1"])
    await master.stop()
    master = Master(settings_for(store=store))
    await master.start()
    try:
        async with aiohttp.ClientSession() as http:
            api = Api(http, master.http_url)
            assert (await api.get("/v1/sessions/s-new")).body["vault_ids"] == ["v1"]
    finally:
        await master.stop()
