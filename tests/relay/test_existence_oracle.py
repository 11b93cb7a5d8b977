"""Another workspace's session looks exactly like an absent one (issue 12), everywhere.

For every route and for the WebSocket hello, a credential that may not see session ``S``
gets the same answer for ``S`` as for an id that was never used — status, problem code,
detail (with the id swapped), close code and close reason.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from relay.server import Master
from tests.e2e.conftest import API_KEY, OTHER_KEY
from tests.e2e.util import hello
from tests.support.wire import Peer

SEEN = "s-theirs"
ABSENT = "s-never"
ROUTES: list[tuple[str, str, Any]] = [
    ("GET", "/v1/sessions/{id}", None),
    ("PATCH", "/v1/sessions/{id}", {"name": "mine now"}),
    ("GET", "/v1/sessions/{id}/events", None),
    ("POST", "/v1/sessions/{id}/events", {"type": "user.message", "payload": {"text": "x"}}),
    ("GET", "/v1/sessions/{id}/events/stream", None),
    ("POST", "/v1/sessions/{id}/cancel", {}),
    ("POST", "/v1/sessions/{id}/tokens", {}),
    ("POST", "/v1/sessions/{id}/fork", {}),
    ("GET", "/v1/sessions/{id}/export", None),
    ("GET", "/v1/sessions/{id}/export?format=md", None),
    ("DELETE", "/v1/session/{id}", None),
    ("DELETE", "/v1/sessions/{id}", None),
    ("DELETE", "/v1/session/{id}?if_idle=true", None),
    ("DELETE", "/v1/session/{id}?if_absent=ok", None),
    ("POST", "/v1/sessions", {"parent_session_id": "{id}"}),
]


async def _answer(master: Master, secret: str, method: str, path: str, body: Any) -> Any:
    async with (
        aiohttp.ClientSession() as http,
        http.request(
            method, master.http_url + path, json=body, headers={"Authorization": f"Bearer {secret}"}
        ) as response,
    ):
        text = await response.text()
        return response.status, response.headers.get("Content-Type"), text


async def _session_with_a_client(master: Master) -> Peer:
    client = await Peer.open(master.ws_url, SEEN, token=API_KEY, create=True)
    await client.send(
        "session.turn.start", {"turn_id": "6f1b7f3e-8d5c-4a44-9e4a-3c2f0d1e2a10", "turn_index": 0}
    )
    return client


async def _strangers(master: Master) -> list[str]:
    """Another workspace's key, and a token of another session of the same workspace."""
    await Peer.open(master.ws_url, "s-mine", token=API_KEY, create=True)
    token, _ = await master.hub.auth.issue_token("default", "s-mine")
    return [OTHER_KEY, token]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES, ids=[f"{m} {p}" for m, p, _ in ROUTES])
async def test_every_route_answers_a_hidden_session_like_an_absent_one(
    master: Master, method: str, path: str, body: Any
) -> None:
    """Status, content type and body are the same for the hidden id and a never-used one."""
    client = await _session_with_a_client(master)
    for secret in await _strangers(master):
        answers = []
        for session_id in (SEEN, ABSENT):
            sent = (
                None
                if body is None
                else {
                    k: (v.replace("{id}", session_id) if isinstance(v, str) else v)
                    for k, v in body.items()
                }
            )
            status, kind, text = await _answer(
                master, secret, method, path.replace("{id}", session_id), sent
            )
            answers.append((status, kind, text.replace(session_id, "{id}")))
        assert answers[0] == answers[1], (secret[:8], answers)
        assert answers[0][0] < 500
    assert not master.hub.sessions[SEEN].terminated  # and nothing was done to it
    await client.close()


async def _close(master: Master, message: str) -> tuple[int | None, str | None]:
    async with connect(master.ws_url, subprotocols=["rawp.1"]) as ws:  # type: ignore[list-item]
        await ws.send(message)
        try:
            while True:
                await ws.recv()
        except ConnectionClosed:
            pass
        return ws.close_code, ws.close_reason


@pytest.mark.parametrize("role", ["client", "edge"])
async def test_the_socket_answers_a_hidden_session_like_an_absent_one(
    master: Master, role: str
) -> None:
    """A hello for the hidden id closes 4404 with the reason an absent id gets."""
    client = await _session_with_a_client(master)
    for secret in await _strangers(master):
        seen = await _close(master, hello(SEEN, token=secret, role=role))
        absent = await _close(master, hello(ABSENT, token=secret, role=role))
        assert seen[0] == absent[0] == 4404
        assert (seen[1] or "").replace(SEEN, "{id}") == (absent[1] or "").replace(ABSENT, "{id}")
    await client.close()
