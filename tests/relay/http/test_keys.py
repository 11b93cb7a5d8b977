"""``/v1/keys`` and the keys' lifetimes (notes §17.6, §17.12), on memory, SQLite and Redis."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import urllib.parse
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from relay.auth import digest
from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.e2e.conftest import test_settings as settings_for
from tests.relay.http.conftest import Api, Reply
from tests.support.redis_server import RedisServer
from tests.support.wire import Peer

ADMIN_SCOPES = ["admin", "delete", "read", "tokens", "write"]


def _later(seconds: float) -> str:
    moment = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)
    return moment.isoformat().replace("+00:00", "Z")


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def store_master(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[Master, Api]]:
    """A master on each store, with the test key (every scope, given by flag)."""
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
            yield master, Api(http, master.http_url)
    finally:
        await master.stop()


async def test_create_list_revoke_on_every_store(store_master: tuple[Master, Api]) -> None:
    """An admin key creates a key (secret once, digest stored), lists it, revokes it."""
    master, api = store_master
    made = await api.post(
        "/v1/keys", {"scopes": ["read", "write"], "name": "ci", "expires_at": _later(3600)}
    )
    assert made.status == 201, made.text
    secret = made.body["key"]
    assert made.body["key_id"] == digest(secret)
    assert made.body["scopes"] == ["read", "write"]
    assert made.body["workspace"] == "default"
    record = await master.store.get_credential(digest(secret))
    assert record is not None
    assert secret not in repr(record)  # only the digest is kept
    assert (await api.get("/v1/sessions", token=secret)).status == 200
    listed = await api.get("/v1/keys")
    assert listed.status == 200
    keys = {k["key_id"]: k for k in listed.body["keys"]}
    mine = keys[digest(secret)]
    assert mine["name"] == "ci"
    assert mine["expires_at"] is not None
    assert mine["last_used_at"] is not None  # it was just used
    assert mine["key"] is None
    assert secret not in listed.text
    assert keys[digest(API_KEY)]["given"] is True
    gone = await api.delete(f"/v1/keys/{digest(secret)}")
    assert gone.status == 200, gone.text
    assert (await api.get("/v1/sessions", token=secret)).status == 401
    assert digest(secret) not in {k["key_id"] for k in (await api.get("/v1/keys")).body["keys"]}
    again = await api.delete(f"/v1/keys/{digest(secret)}")
    assert again.status == 200


@pytest.mark.parametrize(
    ("body", "code", "named"),
    [
        ({"scopes": ["read", "sudo"]}, "unknown_scope", "sudo"),
        ({"scopes": []}, "invalid_body", "scope"),
        ({"scopes": ["read"], "expires_at": "2001-01-01T00:00:00Z"}, "invalid_expiry", "past"),
        ({"scopes": ["read"], "expires_at": "2099-01-01T00:00:00"}, "invalid_body", "expires_at"),
        ({"scopes": ["read"], "expires_at": "soon"}, "invalid_body", "expires_at"),
        ({"scopes": "read"}, "invalid_body", "scopes"),
        ({"scopes": ["read"] * 9}, "invalid_body", "scopes"),
        ({"scopes": ["read"], "name": "x" * 101}, "invalid_body", "name"),
    ],
)
async def test_bad_key_requests_are_400_naming_the_fault(
    api: Api, body: dict[str, Any], code: str, named: str
) -> None:
    """Unknown scopes, past or zone-less expiries, wrong types: 400 naming what is wrong."""
    reply = await api.post("/v1/keys", body)
    assert reply.status == 400, reply.text
    assert reply.problem["code"] == code
    assert named in reply.problem["detail"]


async def test_only_admin_keys_see_or_manage_keys(api: Api, master: Master) -> None:
    """Without admin: 403 on every key route; a session token too."""
    secret, record = await master.hub.auth.create_key("default", ["read", "write", "tokens"])
    for method, path, body in [
        ("GET", "/v1/keys", None),
        ("POST", "/v1/keys", {"scopes": ["read"]}),
        ("DELETE", f"/v1/keys/{record.digest}", None),
    ]:
        reply = await api.call(method, path, json=body, token=secret)
        assert reply.status == 403, reply.text
        assert reply.problem["code"] == "not_allowed"
        assert "admin" in reply.problem["detail"]
    await api.create("s-k")
    token = (await api.post("/v1/sessions/s-k/tokens", {}, token=secret)).body["token"]
    assert (await api.get("/v1/keys", token=token)).status == 403


async def test_an_admin_key_cannot_revoke_itself_so_an_admin_key_always_remains(
    master: Master,
) -> None:
    """409 own_key for itself, 409 given_key for a flag's key; of two stored admin keys one
    revokes the other, and the survivor — the last — cannot be revoked over the API."""
    master.hub.auth.give_keys([])  # only stored keys from here on
    a, a_record = await master.hub.auth.create_key("default", ADMIN_SCOPES)
    _, b_record = await master.hub.auth.create_key("default", ["admin"])
    reader, _ = await master.hub.auth.create_key("default", ["read"])
    async with aiohttp.ClientSession() as http:
        api = Api(http, master.http_url)
        own = await api.delete(f"/v1/keys/{a_record.digest}", token=a)
        assert own.status == 409
        assert own.problem["code"] == "own_key"
        assert (await api.delete(f"/v1/keys/{b_record.digest}", token=a)).status == 200
        assert (await api.delete(f"/v1/keys/{a_record.digest}", token=reader)).status == 403
        listed = (await api.get("/v1/keys", token=a)).body["keys"]
        admins = [k["key_id"] for k in listed if "admin" in k["scopes"]]
        assert admins == [a_record.digest]
        master.hub.auth.give_keys([("default", API_KEY)])
        given = await api.delete(f"/v1/keys/{digest(API_KEY)}", token=a)
        assert given.status == 409
        assert given.problem["code"] == "given_key"


async def test_a_key_makes_keys_for_its_own_workspace_only(api: Api) -> None:
    """Another workspace in the body: 403; keys of another workspace are not listed."""
    reply = await api.post("/v1/keys", {"scopes": ["read"], "workspace": "other"})
    assert reply.status == 403
    listed = await api.get("/v1/keys")
    assert {k["workspace"] for k in listed.body["keys"]} == {"default"}


async def test_a_token_is_never_wider_than_its_key(api: Api, master: Master) -> None:
    """A grant the key's scopes lack is 403; the token carries the key's scopes; it ends with
    its key and no later than the key's expiry."""
    await api.create("s-narrow")
    secret, record = await master.hub.auth.create_key(
        "default",
        ["read", "tokens"],
        expires_at_ms=int((dt.datetime.now(dt.UTC).timestamp() + 600) * 1000),
    )
    for grant in ("client", "delete"):
        refused = await api.post("/v1/sessions/s-narrow/tokens", {"grants": [grant]}, token=secret)
        assert refused.status == 403, refused.text
        assert refused.problem["code"] == "not_allowed"
    issued = await api.post("/v1/sessions/s-narrow/tokens", {"ttl_s": 86400}, token=secret)
    assert issued.status == 201, issued.text
    token = issued.body["token"]
    expires = dt.datetime.fromisoformat(issued.body["expires_at"].replace("Z", "+00:00"))
    assert expires.timestamp() * 1000 <= record.expires_at_ms  # type: ignore[operator]
    who = await api.get("/v1/whoami", token=token)
    assert who.body["scopes"] == ["read"]
    append = await api.post(
        "/v1/sessions/s-narrow/events",
        {"type": "user.message", "payload": {"text": "hi"}},
        token=token,
    )
    assert append.status == 403  # its key could not write
    assert (await api.get("/v1/sessions/s-narrow", token=token)).status == 200
    assert (await api.delete(f"/v1/keys/{record.digest}")).status == 200
    assert (await api.get("/v1/sessions/s-narrow", token=token)).status == 401


