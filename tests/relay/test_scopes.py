"""Every cell of the act table × every scope × every transport that carries the act (§17.6).

The cells are read from :data:`protocol.acts.TABLE`: a cell no transport below performs is a
failing test, so an act cannot be added to the table without saying where it is checked.
Each test makes a stored key whose scopes are what the transport needs to get to the act
(attaching as the cell's role, or reading the AG-UI stream) plus the one scope under test,
performs the act, and asserts the outcome is the table's: done, or refused (WebSocket: a
non-fatal ``not_allowed`` or close 4403; HTTP: 403 ``not_allowed`` problem) with nothing done.
The dashboard has no transport of its own: it reads and acts over REST and WebSocket.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from websockets.exceptions import ConnectionClosed

from protocol import acts
from relay.auth import Principal
from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.support.wire import Peer, new_turn_id

SID = "s-scope"


@dataclass
class Ctx:
    """A session with its client attached (by the all-scope key), a turn open, a question."""

    master: Master
    client: Peer
    turn: str
    ask: str


async def _until(predicate: Callable[[], Awaitable[bool]], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not await predicate():
            await asyncio.sleep(0.01)


async def _logged(ctx: Ctx, message_id: str) -> bool:
    return await ctx.master.store.message_seq(SID, message_id) is not None


async def _setup(master: Master, *, session: bool = True) -> Ctx | None:
    if not session:
        return None
    # A client that steers: user input during its open turn reaches it at once (notes §17.3).
    client = await Peer.open(
        master.ws_url, SID, token=API_KEY, create=True, accepts_input_during_turn=True
    )
    turn, ask = new_turn_id(), new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    asked = await client.send(
        "agent.interaction.request",
        {"interaction_id": ask, "kind": "confirmation", "prompt": "ok?"},
    )
    ctx = Ctx(master, client, turn, ask)
    await _until(lambda: _logged(ctx, asked["message_id"]))
    return ctx


# --- WebSocket ------------------------------------------------------------------------------


def _frame(act: str, role: str, ctx: Ctx) -> tuple[str, dict[str, Any]]:
    return {
        "request_deletion": (
            "session.deleted",
            {"session_id": SID, "reason": "user_request", "deleted_by": role},
        ),
        "end_with_fatal_error": (
            "session.error",
            {"error_code": "boom", "message": "unrecoverable", "fatal": True},
        ),
        "rename": ("session.renamed", {"session_id": SID, "name": "renamed", "renamed_by": role}),
        "append_user_input": ("user.message", {"text": "hello"}),
        "answer_interaction": (
            "control.interaction.response",
            {"interaction_id": ctx.ask, "response": True},
        ),
        "cancel_turn": ("control.cancel", {"turn_id": ctx.turn}),
    }[act]


async def _actor(ctx: Ctx, role: str, secret: str) -> Peer:
    if role == "client":
        await ctx.client.close()
        await _until(lambda: _no_client(ctx.master))
        return await Peer.open(ctx.master.ws_url, SID, token=secret)
    return await Peer.open(ctx.master.ws_url, SID, role="edge", token=secret)


def ws_frame(act: str, role: str) -> Performer:
    async def perform(master: Master, ctx: Ctx | None, secret: str) -> bool:
        assert ctx is not None
        actor = await _actor(ctx, role, secret)
        type_, payload = _frame(act, role, ctx)
        sent = await actor.send(type_, payload)
        if act in ("request_deletion", "end_with_fatal_error"):
            frames = await actor.recv_until(
                lambda f: (
                    f["type"] == "session.deleted"
                    or (
                        f["type"] == "session.error" and f["payload"]["error_code"] == "not_allowed"
                    )
                )
            )
            frame = frames[-1]
            if frame["type"] == "session.deleted":
                return True
            assert frame["payload"]["fatal"] is False
            assert await master.store.get_session(SID) is not None
            return False
        while True:
            got = await asyncio.wait_for(_logged_or_refused(ctx, actor, sent["message_id"]), 5)
            if got is not None:
                return got

    return perform


async def _logged_or_refused(ctx: Ctx, actor: Peer, message_id: str) -> bool | None:
    if await _logged(ctx, message_id):
        return True
    try:
        frame = await actor.recv(timeout=0.05)
    except TimeoutError:
        return None
    if frame["type"] == "session.error" and frame["payload"]["error_code"] == "not_allowed":
        assert frame["payload"]["fatal"] is False
        assert not await _logged(ctx, message_id)
        return False
    return None


def ws_attach(role: str) -> Performer:
    async def perform(master: Master, ctx: Ctx | None, secret: str) -> bool:
        assert ctx is not None
        if role == "client":
            await ctx.client.close()
            await _until(lambda: _no_client(master))
        peer = await Peer.open(master.ws_url, SID, role=role, token=secret, expect_welcome=False)
        return await _welcomed(peer)

    return perform


async def _welcomed(peer: Peer) -> bool:
    """True when the hello was welcomed; False when refused 4403 (the act table's refusal)."""
    frame: dict[str, Any] = {}
    code: int | None = None
    try:
        frame = await peer.recv()
    except ConnectionClosed as exc:
        code = None if exc.rcvd is None else exc.rcvd.code
    if not frame:
        assert code == 4403
        return False
    if frame["type"] == "connection.welcome":
        await peer.close()
        return True
    assert await peer.closed_with() == 4403, frame
    return False


async def _no_client(master: Master) -> bool:
    session = master.hub.sessions.get(SID)
    return session is None or not any(p.role == "client" for p in session.participants.values())


async def ws_create(master: Master, ctx: Ctx | None, secret: str) -> bool:
    peer = await Peer.open(master.ws_url, "s-made", token=secret, create=True, expect_welcome=False)
    if await _welcomed(peer):
        return True
    assert await master.store.get_session("s-made") is None
    return False


# --- HTTP (REST, SSE, AG-UI) ------------------------------------------------------------------


async def _http(
    master: Master, method: str, path: str, secret: str, body: Any = None
) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.request(
            method,
            master.http_url + path,
            json=body,
            headers={"Authorization": f"Bearer {secret}"},
        ) as response,
    ):
        if response.status == 403:
            problem = await response.json(content_type=None)
            assert response.headers["Content-Type"].startswith("application/problem+json")
            assert problem["code"] == "not_allowed", problem
            return 403, problem
        if response.headers.get("Content-Type", "").startswith("text/event-stream"):
            await response.content.readline()  # the stream opened: that is the read
            return response.status, None
        return response.status, await response.read()


