"""Handshake and connection rules (rawp-notes §2, §5, §14 close codes, §15.6, §15.7).

The close codes a master must use for each refusal, the welcome it must send, subprotocol
negotiation, takeover of a participant by a newer connection, presence, and the transport
limits (frame size, binary messages).
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from ..case import case, expect, fail, skip
from ..peer import HandshakeRefused, describe
from ..runner import Context
from ..wire import is_synthetic, new_id, presence_change
from .common import window_fits

__all__: list[str] = []

_STATUSES = {"idle", "running", "requires_action", "rescheduling", "terminated"}
_POLICIES = {"RING", "DROP", "NONE"}
_BAD_KEY = "rk_conformance_definitely_not_a_key"


def _is_int(value: Any, minimum: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


@case(
    id="notes-5/welcome",
    level="MUST",
    description="a valid hello is answered with connection.welcome carrying every required field",
    kill="report resumed: true to a participant the master has never seen",
)
async def welcome(ctx: Context) -> None:
    client = await ctx.client()
    frame = client.welcome
    p = frame["payload"]
    expect(frame.get("session_id") == ctx.session_id, "welcome.session_id is not the session")
    expect(isinstance(p.get("participant_id"), str) and p["participant_id"], "no participant_id")
    expect(_is_int(p.get("generation")), f"generation is not a count: {p.get('generation')!r}")
    expect(
        p.get("resumed") is False,
        f"a first attach must have resumed: false, got {p.get('resumed')!r}",
    )
    session = p.get("session")
    expect(isinstance(session, dict), "welcome.payload.session is missing")
    assert isinstance(session, dict)
    expect(session.get("session_id") == ctx.session_id, "welcome.session.session_id is wrong")
    expect(session.get("status") in _STATUSES, f"session.status {session.get('status')!r}")
    expect(_is_int(session.get("head_seq")), f"session.head_seq {session.get('head_seq')!r}")
    expect(isinstance(session.get("epoch"), str) and session["epoch"], "session.epoch missing")
    expect(isinstance(session.get("name"), str), "session.name missing")
    expect(isinstance(session.get("created_at"), str), "session.created_at missing")
    # reattach_window_ms -1: never (notes §17.12)
    window = p.get("reattach_window_ms")
    expect(_is_int(window, -1), f"reattach_window_ms is not a count or -1: {window!r}")
    heartbeat = p.get("heartbeat_interval_ms")
    expect(_is_int(heartbeat), f"heartbeat_interval_ms is not a count: {heartbeat!r}")
    expect(_is_int(p.get("max_frame_bytes"), 1), f"max_frame_bytes {p.get('max_frame_bytes')!r}")
    buffer = p.get("buffer")
    expect(
        isinstance(buffer, dict)
        and buffer.get("policy") in _POLICIES
        and _is_int(buffer.get("capacity_bytes")),
        f"welcome.buffer must be {{policy, capacity_bytes}}, got {buffer!r}",
    )
    edge = await ctx.edge()
    expect(edge.participant_id != client.participant_id, "two participants got the same id")
    expect(edge.welcome["payload"].get("resumed") is False, "a new edge must get resumed: false")


@case(
    id="notes-2/subprotocol-selected",
    level="MUST",
    description="a handshake offering rawp.1 gets rawp.1 selected",
    kill="do not select a subprotocol in the handshake response",
)
async def subprotocol_selected(ctx: Context) -> None:
    peer = await ctx.connect(label="client", subprotocols=["rawp.1"])
    expect(peer.subprotocol == "rawp.1", f"selected subprotocol {peer.subprotocol!r}, not rawp.1")


@case(
    id="notes-2/foreign-subprotocol-refused",
    level="MUST",
    description="a handshake offering subprotocols but not rawp.1 fails with HTTP 400",
    kill="accept a handshake that offers only foreign subprotocols",
)
async def foreign_subprotocol(ctx: Context) -> None:
    try:
        peer = await ctx.connect(label="socket", subprotocols=["chat.v2"])
    except HandshakeRefused as exc:
        expect(exc.status == 400, f"refused with HTTP {exc.status}, expected 400")
        return
    fail(f"the handshake was accepted (selected subprotocol {peer.subprotocol!r})")


@case(
    id="notes-15.7/no-subprotocol-accepted",
    level="MUST",
    description="a handshake that offers no subprotocol is accepted as rawp.1",
    kill="refuse handshakes that offer no subprotocol",
)
async def no_subprotocol(ctx: Context) -> None:
    try:
        peer = await ctx.connect(label="client", subprotocols=None)
    except HandshakeRefused as exc:
        fail(f"the handshake without subprotocols was refused with HTTP {exc.status}")
        return
    await peer.hello(ctx.session_id, role="client", token=ctx.target.api_key, create={})
    await peer.read_welcome()


@case(
    id="notes-5/4400-malformed-hello",
    level="MUST",
    description="a first frame that is not JSON, or not a connection.hello, is closed with 4400",
    kill="close malformed hellos with 1008 instead of 4400",
)
async def malformed_hello(ctx: Context) -> None:
    peer = await ctx.connect(label="socket#1")
    await peer.send_raw("this is not JSON")
    await peer.expect_close(what="close 4400 after a non-JSON first frame")
    expect(
        peer.close_code == 4400, f"non-JSON first frame: closed with {peer.close_code}, not 4400"
    )
    peer = await ctx.connect(label="socket#2")
    peer.session_id = ctx.session_id
    await peer.send("user.message", {"text": "hello?"})
    await peer.expect_close(what="close 4400 after a first frame that is not a hello")
    expect(peer.close_code == 4400, f"user.message first: closed with {peer.close_code}, not 4400")


@case(
    id="notes-5/4401-bad-credential",
    level="MUST",
    description="a hello with an unknown credential is closed with 4401",
    kill="close bad credentials with 4403 instead of 4401",
)
async def bad_credential(ctx: Context) -> None:
    code = await ctx.refused("client", token=_BAD_KEY, create={}, what="close 4401")
    expect(code == 4401, f"closed with {code}, not 4401")


@case(
    id="notes-5/4404-unknown-session",
    level="MUST",
    description="a hello for an unknown session without create (or from an edge) is closed 4404",
    kill="close hellos for unknown sessions with 4410 instead of 4404",
)
async def unknown_session(ctx: Context) -> None:
    code = await ctx.refused("client", what="close 4404 (client without create)")
    expect(code == 4404, f"client hello without create: closed with {code}, not 4404")
    code = await ctx.refused(
        "edge", session_id=ctx.new_session_id(), create={}, what="close 4404 (edge)"
    )
    expect(code == 4404, f"edge hello with create (client only): closed with {code}, not 4404")


@case(
    id="notes-5/4408-hello-timeout",
    level="MUST",
    description="a connection that sends no hello is closed with 4408 after the handshake timeout",
    kill="close silent connections with 4400 instead of 4408",
)
async def hello_timeout(ctx: Context) -> None:
    wait = ctx.target.hello_timeout_s
    if wait + 1.0 > ctx.remaining():
        skip(
            f"the master's handshake timeout ({wait:g}s, --hello-timeout) does not fit in the "
            f"per-case timeout ({ctx.timeout:g}s); to run it, give --timeout "
            f"{math.ceil(wait + 5)} or more",
            setting=f"--timeout of at least {wait + 1.0:g}s (or a shorter hello timeout)",
        )
    peer = await ctx.connect(label="socket")
    await peer.expect_close(what=f"close 4408 after {wait:g}s without a hello")
    expect(peer.close_code == 4408, f"closed with {peer.close_code}, not 4408")


@case(
    id="notes-5/4409-client-attached",
    level="MUST",
    description="a second client with another participant id is closed 4409; the first stays",
    kill="let a second client attach while the session's client is attached",
)
async def client_attached(ctx: Context) -> None:
    first = await ctx.client()
    code = await ctx.refused("client", what="close 4409 (client_attached)")
    expect(code == 4409, f"second client: closed with {code}, not 4409")
    edge = await ctx.edge()
    await ctx.barrier(first, [edge])


@case(
    id="notes-5/takeover-4409",
    level="MUST",
    description="a hello reusing a participant id takes over: the older socket is closed 4409",
    kill="close a superseded connection with 1000 instead of 4409",
)
async def takeover(ctx: Context) -> None:
    old = await ctx.client()
    generation = old.welcome["payload"].get("generation")
    new = await ctx.client(create=False, participant_id=old.participant_id)
    p = new.welcome["payload"]
    expect(p.get("participant_id") == old.participant_id, "takeover got a new participant id")
    expect(p.get("resumed") is True, f"takeover must be resumed: true, got {p.get('resumed')!r}")
    expect(
        isinstance(generation, int)
        and isinstance(p.get("generation"), int)
        and p["generation"] > generation,
        f"generation did not grow on takeover ({generation!r} -> {p.get('generation')!r})",
    )
    await old.expect_close(what="close 4409 of the superseded connection")
    expect(old.close_code == 4409, f"superseded connection closed with {old.close_code}, not 4409")
    edge = await ctx.edge()
    await ctx.barrier(new, [edge])


@case(
    id="notes-15.6/takeover-no-finalization",
    level="MUST",
    description="a takeover mid-turn finalizes nothing: the new connection continues the turn",
    kill="finalize the session's open turn when its client is taken over",
)
async def takeover_no_finalization(ctx: Context) -> None:
    old = await ctx.client()
    edge = await ctx.edge()
    turn, call = new_id(), new_id()
    await old.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await old.send("tool.invoke.request", {"call_id": call, "tool_name": "probe", "input": {}})
    await edge.recv_until(lambda f: f.get("type") == "tool.invoke.request", what="the tool call")
    new = await ctx.client(create=False, participant_id=old.participant_id)
    result = await new.send("tool.invoke.result", {"call_id": call, "status": "ok", "output": "1"})
    frames = await edge.recv_until(
        lambda f: f.get("message_id") == result["message_id"] or is_synthetic(f),
        what="the new connection's tool.invoke.result",
    )
    synthetic = [describe(f) for f in frames if is_synthetic(f)]
    expect(not synthetic, f"the takeover produced synthetic frames: {', '.join(synthetic)}")


@case(
    id="notes-5/4410-deleted-session",
    level="MUST",
    description="a hello for a deleted session is closed with 4410",
    kill="close hellos for deleted sessions with 4404 instead of 4410",
)
async def deleted_session(ctx: Context) -> None:
    client = await ctx.client()
    status = await ctx.delete_session()
    expect(200 <= status < 300, f"DELETE answered HTTP {status}")
    await client.expect_close(what="the deleted session's client to be closed")
    code = await ctx.refused("edge", what="close 4410 (edge)")
    expect(code == 4410, f"edge hello for a deleted session: closed with {code}, not 4410")
    code = await ctx.refused("client", what="close 4410 (client without create)")
    expect(code == 4410, f"client hello for a deleted session: closed with {code}, not 4410")


@case(
    id="notes-5/4426-protocol-version",
    level="MUST",
    description="a hello with protocol_version outside 1.0.x is closed with 4426",
    kill="close unsupported protocol versions with 4400 instead of 4426",
)
async def protocol_version(ctx: Context) -> None:
    for version in ("2.0.0", "1.1.0"):
        code = await ctx.refused(
            "client", protocol_version=version, create={}, what=f"close 4426 for {version}"
        )
        expect(code == 4426, f"protocol_version {version}: closed with {code}, not 4426")


@case(
    id="notes-15.7/patch-version-accepted",
    level="MUST",
    description="a hello with another 1.0.x patch version is accepted",
    kill="accept only protocol_version 1.0.2 exactly",
)
async def patch_version(ctx: Context) -> None:
    await ctx.client(protocol_version="1.0.9")


@case(
    id="notes-5/presence",
    level="MUST",
    description="attach and detach of a participant are broadcast as session.presence",
    kill="report every presence change as attached",
    checks="presence",
)
async def presence(ctx: Context) -> None:
    await ctx.client()
    watcher = await ctx.edge()
    other = await ctx.edge()
    pid = other.participant_id

    about = _presence_of(pid)
    frame = (await watcher.recv_until(about, what="presence attached"))[-1]
    p = _change(frame, pid)
    expect(p.get("state") == "attached", f"presence on attach says {p.get('state')!r}")
    expect(p.get("role") == "edge", f"presence role {p.get('role')!r}, expected edge")
    await other.close()
    frame = (await watcher.recv_until(about, what="presence detached"))[-1]
    state = _change(frame, pid).get("state")
    expect(state == "detached", f"presence on close says {state!r}, expected detached")


def _fold_presence(roster: dict[str, str], frame: dict[str, Any]) -> None:
    """Fold a presence frame's changes (one, or coalesced ones, in order) into ``roster``."""
    if frame.get("type") != "session.presence":
        return
    payload = frame.get("payload", {})
    changes = payload.get("changes") or [payload]
    for change in changes:
        roster[change.get("participant_id")] = change.get("state")


