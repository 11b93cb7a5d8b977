"""The opening of a connection: subprotocol, origin, hello, credentials, welcome (notes §5, §14)."""

from __future__ import annotations

import json

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from relay.server import Master
from tests.e2e.conftest import API_KEY, OTHER_KEY
from tests.e2e.util import detached, hello, hello_close_code, logged, open_session, wait_until
from tests.support.wire import Peer, envelope


async def test_welcome_describes_participant_and_session(master: Master) -> None:
    """A creating client's welcome carries its new identity, the session and the limits."""
    client = await Peer.open(master.ws_url, "s-hs-welcome", token=API_KEY, create={"name": "n1"})
    p = client.welcome["payload"]
    assert client.welcome["sender"] == {"role": "master", "participant_id": "m-test"}
    assert p["participant_id"].startswith("p-")
    assert p["generation"] == 1
    assert p["resumed"] is False
    session = p["session"]
    assert session["session_id"] == "s-hs-welcome"
    assert session["name"] == "n1"
    assert session["status"] == "idle"
    assert session["head_seq"] == 0
    assert isinstance(session["epoch"], str)
    assert session["epoch"]
    assert session["created_at"]
    assert p["reattach_window_ms"] == 2000
    assert p["heartbeat_interval_ms"] == 20000
    assert p["max_frame_bytes"] == master.settings.max_frame_bytes
    assert p["buffer"] == {"policy": "RING", "capacity_bytes": master.settings.buffer_capacity}
    assert p.get("received", {}).get("last_message_id") is None
    await client.close()


async def test_rewelcome_reports_generation_head_and_last_received(master: Master) -> None:
    """Reattaching with the participant id resumes it: generation 2, head_seq, last frame kept."""
    client = await open_session(master, "s-hs-rewelcome")
    sent = await client.send("agent.state", {"state": "thinking"})
    epoch = client.welcome["payload"]["session"]["epoch"]
    await wait_until(lambda: master.store.message_seq("s-hs-rewelcome", sent["message_id"]))
    edge = await Peer.open(master.ws_url, "s-hs-rewelcome", role="edge", token=API_KEY)
    # head_seq is the log's head as the edge joined; its own presence notice came after.
    log = await logged(master, "s-hs-rewelcome")
    assert log[-1]["type"] == "session.presence"
    assert log[-1]["payload"]["participant_id"] == edge.participant_id
    assert edge.welcome["payload"]["session"]["head_seq"] == log[-1]["seq"] - 1
    await client.close()
    await detached(master, "s-hs-rewelcome", client)  # a detach, not a takeover
    again = await Peer.open(
        master.ws_url, "s-hs-rewelcome", token=API_KEY, participant_id=client.participant_id
    )
    p = again.welcome["payload"]
    assert p["participant_id"] == client.participant_id
    assert p["generation"] == 2
    assert p["resumed"] is True
    assert p["session"]["epoch"] == epoch
    log = await logged(master, "s-hs-rewelcome")
    assert log[-1]["payload"] == {
        "participant_id": client.participant_id,
        "role": "client",
        "state": "attached",
    }
    assert p["session"]["head_seq"] == log[-1]["seq"] - 1
    assert p["received"]["last_message_id"] == sent["message_id"]
    await again.close()
    await edge.close()


async def test_unknown_participant_id_gets_a_fresh_one(master: Master) -> None:
    """An unknown participant_id is not an error: a fresh id, resumed false."""
    client = await Peer.open(
        master.ws_url, "s-hs-fresh", token=API_KEY, create=True, participant_id="p-nobody"
    )
    assert client.participant_id != "p-nobody"
    assert client.welcome["payload"]["resumed"] is False
    await client.close()


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("not json", "this is not json"),
        ("json but not an object", "[1, 2, 3]"),
        (
            "a frame that is not a hello",
            json.dumps(envelope("s-x", "user.message", {"text": "hi"})),
        ),
        ("hello without token", hello("s-x", token=None)),
        ("hello without protocol_version", hello("s-x", protocol_version=None)),
        ("hello with an unknown role", hello("s-x", role="master")),
        ("binary first frame", hello("s-x").encode()),
    ],
)
async def test_malformed_or_missing_hello_closes_4400(
    master: Master, case: str, message: str | bytes
) -> None:
    """Anything but a valid connection.hello as the first frame closes 4400."""
    assert await hello_close_code(master, message) == 4400, case