def rest(method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200, 201)) -> Performer:
    async def perform(master: Master, ctx: Ctx | None, secret: str) -> bool:
        the_body = body(ctx) if callable(body) else body
        status, answer = await _http(master, method, path.format(sid=SID), secret, the_body)
        if status == 403:
            return False
        assert status in ok, (status, answer)
        return True

    return perform


def agui_run(what: str) -> Performer:
    def body(ctx: Ctx) -> dict[str, Any]:
        run: dict[str, Any] = {
            "threadId": SID,
            "runId": "r-1",
            "state": {},
            "messages": [],
            "tools": [],
            "context": [],
            "forwardedProps": {},
        }
        if what == "message":
            run["messages"] = [{"id": "m-agui", "role": "user", "content": "hi"}]
        else:
            run["resume"] = [{"interruptId": ctx.ask, "status": "resolved", "payload": True}]
        return run

    async def perform(master: Master, ctx: Ctx | None, secret: str) -> bool:
        assert ctx is not None
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"{master.http_url}/v1/sessions/{SID}/ag-ui",
                json=body(ctx),
                headers={"Authorization": f"Bearer {secret}"},
            ) as response,
        ):
            if response.status == 403:
                problem = await response.json(content_type=None)
                assert problem["code"] == "not_allowed"
                return False
            # The answer starts once the run's frames are appended (its events come later).
            assert response.status == 200
        if what == "message":
            assert await master.store.message_seq(SID, "m-agui") is not None
        return True

    return perform


Performer = Callable[[Master, Ctx | None, str], Awaitable[bool]]