async def test_a_key_without_tokens_creates_sessions_without_a_token(
    api: Api, master: Master
) -> None:
    """Create with a write-only key: 201, no token; asking for one is 403 and creates nothing."""
    secret, _ = await master.hub.auth.create_key("default", ["write"])
    made = await api.post("/v1/sessions", {"session_id": "s-notoken"}, token=secret)
    assert made.status == 201, made.text
    assert made.body["token"] is None
    asked = await api.post(
        "/v1/sessions", {"session_id": "s-asked", "token": {"grants": []}}, token=secret
    )
    assert asked.status == 403
    assert await master.store.get_session("s-asked") is None


async def test_expired_key_is_refused(api: Api, master: Master) -> None:
    """A key past its expiry answers 401 and is not listed as usable."""
    secret, _ = await master.hub.auth.create_key(
        "default", ["read"], expires_at_ms=int(dt.datetime.now(dt.UTC).timestamp() * 1000) + 300
    )
    assert (await api.get("/v1/sessions", token=secret)).status == 200
    await asyncio.sleep(0.4)
    reply = await api.get("/v1/sessions", token=secret)
    assert reply.status == 401
    assert "expired" in reply.problem["detail"]


async def test_keys_routes_are_in_the_openapi_document(api: Api) -> None:
    """POST/GET /v1/keys and DELETE /v1/keys/{key_id} are described."""
    doc = (await api.get("/openapi.json", token=None)).body
    assert {"post", "get"} <= set(doc["paths"]["/v1/keys"])
    assert "delete" in doc["paths"]["/v1/keys/{key_id}"]