async def test_no_hello_within_timeout_closes_4408(master: Master) -> None:
    """A connection that sends nothing is closed 4408 after the hello timeout."""
    assert master.settings.hello_timeout_s == 1.0
    assert await hello_close_code(master, None, timeout=10) == 4408


@pytest.mark.parametrize("version", ["2.0", "2.0.0", "1.1.0", "0.9"])
async def test_other_protocol_version_closes_4426(master: Master, version: str) -> None:
    """protocol_version outside 1.0.x closes 4426."""
    message = hello("s-hs-version", protocol_version=version, create={})
    assert await hello_close_code(master, message) == 4426


async def test_same_minor_protocol_version_is_accepted(master: Master) -> None:
    """Any 1.0.x protocol_version is accepted."""
    async with connect(master.ws_url, subprotocols=["rawp.1"]) as ws:  # type: ignore[list-item]
        await ws.send(hello("s-hs-v107", protocol_version="1.0.7", create={}))
        assert json.loads(await ws.recv())["type"] == "connection.welcome"


@pytest.mark.parametrize("token", ["rk_not_a_key", "st_not_a_token"])
async def test_unknown_credential_closes_4401(master: Master, token: str) -> None:
    """An unknown API key or session token closes 4401."""
    await open_session(master, "s-hs-4401")
    assert await hello_close_code(master, hello("s-hs-4401", token=token)) == 4401


async def test_session_of_another_workspace_looks_absent(master: Master) -> None:
    """Another workspace's key gets 4404 exactly as for an absent id; creating over it 4403."""
    await open_session(master, "s-hs-4403")
    for role in ("client", "edge"):
        foreign = await hello_close_code(master, hello("s-hs-4403", token=OTHER_KEY, role=role))
        absent = await hello_close_code(master, hello("s-hs-none", token=OTHER_KEY, role=role))
        assert foreign == absent == 4404, role
    taken = hello("s-hs-4403", token=OTHER_KEY, role="client", create={})
    assert await hello_close_code(master, taken) == 4403  # ids are one namespace


async def test_session_token_scope(master: Master) -> None:
    """A session token attaches as edge to its own session only, as client only with the grant."""
    await open_session(master, "s-hs-token")
    await open_session(master, "s-hs-token-other")
    token, _ = await master.hub.auth.issue_token("default", "s-hs-token")
    edge = await Peer.open(master.ws_url, "s-hs-token", role="edge", token=token)
    assert edge.welcome["payload"]["session"]["session_id"] == "s-hs-token"
    await edge.close()
    assert await hello_close_code(master, hello("s-hs-token", token=token)) == 4403
    other = hello("s-hs-token-other", token=token, role="edge")
    assert await hello_close_code(master, other) == 4404  # another session: absent for it


async def test_origin_not_allowed_is_refused_403_at_upgrade(master: Master) -> None:
    """A browser origin that is not allowed gets HTTP 403 before any WebSocket exists."""
    with pytest.raises(InvalidStatus) as info:
        await connect(master.ws_url, subprotocols=["rawp.1"], origin="https://evil.example")  # type: ignore[list-item,arg-type]
    assert info.value.response.status_code == 403


async def test_own_dashboard_origin_is_allowed(master: Master) -> None:
    """The master's own HTTP origin may open a WebSocket."""
    own = f"http://127.0.0.1:{master.http_port}"
    async with connect(master.ws_url, subprotocols=["rawp.1"], origin=own) as ws:  # type: ignore[list-item,arg-type]
        await ws.send(hello("s-hs-origin", create={}))
        assert json.loads(await ws.recv())["type"] == "connection.welcome"


async def test_configured_origin_is_allowed(make_master: object) -> None:
    """An origin listed in allowed_origins may open a WebSocket."""
    master: Master = await make_master(allowed_origins=("https://app.example",))  # type: ignore[operator]
    async with connect(
        master.ws_url,
        subprotocols=["rawp.1"],  # type: ignore[list-item]
        origin="https://app.example",  # type: ignore[arg-type]
    ) as ws:
        await ws.send(hello("s-hs-origin2", create={}))
        assert json.loads(await ws.recv())["type"] == "connection.welcome"


