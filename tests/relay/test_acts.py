"""Every cell of the act table, over each transport that has the act (notes §11, §16.6).

WebSocket: the credential attaches in the cell's role and sends the act's frame. HTTP: the
credential calls the act's route (HTTP callers act as edges). The outcome must be the
table's: allowed → the act happens (logged, or the session ends); refused → ``not_allowed``
(WebSocket: a non-fatal ``session.error``, nothing logged, nothing ends; HTTP: 403).
``cancel_interaction`` has no frame in this build (``agent.interaction.cancel`` comes with
producer acks) and ``end_with_fatal_error`` no route, so each is tested where it exists.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from protocol import acts
from relay.auth import Principal
from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.support.wire import Peer, envelope, new_turn_id

SID = "s-acts"
Credential = tuple[str, frozenset[str]]  # ("key", {}) or ("token", grants)

CLIENT_CREDENTIALS: list[Credential] = [
    ("key", frozenset()),
    ("token", frozenset({"client"})),
    ("token", frozenset({"client", "delete"})),
]
EDGE_CREDENTIALS: list[Credential] = [
    ("key", frozenset()),
    ("token", frozenset()),
    ("token", frozenset({"client"})),
    ("token", frozenset({"delete"})),
]
WS_ACTS: dict[str, list[str]] = {
    "request_deletion": ["client", "edge"],
    "end_with_fatal_error": ["client", "edge"],
    "rename": ["client", "edge"],
    "append_user_input": ["edge"],
    "answer_interaction": ["edge"],
    "cancel_turn": ["edge"],
}
HTTP_ACTS = [
    "request_deletion",
    "rename",
    "append_user_input",
    "answer_interaction",
    "cancel_turn",
    "issue_tokens",
    "fork",
    "export",
]
_ENDS = frozenset({"request_deletion", "end_with_fatal_error"})


def _label(credential: Credential) -> str:
    kind, grants = credential
    return kind + "".join(f"+{g}" for g in sorted(grants))


def _ws_cells() -> list[Any]:
    cells = []
    for act, roles in WS_ACTS.items():
        for role in roles:
            for cred in CLIENT_CREDENTIALS if role == "client" else EDGE_CREDENTIALS:
                cells.append(pytest.param(act, role, cred, id=f"{act}-{role}-{_label(cred)}"))
    return cells


def _http_cells() -> list[Any]:
    return [
        pytest.param(act, cred, id=f"{act}-{_label(cred)}")
        for act in HTTP_ACTS
        for cred in EDGE_CREDENTIALS
    ]


def _expected(act: str, role: str, credential: Credential) -> bool:
    kind, grants = credential
    principal = Principal(kind=kind, workspace="default", session_id=SID, grants=grants)  # type: ignore[arg-type]
    return acts.allowed(act, role, principal)  # type: ignore[arg-type]


async def _secret(master: Master, credential: Credential) -> str:
    kind, grants = credential
    if kind == "key":
        return API_KEY
    token, _ = await master.hub.auth.issue_token("default", SID, grants=grants)
    return token


async def _until(predicate: Callable[[], Awaitable[bool]]) -> None:
    async with asyncio.timeout(5):
        while not await predicate():
            await asyncio.sleep(0.01)


async def _open_turn_with_question(master: Master, client: Peer) -> tuple[str, str]:
    """The client opens a turn and asks a question (both logged); returns their ids."""
    turn = new_turn_id()
    ask = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    asked = await client.send(
        "agent.interaction.request",
        {"interaction_id": ask, "kind": "confirmation", "prompt": "ok?"},
    )
    await _until(lambda: _logged(master, asked["message_id"]))
    return turn, ask


def _act_frame(act: str, role: str, turn: str, ask: str) -> tuple[str, dict[str, Any]]:
    if act == "request_deletion":
        return "session.deleted", {
            "session_id": SID,
            "reason": "user_request",
            "deleted_by": role,
        }
    if act == "end_with_fatal_error":
        return "session.error", {"error_code": "boom", "message": "unrecoverable", "fatal": True}
    if act == "rename":
        return "session.renamed", {"session_id": SID, "name": "renamed", "renamed_by": role}
    if act == "append_user_input":
        return "user.message", {"text": "hello"}
    if act == "answer_interaction":
        return "control.interaction.response", {"interaction_id": ask, "response": True}
    assert act == "cancel_turn"
    return "control.cancel", {"turn_id": turn}


@pytest.mark.parametrize(("act", "role", "credential"), _ws_cells())
async def test_act_over_websocket(
    master: Master, act: str, role: str, credential: Credential
) -> None:
    """The WebSocket path does, or refuses not_allowed, exactly what the act table says."""
    store = master.store
    # steers: an edge's user input during its open turn is relayed at once (notes §17.3)
    owner = await Peer.open(
        master.ws_url, SID, token=API_KEY, create=True, accepts_input_during_turn=True
    )
    secret = await _secret(master, credential)
    if role == "client":
        await owner.close()
        await _until(lambda: _client_gone(master))
        actor = await Peer.open(master.ws_url, SID, token=secret)
        client = actor
    else:
        client = owner
        actor = await Peer.open(master.ws_url, SID, role="edge", token=secret)
    turn, ask = await _open_turn_with_question(master, client)
    type_, payload = _act_frame(act, role, turn, ask)
    sent = await actor.send(type_, payload)
    if _expected(act, role, credential):
        if act in _ENDS:
            deleted = await actor.recv_type("session.deleted")
            assert deleted["sender"]["role"] == "master"
            assert await actor.closed_with() == 1000
            await _until(lambda: _ended(master))
        else:
            await _until(lambda: _logged(master, sent["message_id"]))
    else:
        error = await actor.recv_type("session.error")
        assert error["payload"]["error_code"] == "not_allowed", error
        assert error["payload"]["fatal"] is False
        assert await store.message_seq(SID, sent["message_id"]) is None  # not logged
        assert await store.get_session(SID) is not None  # nothing ended
        assert not master.hub.sessions[SID].terminated


@pytest.mark.parametrize(("act", "credential"), _http_cells())
async def test_act_over_http(master: Master, act: str, credential: Credential) -> None:
    """Every HTTP route that does an act answers as the act table says (403 not_allowed)."""
    # steers: user input during its open turn is taken at once (notes §17.3)
    client = await Peer.open(
        master.ws_url, SID, token=API_KEY, create=True, accepts_input_during_turn=True
    )
    turn, ask = await _open_turn_with_question(master, client)
    secret = await _secret(master, credential)
    base = f"{master.http_url}/v1/sessions/{SID}"
    method, url, body = {
        "request_deletion": ("DELETE", f"{master.http_url}/v1/session/{SID}", None),
        "rename": ("PATCH", base, {"name": "renamed"}),
        "append_user_input": (
            "POST",
            base + "/events",
            {"type": "user.message", "payload": {"text": "hi"}},
        ),
        "answer_interaction": (
            "POST",
            base + "/events",
            {
                "type": "control.interaction.response",
                "payload": {"interaction_id": ask, "response": True},
            },
        ),
        "cancel_turn": ("POST", base + "/cancel", {"turn_id": turn}),
        "issue_tokens": ("POST", base + "/tokens", {}),
        "fork": ("POST", base + "/fork", {}),
        "export": ("GET", base + "/export", None),
    }[act]
    headers = {"Authorization": f"Bearer {secret}"}
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, url, json=body, headers=headers) as response,
    ):
        status = response.status
        answer = await response.json(content_type=None)
    if _expected(act, "edge", credential):
        assert status in (200, 201), answer
        if act == "request_deletion":
            await _until(lambda: _ended(master))
    else:
        assert status == 403, answer
        assert answer["code"] == "not_allowed"
        assert response.headers["Content-Type"].startswith("application/problem+json")
        assert await master.store.get_session(SID) is not None
    await client.close()


async def test_a_viewer_cannot_end_a_session_with_a_fatal_error(master: Master) -> None:
    """Issue 12's attack: a token with no grants sends a fatal session.error; nothing ends."""
    client = await Peer.open(master.ws_url, SID, token=API_KEY, create=True)
    token, _ = await master.hub.auth.issue_token("default", SID)
    viewer = await Peer.open(master.ws_url, SID, role="edge", token=token)
    await viewer.send("session.error", {"error_code": "x", "message": "bye", "fatal": True})
    error = await viewer.recv_type("session.error")
    assert error["payload"] == {
        **error["payload"],
        "error_code": "not_allowed",
        "fatal": False,
    }
    note = await viewer.send("user.message", {"text": "still here"})
    got = await client.recv_type("user.message")
    assert got["message_id"] == note["message_id"]
    assert len(await master.store.read(SID)) >= 2