@case(
    id="notes-5/presence-burst",
    level="MUST",
    description="many edges attaching and closing at once all reach a watcher's presence",
    kill="coalesce a burst of presence changes into a frame that reports only the first",
    checks="presence",
)
async def presence_burst(ctx: Context) -> None:
    await ctx.client()
    watcher = await ctx.edge()
    burst = await asyncio.gather(*(ctx.edge() for _ in range(12)))
    ids = {peer.participant_id for peer in burst}
    roster: dict[str, str] = {}

    def all_in(state: str) -> Any:
        def match(frame: dict[str, Any]) -> bool:
            _fold_presence(roster, frame)
            return all(roster.get(pid) == state for pid in ids)

        return match

    await watcher.recv_until(all_in("attached"), what="presence attached of all 12 edges")
    await asyncio.gather(*(peer.close() for peer in burst))
    await watcher.recv_until(all_in("detached"), what="presence detached of all 12 edges")


@case(
    id="notes-5/presence-declined",
    level="SHOULD",
    description="a hello with presence false gets no session.presence, live or in its backlog",
    kill="deliver presence frames to participants that declined them",
    checks="presence",
)
async def presence_declined(ctx: Context) -> None:
    client = await ctx.client()
    viewer = await ctx.edge(presence=False)
    said = viewer.welcome["payload"].get("presence")
    expect(said is False, f"the welcome of a hello with presence false says presence {said!r}")
    watcher = await ctx.edge()
    other = await ctx.edge()
    pid = other.participant_id
    await other.close()
    # the watcher hears the other edge go: its presence frames were sent, to those who take it
    await watcher.recv_until(
        lambda f: _change(f, pid).get("state") == "detached", what="presence detached"
    )
    live = (await ctx.barrier(client, [viewer]))[0]
    got = [describe(f) for f in live if f.get("type") == "session.presence"]
    expect(not got, f"the edge that declined presence was sent {got}")
    late = await ctx.edge(presence=False, resume={"last_seq": 0})
    history = await late.recv_type("session.history", what="the backlog from seq 0")
    inner = history.get("payload", {}).get("frames") or []
    kinds = [f.get("type") for f in inner if isinstance(f, dict)]
    expect(
        "session.presence" not in kinds,
        f"the backlog of an edge that declined presence holds {kinds.count('session.presence')}"
        " session.presence frame(s)",
    )


