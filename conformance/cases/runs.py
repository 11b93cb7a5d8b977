"""One run at a time (rawp-notes §17.3, §17.12).

§17.3: "A ``user.message`` that arrives while a turn is open, or while a run is about to start
(a ``user.message`` was relayed to an idle session and no ``session.turn.start`` followed yet),
waits up to 3 s for the turn to end; then it is relayed, or refused ``busy`` (non-fatal,
``ref_message_id``, not logged […]). A client that takes input during a turn (steering) says so
in its hello (``accepts_input_during_turn: true``) and gets every message at once. Between two
UIs the first wins." §17.12: "a held message is relayed or refused when its 3 s end, never
both."

A held message whose sender's connection is cut before it is decided must be neither relayed
twice nor lost silently: whatever the master does with it (ours drops it with its connection,
docs/protocol.md "One run at a time"), the sender's reattach tells it the truth —
``welcome.received`` names it only if the master kept it — so re-sending what was not
received puts it in the log exactly once.
"""

from __future__ import annotations

import time
from typing import Any, Final

from ..case import case, expect
from ..peer import Peer
from ..runner import Context
from ..wire import new_id, usage_payload

__all__: list[str] = []

HOLD_S: Final = 3.0
"""How long a master holds a message for the agent's run (§17.3)."""
HELD_AT_LEAST_S: Final = 2.5
"""A refusal sooner than this after the send was not held (the master's 3 s start later)."""


async def _open_turn(client: Peer, *watchers: Peer, index: int = 0) -> str:
    """Start a turn and wait until every watcher saw it (the master folded it)."""
    turn = new_id()
    start = await client.send("session.turn.start", {"turn_id": turn, "turn_index": index})
    for watcher in watchers:
        await watcher.recv_id(start["message_id"], what="the turn start")
    return turn


async def _end_turn(client: Peer, turn: str) -> None:
    await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    await client.send("session.usage", usage_payload(turn))


def _texts(frames: list[dict[str, Any]], text: str) -> int:
    """How many ``user.message`` frames carry ``text``."""
    return sum(
        1
        for f in frames
        if f.get("type") == "user.message" and (f.get("payload") or {}).get("text") == text
    )


def _refusals(frames: list[dict[str, Any]], message_id: str) -> list[dict[str, Any]]:
    return [
        f
        for f in frames
        if f.get("type") == "session.error"
        and (f.get("payload") or {}).get("ref_message_id") == message_id
    ]


