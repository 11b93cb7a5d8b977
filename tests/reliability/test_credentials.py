"""Every cell of the credential matrix (tests/reliability/credential_matrix.py) on a master."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from typing import Any

import aiohttp
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from relay.auth import Principal, digest
from relay.hub import new_session_header
from relay.server import Master
from relay.store.base import Credential
from tests.e2e.conftest import API_KEY, OTHER_KEY
from tests.reliability.credential_matrix import (
    CREDENTIALS,
    EXEMPT_ROUTES,
    MATRIX,
    OK,
    ROUTES,
    Request,
)
from tests.support.wire import envelope

_KEY = Principal(kind="key", workspace="default")


class World:
    """A fresh session S (and S2) and one credential of each kind for it."""

    def __init__(self, master: Master) -> None:
        self.master = master
        tag = uuid.uuid4().hex[:10]
        self.s = f"s-cm-{tag}"
        self.s2 = f"s-cm2-{tag}"
        self.new = f"s-cmnew-{tag}"
        self.secrets: dict[str, str | None] = {}
        self.victim_id = ""  # a token of S that the "(a token of S)" row revokes
        self.victim_key_id = ""  # a stored key of S's workspace that a keys row revokes

    async def build(self) -> World:
        hub = self.master.hub
        auth = hub.auth
        for sid in (self.s, self.s2):
            await hub.create(new_session_header(sid, "default"), _KEY)

        async def token(**kw: Any) -> tuple[str, Credential]:
            return await auth.issue_token("default", self.s, **kw)

        self.secrets["key"] = API_KEY
        self.secrets["key_other_ws"] = OTHER_KEY
        self.secrets["token"] = (await token())[0]
        self.secrets["token_client"] = (await token(grants=frozenset({"client"})))[0]
        self.secrets["token_delete"] = (await token(grants=frozenset({"delete"})))[0]
        self.secrets["token_other_session"] = (await auth.issue_token("default", self.s2))[0]
        self.secrets["token_expired"] = (await token(ttl_s=-1))[0]
        revoked, record = await token()
        await auth.revoke(record.digest)
        self.secrets["token_revoked"] = revoked
        self.secrets["unknown"] = "st_" + uuid.uuid4().hex
        self.secrets["none"] = None
        self.victim_id = (await token())[1].digest
        self.victim_key_id = (await auth.create_key("default", ["read"]))[1].digest
        return self

    def path(self, template: str, credential: str) -> str:
        secret = self.secrets[credential]
        own = digest(secret) if secret else "none"
        return template.format(
            S=self.s, S2=self.s2, NEW=self.new, T=self.victim_id, OWN=own, K=self.victim_key_id
        )


async def _ws(master: Master, world: World, credential: str, request: Request) -> int | str:
    session_id = world.path(request.path, credential)
    payload: dict[str, Any] = {"protocol_version": "1.0.2", "role": request.method}
    secret = world.secrets[credential]
    if secret is not None:
        payload["token"] = secret
    if request.create:
        payload["create"] = {"name": "matrix"}
    async with connect(master.ws_url, subprotocols=["rawp.1"]) as ws:  # type: ignore[list-item]
        await ws.send(json.dumps(envelope(session_id, "connection.hello", payload)))
        try:
            first = json.loads(await asyncio.wait_for(ws.recv(), 5))
        except ConnectionClosed:
            code = ws.close_code
            assert code is not None
            return code
        assert first["type"] == "connection.welcome", first
        return OK


async def _http(
    http: aiohttp.ClientSession, master: Master, world: World, credential: str, request: Request
) -> int:
    secret = world.secrets[credential]
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    url = master.http_url + world.path(request.path, credential)
    async with http.request(request.method, url, json=request.body, headers=headers) as response:
        if not request.stream:
            await response.read()
        return response.status


async def _cell(
    http: aiohttp.ClientSession, master: Master, credential: str, request: Request
) -> int | str:
    world = await World(master).build()
    if request.kind == "ws":
        return await _ws(master, world, credential, request)
    return await _http(http, master, world, credential, request)


def test_the_matrix_is_complete() -> None:
    """Every row has one outcome per credential and a request to perform it."""
    for action, outcomes in MATRIX.items():
        assert len(outcomes) == len(CREDENTIALS), action
        assert action in ROUTES, f"no request for {action!r}"
    assert set(ROUTES) == set(MATRIX)


@pytest.mark.parametrize("action", list(MATRIX))
async def test_credential_matrix_row(make_master: Any, action: str) -> None:
    """One row of the matrix: every credential gets exactly the outcome the table says."""
    master: Master = await make_master(reattach_window_s=60.0)
    request = ROUTES[action]
    got: dict[str, int | str] = {}
    async with aiohttp.ClientSession() as http:
        for credential in CREDENTIALS:
            got[credential] = await _cell(http, master, credential, request)
    expected = dict(zip(CREDENTIALS, MATRIX[action], strict=True))
    wrong = {
        c: f"expected {expected[c]}, got {got[c]}" for c in CREDENTIALS if got[c] != expected[c]
    }
    assert not wrong, f"{action}: {wrong}"
    assert not master.hub.shutting_down


async def test_every_route_is_in_the_matrix(master: Master) -> None:
    """A route added to the master without a row in the matrix fails here."""
    from relay.http import create_app
    from relay.hub import Hub
    from relay.store.memory import MemoryStore

    app = create_app(Hub(master.settings, MemoryStore()))  # a second app: its own metrics
    covered = {
        (r.method, re.sub(r"\{S2?\}", "{session_id}", r.path))
        for r in ROUTES.values()
        if r.kind == "http"
    }
    covered |= {
        (m, p.replace("{T}", "{token_id}").replace("{OWN}", "{token_id}")) for m, p in covered
    } | {(m, p.replace("{K}", "{key_id}").replace("{OWN}", "{key_id}")) for m, p in covered}
    missing = []
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter") or ""
        method = route.method
        if method == "HEAD" and ("GET", path) in covered:
            continue
        if (method, path) in covered or (method, path) in EXEMPT_ROUTES:
            continue
        missing.append(f"{method} {path}")
    assert not missing, f"routes without a row in credential_matrix.py: {missing}"