async def _client_gone(master: Master) -> bool:
    session = master.hub.sessions.get(SID)
    return session is not None and not any(
        p.role == "client" for p in session.participants.values()
    )


async def _ended(master: Master) -> bool:
    """The session ended on this node (deleted, or archived: either way no longer served)."""
    return SID not in master.hub.sessions


async def _logged(master: Master, message_id: str) -> bool:
    return await master.store.message_seq(SID, message_id) is not None


async def test_a_history_cannot_carry_an_act_the_credential_may_not_do(master: Master) -> None:
    """A client token without delete puts a session.deleted in its history: refused, not logged."""
    owner = await Peer.open(master.ws_url, SID, token=API_KEY, create=True)
    edge = await Peer.open(master.ws_url, SID, role="edge", token=API_KEY)
    await owner.close()
    await _until(lambda: _client_gone(master))
    token, _ = await master.hub.auth.issue_token("default", SID, grants=frozenset({"client"}))
    client = await Peer.open(master.ws_url, SID, token=token)
    deleted = envelope(
        SID,
        "session.deleted",
        {"session_id": SID, "reason": "user_request", "deleted_by": "client"},
    )
    note = envelope(SID, "agent.state", {"state": "thinking"})
    history = await client.send(
        "session.history",
        {
            "frames": [deleted, note],
            "buffer_status": {"policy_applied": "RING", "truncated": False, "lost_frame_count": 0},
            "last_sync_timestamp": "2026-11-29T09:00:00Z",
            "last_message_id": "",
        },
    )
    error = await client.recv_type("session.error")
    assert error["payload"]["error_code"] == "not_allowed"
    assert deleted["message_id"] in error["payload"]["message"]
    relayed = await edge.recv_type("session.history")
    assert relayed["message_id"] == history["message_id"]
    assert [f["type"] for f in relayed["payload"]["frames"]] == ["agent.state"]
    assert not master.hub.sessions[SID].terminated