@case(
    id="notes-17.3/busy-after-hold",
    level="MUST",
    description="a user.message during an open turn is held, then refused busy, never relayed",
    kill="relay an edge's user.message at once while the client's turn is open",
    holds_s=HOLD_S,
)
async def busy_after_hold(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    await _open_turn(client, edge)
    sent_at = time.monotonic()
    message = await edge.send("user.message", {"text": f"during the run {new_id()}"})
    error = await ctx.expect_error(edge, "busy", about="a user.message while a turn is open")
    waited = time.monotonic() - sent_at
    payload = error.get("payload") or {}
    expect(
        payload.get("ref_message_id") == message["message_id"],
        f"busy names ref_message_id {payload.get('ref_message_id')!r}, not the message",
    )
    expect(
        waited >= HELD_AT_LEAST_S,
        f"refused busy {waited:.2f} s after the send: not held for the run (up to {HOLD_S:g} s)",
    )
    (seen,) = await ctx.barrier(edge, [client])
    expect(
        all(f.get("message_id") != message["message_id"] for f in seen),
        "the client got the message the master refused busy (relayed and refused)",
    )


@case(
    id="notes-17.3/held-until-turn-ends",
    level="MUST",
    description="a user.message held during a turn reaches the client once when the turn ends",
    kill="refuse a held user.message busy when the turn it waited for ends",
)
async def held_until_turn_ends(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    turn = await _open_turn(client, edge)
    text = f"after the run {new_id()}"
    message = await edge.send("user.message", {"text": text})
    early = await client.quiet(0.5)
    expect(_texts(early, text) == 0, "the client got the message while its turn was open")
    await _end_turn(client, turn)
    got = await client.recv_id(message["message_id"], what="the held message after the turn")
    later = await client.quiet(0.3)
    expect(_texts([got.frame, *later], text) == 1, "the held message reached the client twice")
    (before,) = await ctx.barrier(client, [edge])
    expect(
        not _refusals(before, message["message_id"]),
        "the held message was relayed and also refused",
    )


@case(
    id="notes-17.3/first-edge-wins",
    level="MUST",
    description="two UIs at an idle agent: the first message is relayed, the second held, busy",
    kill="let a run that is about to start (no turn.start yet) hold no message",
    holds_s=HOLD_S,
)
async def first_edge_wins(ctx: Context) -> None:
    client = await ctx.client()
    first = await ctx.edge()
    second = await ctx.edge()
    a = await first.send("user.message", {"text": f"first {new_id()}"})
    await client.recv_id(a["message_id"], what="the first UI's message")
    b = await second.send("user.message", {"text": f"second {new_id()}"})
    # Frames of one sender are decided in order: once the client sees the barrier, the
    # second message was decided — held for the run the first one asked for.
    (before,) = await ctx.barrier(second, [client])
    expect(
        all(f.get("message_id") != b["message_id"] for f in before),
        "the second UI's message reached the agent while the first one's run was about to start",
    )
    await _open_turn(client, first)  # the run the first message asked for, still running
    error = await ctx.expect_error(second, "busy", about="the second UI's message")
    expect(
        (error.get("payload") or {}).get("ref_message_id") == b["message_id"],
        "busy does not name the second UI's message",
    )
    later = await client.quiet(0.2)
    expect(
        all(f.get("message_id") != b["message_id"] for f in later),
        "the second UI's message was refused busy and relayed",
    )
    (seen,) = await ctx.barrier(client, [first])
    expect(not _refusals(seen, a["message_id"]), "the first UI's message was refused")


@case(
    id="notes-17.3/steering-client-gets-all",
    level="MUST",
    description="a client with accepts_input_during_turn gets every user.message during a turn",
    kill="ignore accepts_input_during_turn in the client's hello",
)
async def steering_client_gets_all(ctx: Context) -> None:
    client = await ctx.client(accepts_input_during_turn=True)
    one = await ctx.edge()
    two = await ctx.edge()
    await _open_turn(client, one, two)
    a = await one.send("user.message", {"text": f"steer one {new_id()}"})
    b = await two.send("user.message", {"text": f"steer two {new_id()}"})
    started = time.monotonic()
    # Two senders' frames have no order between them: take both, whichever comes first.
    pending = {a["message_id"], b["message_id"]}

    def both_arrived(frame: dict[str, Any]) -> bool:
        pending.discard(frame.get("message_id"))
        return not pending

    await client.recv_until(both_arrived, what="both user.messages to the steering client")
    waited = time.monotonic() - started
    expect(
        waited < HELD_AT_LEAST_S,
        f"the steering client got the messages only after {waited:.2f} s (held for the run)",
    )
    seen = await ctx.barrier(client, [one, two])
    for frames, sent in zip(seen, (a, b), strict=True):
        expect(not _refusals(frames, sent["message_id"]), "a steering client's input was refused")


@case(
    id="notes-17.3/held-cut-once",
    level="MUST",
    description="a held message whose connection is cut ends in the log once, or its sender knows",
    kill="keep a held message after its connection is cut and forget message ids seen",
    uses=("presence", "rest-sessions"),
)
async def held_cut_once(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    turn = await _open_turn(client, edge)
    text = f"held then cut {new_id()}"
    message = await edge.send("user.message", {"text": text})
    edge.drop()
    await ctx.detached(edge, client, required=True)
    again = await ctx.edge(participant_id=edge.participant_id)
    received = (again.welcome.get("payload") or {}).get("received") or {}
    kept = received.get("last_message_id") == message["message_id"]
    if not kept:
        # Not received: the sender sends it again (same id, same text), as a client
        # library re-sends what was not acknowledged.
        await again.send_frame(dict(message))
    await _end_turn(client, turn)
    got = await client.recv_until(
        lambda f: _texts([f], text) == 1,
        what="the held message (kept by the master, or sent again after the reattach)",
    )
    # The agent answers it with a run of its own: a second copy, held behind the run the
    # first one started, would be free to go once that run ends.
    await _end_turn(client, await _open_turn(client, index=1))
    later = await client.quiet(0.5)
    expect(
        _texts([*got, *later], text) == 1,
        f"the held message reached the client {_texts([*got, *later], text)} times "
        f"(welcome.received named it: {kept})",
    )
    frames = await _logged(ctx)
    if frames is not None:
        expect(
            _texts(frames, text) == 1,
            f"the log holds the message {_texts(frames, text)} times, not once",
        )


async def _logged(ctx: Context) -> list[dict[str, Any]] | None:
    """The session's log over HTTP (None when the master does not serve it)."""
    status, body = await ctx.http("GET", f"/v1/sessions/{ctx.session_id}/events?order=asc")
    if status != 200 or not isinstance(body, dict):
        return None
    return [e for e in body.get("events") or [] if isinstance(e, dict)]
