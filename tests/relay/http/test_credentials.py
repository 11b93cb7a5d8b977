"""Credentials on every route (notes §11): session-token scopes, workspaces, expiry, revocation."""

from __future__ import annotations

from typing import Any

import pytest

from relay.auth import digest
from relay.server import Master
from tests.e2e.conftest import API_KEY, OTHER_KEY
from tests.relay.http.conftest import Api, wait_head
from tests.support.wire import Peer

# Every session route, with a body that would be valid for it.
SESSION_ROUTES: list[tuple[str, str, Any]] = [
    ("GET", "", None),
    ("PATCH", "", {"name": "x"}),
    ("GET", "/events", None),
    ("POST", "/events", {"type": "user.message", "payload": {"text": "x"}}),
    ("GET", "/events/stream?after_seq=0", None),
    ("POST", "/cancel", {"turn_id": "t"}),
    ("POST", "/tokens", {}),
    ("POST", "/fork", {}),
    ("GET", "/export", None),
]


async def token_for(api: Api, session_id: str, **body: Any) -> str:
    """A fresh session token for ``session_id``."""
    reply = await api.post(f"/v1/sessions/{session_id}/tokens", body)
    assert reply.status == 201, reply.text
    secret: str = reply.body["token"]
    return secret


async def test_session_token_reads_and_appends_to_its_session(api: Api) -> None:
    """A session token reads its session, appends input and renames it (an edge may)."""
    await api.create("s-mine")
    token = await token_for(api, "s-mine")
    assert (await api.get("/v1/sessions/s-mine", token=token)).status == 200
    assert (await api.get("/v1/sessions/s-mine/events", token=token)).status == 200
    assert (await api.get("/v1/sessions/s-mine/export", token=token)).status == 200
    appended = await api.post(
        "/v1/sessions/s-mine/events",
        {"type": "user.message", "payload": {"text": "from a tab"}},
        token=token,
    )
    assert appended.status == 201
    assert (await api.patch("/v1/sessions/s-mine", {"name": "n"}, token=token)).status == 200


async def test_session_token_cannot_list_or_touch_other_sessions(api: Api) -> None:
    """No listing, no other session (404 on every route), no tokens, forks or creates."""
    await api.create("s-mine")
    await api.create("s-other")
    token = await token_for(api, "s-mine")
    listing = await api.get("/v1/sessions", token=token)
    assert listing.status == 403
    assert listing.problem["code"] == "not_allowed"
    for method, suffix, body in SESSION_ROUTES:
        reply = await api.call(method, f"/v1/sessions/s-other{suffix}", json=body, token=token)
        assert reply.status == 404, (method, suffix, reply.text)
        assert reply.problem["code"] == "not_found"
    for path in ("/v1/session/s-other", "/v1/sessions/s-other"):
        assert (await api.delete(path, token=token)).status == 404
    issue = await api.post("/v1/sessions/s-mine/tokens", {}, token=token)
    assert issue.status == 403
    fork = await api.post("/v1/sessions/s-mine/fork", {}, token=token)
    assert fork.status == 403
    own_delete = await api.delete("/v1/session/s-mine", token=token)
    assert own_delete.status == 403
    assert (await api.get("/v1/sessions/s-other")).status == 200  # untouched


async def test_api_key_cannot_cross_workspaces(api: Api) -> None:
    """Another workspace's key gets 404 on every route of a session it does not own."""
    await api.create("s-default")
    for method, suffix, body in SESSION_ROUTES:
        reply = await api.call(
            method, f"/v1/sessions/s-default{suffix}", json=body, token=OTHER_KEY
        )
        assert reply.status == 404, (method, suffix, reply.text)
        assert reply.problem["code"] == "not_found"
    assert (await api.delete("/v1/session/s-default", token=OTHER_KEY)).status == 404
    assert (await api.get("/v1/sessions/s-default")).status == 200


async def test_missing_or_unknown_credentials_are_401(api: Api) -> None:
    """No credential, or an unknown one: 401 problem with WWW-Authenticate."""
    await api.create("s-auth")
    for token in (None, "rk_nope", "st_nope"):
        reply = await api.get("/v1/sessions/s-auth", token=token)
        assert reply.status == 401
        assert reply.problem["code"] == "bad_credential"
        assert reply.headers["WWW-Authenticate"].startswith("Bearer")
    basic = await api.get("/v1/sessions", headers={"Authorization": f"Basic {API_KEY}"}, token=None)
    assert basic.status == 401


async def test_expired_token_is_refused_over_http_and_websocket(api: Api, master: Master) -> None:
    """A token past its expiry is refused: 401 on HTTP, close 4401 on attach."""
    await api.create("s-exp")
    token, _ = await master.hub.auth.issue_token("default", "s-exp", ttl_s=-1)
    reply = await api.get("/v1/sessions/s-exp", token=token)
    assert reply.status == 401
    assert "expired" in reply.problem["detail"]
    peer = await Peer.open(master.ws_url, "s-exp", role="edge", token=token, expect_welcome=False)
    assert await peer.closed_with() == 4401


async def test_revoked_token_is_refused_and_its_connections_closed(
    api: Api, master: Master
) -> None:
    """DELETE /v1/tokens/{id} refuses the token from then on and closes its sockets."""
    created = await api.create("s-rev")
    token = created.body["token"]["token"]
    token_id = created.body["token"]["token_id"]
    assert token_id == digest(token)
    edge = await Peer.open(master.ws_url, "s-rev", role="edge", token=token)
    revoked = await api.delete(f"/v1/tokens/{token_id}")
    assert revoked.status == 200
    assert revoked.body == {"token_id": token_id, "revoked": True}
    assert await edge.closed_with() == 4401
    refused = await api.get("/v1/sessions/s-rev", token=token)
    assert refused.status == 401
    assert "revoked" in refused.problem["detail"]
    again = await Peer.open(master.ws_url, "s-rev", role="edge", token=token, expect_welcome=False)
    assert await again.closed_with() == 4401
    twice = await api.delete(f"/v1/tokens/{token_id}")
    assert twice.status == 200