async def test_foreign_subprotocol_only_is_refused_400(master: Master) -> None:
    """A handshake that offers subprotocols but not rawp.1 fails with HTTP 400."""
    with pytest.raises(InvalidStatus) as info:
        await connect(master.ws_url, subprotocols=["chat", "rawp.2"])  # type: ignore[list-item]
    assert info.value.response.status_code == 400


async def test_no_subprotocol_offered_is_accepted(master: Master) -> None:
    """A handshake that offers no subprotocol is accepted and speaks RAWP."""
    async with connect(master.ws_url) as ws:
        assert ws.subprotocol is None
        await ws.send(hello("s-hs-nosub", create={}))
        assert json.loads(await ws.recv())["type"] == "connection.welcome"


async def test_rawp_subprotocol_is_selected_among_others(master: Master) -> None:
    """rawp.1 is selected when offered beside others."""
    async with connect(master.ws_url, subprotocols=["chat", "rawp.1"]) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == "rawp.1"


async def test_wrong_path_is_refused_404(master: Master) -> None:
    """Only /v1/ws serves RAWP."""
    with pytest.raises(InvalidStatus) as info:
        await connect(master.ws_url.replace("/v1/ws", "/ws"), subprotocols=["rawp.1"])  # type: ignore[list-item]
    assert info.value.response.status_code == 404


async def test_unknown_session_without_create_closes_4404(master: Master) -> None:
    """A client hello for an unknown session without create closes 4404."""
    assert await hello_close_code(master, hello("s-hs-none")) == 4404
    assert await master.store.get_session("s-hs-none") is None


async def test_edge_with_create_for_unknown_session_closes_4404(master: Master) -> None:
    """create is for clients only: an edge's create does not make the session (4404)."""
    message = hello("s-hs-edge-create", role="edge", create={"name": "x"})
    assert await hello_close_code(master, message) == 4404
    assert await master.store.get_session("s-hs-edge-create") is None


async def test_create_is_idempotent(master: Master) -> None:
    """A second client hello with create joins the existing session (same epoch, same log)."""
    first = await open_session(master, "s-hs-idem")
    await first.send("agent.state", {"state": "thinking"})
    await first.close()
    await detached(master, "s-hs-idem", first)
    second = await Peer.open(master.ws_url, "s-hs-idem", token=API_KEY, create={"name": "other"})
    p = second.welcome["payload"]["session"]
    assert p["epoch"] == first.welcome["payload"]["session"]["epoch"]
    assert p["name"] == "test"
    assert any(f["type"] == "agent.state" for f in await logged(master, "s-hs-idem"))
    await second.close()


async def test_second_client_while_one_is_attached_closes_4409(master: Master) -> None:
    """A client hello with another participant id while a client is attached: 4409."""
    client = await open_session(master, "s-hs-4409")
    assert await hello_close_code(master, hello("s-hs-4409", create={})) == 4409
    # The attached client is untouched.
    await client.send("agent.state", {"state": "thinking"})
    edge = await Peer.open(
        master.ws_url, "s-hs-4409", role="edge", token=API_KEY, resume={"last_seq": 0}
    )
    history = await edge.recv()
    assert any(f["type"] == "agent.state" for f in history["payload"]["frames"])
    await client.close()
    await edge.close()


async def test_new_client_replaces_a_detached_one(master: Master) -> None:
    """With the old client detached, a new client id becomes the session's client."""
    old = await open_session(master, "s-hs-replace")
    edge = await Peer.open(master.ws_url, "s-hs-replace", role="edge", token=API_KEY)
    await old.close()
    assert (await edge.recv())["payload"] == {
        "participant_id": old.participant_id,
        "role": "client",
        "state": "detached",
    }
    new = await Peer.open(master.ws_url, "s-hs-replace", token=API_KEY)
    assert new.participant_id != old.participant_id
    states = [
        (f["payload"]["participant_id"], f["payload"]["state"])
        for f in await edge.recv_until(lambda f: f["payload"].get("state") == "attached")
    ]
    assert (old.participant_id, "expired") in states
    assert states[-1] == (new.participant_id, "attached")
    await new.close()
    await edge.close()