_TAKE = {"type": "control.interaction.response"}
PERFORMERS: dict[tuple[str, str], dict[str, Performer]] = {
    ("attach", "client"): {"websocket": ws_attach("client")},
    ("attach", "edge"): {"websocket": ws_attach("edge")},
    ("create_session", "client"): {"websocket": ws_create},
    ("create_session", "edge"): {"rest": rest("POST", "/v1/sessions", {"session_id": "s-made"})},
    ("read_session", "edge"): {
        "rest": rest("GET", "/v1/sessions/{sid}"),
        "rest-events": rest("GET", "/v1/sessions/{sid}/events"),
        "sse": rest("GET", "/v1/sessions/{sid}/events/stream"),
        "agui": rest("GET", "/v1/sessions/{sid}/ag-ui"),
    },
    ("list_sessions", "edge"): {"rest": rest("GET", "/v1/sessions")},
    ("manage_keys", "edge"): {
        "rest-list": rest("GET", "/v1/keys"),
        "rest-create": rest("POST", "/v1/keys", {"scopes": ["read"]}),
    },
    ("request_deletion", "client"): {"websocket": ws_frame("request_deletion", "client")},
    ("request_deletion", "edge"): {
        "websocket": ws_frame("request_deletion", "edge"),
        "rest": rest("DELETE", "/v1/session/{sid}"),
    },
    ("end_with_fatal_error", "client"): {"websocket": ws_frame("end_with_fatal_error", "client")},
    ("end_with_fatal_error", "edge"): {"websocket": ws_frame("end_with_fatal_error", "edge")},
    ("rename", "client"): {"websocket": ws_frame("rename", "client")},
    ("rename", "edge"): {
        "websocket": ws_frame("rename", "edge"),
        "rest": rest("PATCH", "/v1/sessions/{sid}", {"name": "renamed"}),
    },
    ("append_user_input", "edge"): {
        "websocket": ws_frame("append_user_input", "edge"),
        "rest": rest(
            "POST", "/v1/sessions/{sid}/events", {"type": "user.message", "payload": {"text": "x"}}
        ),
        "agui": agui_run("message"),
    },
    ("answer_interaction", "edge"): {
        "websocket": ws_frame("answer_interaction", "edge"),
        "rest": rest(
            "POST",
            "/v1/sessions/{sid}/events",
            lambda ctx: {**_TAKE, "payload": {"interaction_id": ctx.ask, "response": True}},
        ),
        "agui": agui_run("resume"),
    },
    # agent.interaction.cancel has no frame in this build (it comes with producer acks).
    ("cancel_interaction", "client"): {},
    ("cancel_turn", "edge"): {
        "websocket": ws_frame("cancel_turn", "edge"),
        "rest": rest("POST", "/v1/sessions/{sid}/cancel", {}),
    },
    ("issue_tokens", "edge"): {"rest": rest("POST", "/v1/sessions/{sid}/tokens", {})},
    ("fork", "edge"): {"rest": rest("POST", "/v1/sessions/{sid}/fork", {})},
    # The session is live: past the act check, continue answers 409 not_ended.
    ("continue_session", "edge"): {
        "rest": rest("POST", "/v1/sessions/{sid}/continue", {}, ok=(409,))
    },
    ("export", "edge"): {"rest": rest("GET", "/v1/sessions/{sid}/export")},
}
WITHOUT_TRANSPORT = {("cancel_interaction", "client")}
"""Cells no transport of this build carries (stated, so a forgotten one still fails)."""


def _entry_scopes(act: str, role: str, transport: str) -> frozenset[str]:
    """What the actor needs to get to the act on this transport (beside the act's scope)."""
    if transport == "websocket" and act not in ("attach", "create_session"):
        return frozenset({acts.TABLE["attach", role].scope})  # type: ignore[index]
    if transport == "agui" and act != "read_session":
        return frozenset({"read"})  # the run answers with the session's stream
    return frozenset()


def _cells() -> list[Any]:
    cells = []
    for act, role in sorted(acts.TABLE):
        transports = PERFORMERS.get((act, role))
        if transports is None or (not transports and (act, role) not in WITHOUT_TRANSPORT):
            cells.append(pytest.param(act, role, "missing", "read", id=f"{act}-{role}-missing"))
            continue
        for transport in transports:
            for scope in sorted(acts.SCOPES):
                cells.append(
                    pytest.param(
                        act, role, transport, scope, id=f"{act}-{role}-{transport}-{scope}"
                    )
                )
    return cells


def test_every_performed_cell_is_in_the_table() -> None:
    """No performer outlives its cell (a removed act leaves no stale test)."""
    assert set(PERFORMERS) <= set(acts.TABLE)


@pytest.mark.parametrize(("act", "role", "transport", "scope"), _cells())
async def test_scope_of_each_cell(
    master: Master, act: str, role: str, transport: str, scope: str
) -> None:
    """A key with the entry scopes plus ``scope`` is allowed the act iff the table says so."""
    assert transport != "missing", f"no transport performs the act table's cell {act}/{role}"
    scopes = _entry_scopes(act, role, transport) | {scope}
    secret, _ = await master.hub.auth.create_key("default", scopes)
    expected = acts.allowed(
        act,  # type: ignore[arg-type]
        role,  # type: ignore[arg-type]
        Principal(kind="key", workspace="default", scopes=scopes),
    )
    ctx = await _setup(
        master, session=act not in ("create_session", "manage_keys", "list_sessions")
    )
    perform = PERFORMERS[act, role][transport]
    assert await perform(master, ctx, secret) is expected