async def test_token_revocation_scope(api: Api) -> None:
    """A token revokes itself only; other workspaces and unknown ids answer 404."""
    await api.create("s-a")
    mine = await token_for(api, "s-a")
    other = await token_for(api, "s-a")
    cross = await api.delete(f"/v1/tokens/{digest(other)}", token=mine)
    assert cross.status == 404
    foreign = await api.delete(f"/v1/tokens/{digest(other)}", token=OTHER_KEY)
    assert foreign.status == 404
    unknown = await api.delete(f"/v1/tokens/{'0' * 64}")
    assert unknown.status == 404
    key = await api.delete(f"/v1/tokens/{digest(API_KEY)}")
    assert key.status == 403
    signed_out = await api.delete(f"/v1/tokens/{digest(mine)}", token=mine)
    assert signed_out.status == 200
    assert (await api.get("/v1/sessions/s-a", token=mine)).status == 401
    assert (await api.get("/v1/sessions/s-a", token=other)).status == 200


async def test_token_grants(api: Api, master: Master) -> None:
    """client lets a token attach as the client; delete lets it delete; others are refused."""
    await api.create("s-grant")
    plain = await token_for(api, "s-grant")
    as_client = await Peer.open(master.ws_url, "s-grant", token=plain, expect_welcome=False)
    assert await as_client.closed_with() == 4403
    client_token = await token_for(api, "s-grant", grants=["client"], ttl_s=60)
    client = await Peer.open(master.ws_url, "s-grant", token=client_token)
    assert client.welcome["payload"]["session"]["session_id"] == "s-grant"
    unknown = await api.post("/v1/sessions/s-grant/tokens", {"grants": ["admin"]})
    assert unknown.status == 400
    assert unknown.problem["code"] == "invalid_body"
    too_long = await api.post("/v1/sessions/s-grant/tokens", {"ttl_s": 10**9})
    assert too_long.status == 400
    deleter = await token_for(api, "s-grant", grants=["delete"])
    deleted = await api.delete("/v1/session/s-grant", token=deleter)
    assert deleted.status == 200
    await client.close()


async def test_websocket_delete_request_needs_the_delete_grant(api: Api, master: Master) -> None:
    """An edge on a plain session token cannot delete the session over the WebSocket."""
    await api.create("s-wsdel")
    token = await token_for(api, "s-wsdel")
    edge = await Peer.open(master.ws_url, "s-wsdel", role="edge", token=token)
    await edge.send(
        "session.deleted",
        {"session_id": "s-wsdel", "reason": "user_request", "deleted_by": "edge"},
    )
    error = await edge.recv_type("session.error")
    assert error["payload"]["error_code"] == "not_allowed"
    assert (await api.get("/v1/sessions/s-wsdel")).status == 200
    await edge.close()


async def test_whoami_describes_the_credential(api: Api) -> None:
    """GET /v1/whoami tells a key from a token, with session, grants and expiry."""
    await api.create("s-who")
    key = await api.get("/v1/whoami")
    assert key.body["kind"] == "key"
    assert key.body["workspace"] == "default"
    assert key.body["session_id"] is None
    token = await token_for(api, "s-who", grants=["delete"])
    who = await api.get("/v1/whoami", token=token)
    assert who.body["kind"] == "token"
    assert who.body["session_id"] == "s-who"
    assert who.body["grants"] == ["delete"]
    assert who.body["expires_at"] is not None
    assert who.body["token_id"] == digest(token)


async def test_credentials_are_stored_hashed(api: Api, master: Master) -> None:
    """The store holds digests, never the secrets."""
    created = await api.create("s-hash")
    token = created.body["token"]["token"]
    assert await master.store.get_credential(token) is None
    record = await master.store.get_credential(digest(token))
    assert record is not None
    assert token not in repr(record)


@pytest.mark.parametrize("path", ["/v1/sessions/s-none/events", "/v1/sessions/s-none/export"])
async def test_reads_of_unknown_sessions_are_404(api: Api, path: str) -> None:
    """Reading a session that does not exist answers 404 like reading a hidden one."""
    reply = await api.get(path)
    assert reply.status == 404
    assert reply.problem["code"] == "not_found"


async def test_token_attach_is_scoped_to_its_session(api: Api, master: Master) -> None:
    """A session token cannot attach to another session: it looks absent (4404, issue 12)."""
    await api.create("s-one")
    await api.create("s-two")
    token = await token_for(api, "s-one")
    peer = await Peer.open(master.ws_url, "s-two", role="edge", token=token, expect_welcome=False)
    assert await peer.closed_with() == 4404
    await wait_head(api, "s-two", 0)


async def test_token_does_not_outlive_its_session(api: Api, master: Master) -> None:
    """A token from before a session's (re)creation does not open the new session."""
    await api.create("s-again")
    old, record = await master.hub.auth.issue_token("default", "s-again")
    assert (await api.get("/v1/sessions/s-again", token=old)).status == 200
    assert (await api.delete("/v1/session/s-again")).status == 200
    record.created_at_ms -= 60_000  # as if issued a minute before the new session
    await master.store.put_credential(record)
    await api.create("s-again")
    assert (await api.get("/v1/sessions/s-again", token=old)).status == 404
    fresh = await token_for(api, "s-again")
    assert (await api.get("/v1/sessions/s-again", token=fresh)).status == 200