# --- keys given by flag and the development key (they live while given) ----------------


async def _status(master: Master, secret: str) -> int:
    async with (
        aiohttp.ClientSession() as http,
        http.get(
            master.http_url + "/v1/sessions", headers={"Authorization": f"Bearer {secret}"}
        ) as response,
    ):
        return response.status


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_keys_live_only_while_given_and_the_development_key_is_made_once(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Across restarts on a durable store: a key dropped from --api-key is refused; the
    development key is the same at every start and refused while any key is given."""
    if kind == "sqlite":
        store = f"sqlite:{tmp_path / 'rawp.db'}"
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        with contextlib.closing(server.client()) as c:
            c.flushall()
        store = server.url

    async def run(keys: tuple[str, ...], check: Callable[[Master], Any]) -> None:
        master = Master(settings_for(store=store, api_keys=keys))
        await master.start()
        try:
            await check(master)
        finally:
            await master.stop()

    seen: dict[str, str] = {}

    async def first(master: Master) -> None:
        assert master.hub.development_key is None
        assert await _status(master, "rk_first") == 200

    async def second(master: Master) -> None:
        assert await _status(master, "rk_first") == 401  # dropped from the flags
        assert await _status(master, "rk_second") == 200
        assert await master.store.get_credential(digest("rk_second")) is None  # never stored

    async def development(master: Master) -> None:
        assert await _status(master, "rk_second") == 401
        dev = master.hub.development_key
        assert dev is not None
        assert await _status(master, dev) == 200
        seen["dev"] = dev

    async def development_again(master: Master) -> None:
        assert master.hub.development_key == seen["dev"]  # made once, reused
        assert await _status(master, seen["dev"]) == 200

    async def given_again(master: Master) -> None:
        assert master.hub.development_key is None
        assert await _status(master, seen["dev"]) == 401  # refused while a key is given

    await run(("rk_first",), first)
    await run(("rk_second",), second)
    await run((), development)
    await run((), development_again)
    await run(("rk_third",), given_again)


async def test_one_key_for_two_workspaces_is_refused_at_start() -> None:
    """--api-key a:K --api-key b:K: the start fails naming the flag (exit 2), not a guess."""
    from relay.startup import StartupError

    master = Master(settings_for(api_keys=("a:rk_same", "b:rk_same")))
    with pytest.raises(StartupError) as info:
        await master.start()
    assert info.value.exit_code == 2
    assert "--api-key" in info.value.message


async def test_a_development_key_revoked_is_replaced_at_the_next_start(tmp_path: Path) -> None:
    """Revoking the development key (rawp keys revoke --store) makes a new one next start."""
    store = f"sqlite:{tmp_path / 'rawp.db'}"
    master = Master(settings_for(store=store, api_keys=()))
    await master.start()
    first = master.hub.development_key
    assert first is not None
    await master.hub.auth.revoke(digest(first))
    await master.stop()
    master = Master(settings_for(store=store, api_keys=()))
    await master.start()
    try:
        assert master.hub.development_key not in (None, first)
        assert await _status(master, first) == 401
    finally:
        await master.stop()


async def test_an_open_connection_of_a_revoked_key_closes(api: Api, master: Master) -> None:
    """DELETE /v1/keys ends the key's WebSocket at once (4401) on this node."""
    secret, record = await master.hub.auth.create_key("default", ["read", "write"])
    peer = await Peer.open(master.ws_url, "s-rev", token=secret, create=True)
    assert (await api.delete(f"/v1/keys/{record.digest}")).status == 200
    assert await peer.closed_with(5.0) == 4401


async def test_a_keys_id_prefix_or_near_miss_is_not_a_credential(api: Api, master: Master) -> None:
    """The key's id (its digest) presented as a secret, a prefix of the secret, the secret with
    one character changed: 401 each (the digest is hashed again, never compared as given)."""
    secret, record = await master.hub.auth.create_key("default", ["read"])
    near = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    for attempt in (record.digest, secret[:20], near, secret + "x", "rk_" + record.digest):
        reply = await api.get("/v1/sessions", token=attempt)
        assert reply.status == 401, attempt
    assert (await api.get("/v1/sessions", token=secret)).status == 200


async def test_secrets_are_compared_by_digest_in_constant_time(
    master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    """authenticate compares the stored and presented digests with hmac.compare_digest."""
    import hmac

    import relay.auth

    seen: list[tuple[str, str]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(relay.auth.hmac, "compare_digest", spy)
    secret, record = await master.hub.auth.create_key("default", ["read"])
    await master.hub.auth.authenticate(secret)
    assert (record.digest, digest(secret)) in seen


async def test_a_key_stored_by_an_earlier_build_keeps_every_scope_and_is_listed(
    tmp_path: Path,
) -> None:
    """A key record without scopes (an earlier build's) authenticates with every scope and
    shows in GET /v1/keys, so an admin can find and revoke it."""
    from relay.store import open_store
    from relay.store.base import Credential

    store_url = f"sqlite:{tmp_path / 'rawp.db'}"
    store = open_store(store_url)
    await store.start()
    await store.put_credential(
        Credential(digest=digest("rk_from_before"), kind="key", workspace="default")
    )
    await store.close()
    master = Master(settings_for(store=store_url))
    await master.start()
    try:
        async with aiohttp.ClientSession() as http:
            api = Api(http, master.http_url)
            who = await api.get("/v1/whoami", token="rk_from_before")
            assert who.body["scopes"] == ADMIN_SCOPES
            listed = {k["key_id"]: k for k in (await api.get("/v1/keys")).body["keys"]}
            assert listed[digest("rk_from_before")]["scopes"] == ADMIN_SCOPES
            gone = await api.delete(f"/v1/keys/{digest('rk_from_before')}")
            assert gone.status == 200
            assert (await api.get("/v1/whoami", token="rk_from_before")).status == 401
    finally:
        await master.stop()


_HOSTILE = "\x1b[31m<script>alert(1)</script>\r\nX-Evil: 1\x07\u2028"
_HOSTILE_PATH = urllib.parse.quote(_HOSTILE, safe="")


def _inert(reply: Reply) -> None:
    """The body reflects no control character and no markup, in its bytes or its values."""
    raw = reply.text
    for bad in ("\x1b", "\r", "\n", "\x07", "\u2028", "<", ">", "\\r", "\\n", "\\u001b"):
        assert bad not in raw, (bad, raw)
    detail = reply.problem["detail"]
    for bad in ("\x1b", "\r", "\n", "\x07", "\u2028"):
        assert bad not in detail, (bad, detail)
    assert reply.headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("DELETE", f"/v1/keys/{_HOSTILE_PATH}"),
        ("DELETE", f"/v1/tokens/{_HOSTILE_PATH}"),
        ("GET", f"/v1/sessions/{_HOSTILE_PATH}"),
        ("DELETE", f"/v1/sessions/{_HOSTILE_PATH}"),
        ("POST", f"/v1/sessions/{_HOSTILE_PATH}/continue"),
    ],
)
async def test_a_hostile_id_in_the_path_is_inert_in_the_problem_body(
    api: Api, method: str, path: str
) -> None:
    """An id of control characters and HTML in the path comes back as neither (404/400)."""
    reply = await api.call(method, path)
    assert reply.status in (400, 404), reply.text
    _inert(reply)


async def test_a_key_id_that_is_not_one_is_not_echoed(api: Api) -> None:
    """DELETE /v1/keys/{id} with an id that is no digest: 404 naming the form, not the id."""
    reply = await api.delete(f"/v1/keys/{_HOSTILE_PATH}")
    assert reply.status == 404, reply.text
    assert reply.problem["code"] == "not_found"
    assert "script" not in reply.problem["detail"]
    assert "64 hex digits" in reply.problem["detail"]


async def test_hostile_names_in_key_bodies_come_back_inert(api: Api) -> None:
    """A key body's unknown scope of markup and escapes is named inertly in the 400."""
    reply = await api.post("/v1/keys", {"scopes": ["<b>\x1b[2J</b>"]})
    assert reply.status == 400, reply.text
    assert reply.problem["code"] == "unknown_scope"
    _inert(reply)