@case(
    id="notes-2/frame-too-big-1009",
    level="MUST",
    description="a message larger than welcome.max_frame_bytes is closed with 1009",
    kill="accept messages larger than the advertised max_frame_bytes",
)
async def frame_too_big(ctx: Context) -> None:
    client = await ctx.client()
    limit = client.welcome["payload"].get("max_frame_bytes")
    expect(_is_int(limit, 1), f"welcome.max_frame_bytes {limit!r}")
    assert isinstance(limit, int)
    if limit > 64 << 20:
        skip(f"max_frame_bytes is {limit} bytes; the runner probes limits up to 64 MiB")
    await client.send("agent.text.delta", {"block_id": "big", "delta": "x" * (limit + 1)})
    await client.expect_close(what="close 1009 for an oversized message")
    expect(client.close_code == 1009, f"closed with {client.close_code}, not 1009")


@case(
    id="notes-2/binary-unsupported-data",
    level="MUST",
    description="a binary message gets session.error unsupported_data; the socket stays open",
    kill="answer binary messages with invalid_frame instead of unsupported_data",
)
async def binary_message(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    await client.send_raw(b"\x00\x01binary")
    await ctx.expect_error(client, "unsupported_data", about="binary message")
    await ctx.barrier(client, [edge])


@case(
    id="notes-5/4403-not-allowed",
    level="MUST",
    description="a valid credential that may not attach as client (session token) is closed 4403",
    kill="let a session token without the client grant attach as the session's client",
    needs=("session-tokens",),
    uses=("presence", "rest-sessions"),
)
async def not_allowed(ctx: Context) -> None:
    client = await ctx.client()
    watcher = await ctx.edge()
    status, body = await ctx.http("POST", f"/v1/sessions/{ctx.session_id}/tokens", body={})
    expect(200 <= status < 300, f"POST /v1/sessions/{{id}}/tokens answered HTTP {status}")
    token = body.get("token") if isinstance(body, dict) else None
    expect(isinstance(token, str) and token, f"the token answer has no token: {body!r}")
    assert isinstance(token, str)
    await client.close()  # with no client attached, 4409 cannot apply: only 4403 can
    await ctx.detached(client, watcher, required=True)
    code = await ctx.refused("client", token=token, what="close 4403 (token without client grant)")
    expect(code == 4403, f"session token attaching as client: closed with {code}, not 4403")


def _window_s(ctx: Context, peer: Any) -> float:
    window_ms = peer.welcome["payload"].get("reattach_window_ms")
    expect(_is_int(window_ms, -1), f"welcome.reattach_window_ms is {window_ms!r}")
    if window_ms < 0:
        skip("the master's reattach window is never (-1): nothing expires to test")
    window_fits(ctx, int(window_ms))
    return float(window_ms) / 1000


def _presence_of(pid: str) -> Any:
    """A matcher: a presence frame with a change about ``pid`` (coalesced or not)."""

    def match(frame: dict[str, Any]) -> bool:
        return presence_change(frame, pid) is not None

    return match


def _change(frame: dict[str, Any], pid: str) -> dict[str, Any]:
    """The change about ``pid`` in a presence frame the matcher accepted."""
    return presence_change(frame, pid) or {}


@case(
    id="notes-5/edge-expiry-presence",
    level="MUST",
    description="an edge detached past the reattach window expires: session.presence expired",
    kill="report an edge whose window ran out as detached instead of expired",
    checks="presence",
)
async def edge_expiry(ctx: Context) -> None:
    await ctx.client()
    watcher = await ctx.edge()
    gone = await ctx.edge()
    _window_s(ctx, gone)
    pid = gone.participant_id
    await watcher.recv_until(_presence_of(pid), what="the edge's attach presence")
    gone.drop()
    detached = (await watcher.recv_until(_presence_of(pid), what="presence detached"))[-1]
    state = _change(detached, pid).get("state")
    expect(state == "detached", f"the drop was announced as {state!r}, not detached")
    expired = (await watcher.recv_until(_presence_of(pid), what="presence expired"))[-1]
    state = _change(expired, pid).get("state")
    expect(state == "expired", f"after the window the edge's presence is {state!r}, not expired")


@case(
    id="notes-5/reattach-within-window",
    level="MUST",
    description="a client that reattaches within the window keeps the session past the window",
    kill="expire a client at the end of its window even though it reattached",
    uses=("presence", "rest-sessions"),
)
async def reattach_within_window(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    window = _window_s(ctx, client)
    client.drop()
    await ctx.detached(client, edge, required=True)
    again = await ctx.client(create=False, participant_id=client.participant_id)
    expect(again.welcome["payload"].get("resumed") is True, "the reattach was not resumed")
    await asyncio.sleep(window + 0.3)
    (before,) = await ctx.barrier(again, [edge])
    deleted = [f for f in before if f.get("type") == "session.deleted"]
    expect(not deleted, "the session was deleted although its client had reattached")


@case(
    id="notes-7/welcome-received",
    level="SHOULD",
    description="a reattaching client's welcome names the last frame the master has from it",
    kill="omit received.last_message_id from the welcome",
)
async def welcome_received(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    sent = [await client.send("agent.state", {"state": s}) for s in ("thinking", "idle")]
    await edge.recv_id(sent[-1]["message_id"], what="the client's frames")
    client.drop()
    again = await ctx.client(create=False, participant_id=client.participant_id)
    received = again.welcome["payload"].get("received")
    got = received.get("last_message_id") if isinstance(received, dict) else None
    expect(
        got == sent[-1]["message_id"],
        f"welcome.received.last_message_id is {got!r}, not the client's last frame",
    )


@case(
    id="notes-15.4/no-own-presence",
    level="MUST",
    description="presence frames about a participant are not sent to that participant",
    kill="send a participant its own attach presence",
    needs=("presence",),
)
async def no_own_presence(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    (before,) = await ctx.barrier(client, [edge])
    # A coalesced frame about several goes to everyone (docs/protocol.md §5 item 11); a
    # frame about this participant alone must not reach it.
    own = [
        f
        for f in before
        if _presence_of(edge.participant_id)(f) and not f.get("payload", {}).get("changes")
    ]
    expect(not own, f"the edge got {len(own)} presence frame(s) about itself")


@case(
    id="notes-15.6/new-client-replaces-detached",
    level="MUST",
    description="a new client may attach while the old one is detached; the old one expires",
    kill="refuse a new client with 4409 while the session's previous client is only detached",
    uses=("presence", "rest-sessions"),
)
async def new_client_replaces_detached(ctx: Context) -> None:
    old = await ctx.client()
    edge = await ctx.edge()
    old.drop()
    await ctx.detached(old, edge, required=True)
    new = await ctx.client(create=False)
    expect(new.participant_id != old.participant_id, "the new client got the old one's id")
    if ctx.has("presence"):
        frame = (await edge.recv_until(_presence_of(old.participant_id), what="expired"))[-1]
        state = _change(frame, old.participant_id).get("state")
        expect(state == "expired", f"the replaced client's presence is {state!r}, not expired")
        return
    ctx.note("no presence: waited for the old client to leave GET /v1/sessions/{id}")
    while await ctx.participant_state(ctx.session_id, old.participant_id) is not None:
        await asyncio.sleep(0.02)
