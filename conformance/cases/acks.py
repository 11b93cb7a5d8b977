"""Producer acks and withdrawn questions (rawp-notes §16.3, §16.4).

§16.3: "The master tells each sender what it has committed of theirs: `connection.ack
{last_seq, last_message_id}` master → participant, cumulative, at most one per delivery step per
participant, only when something new of theirs was committed. A refused frame's
`session.error` carries `ref_message_id` (the refused frame's `message_id`)." A warning about an
accepted frame (`usage_missing`) carries none (docs/protocol.md §12).

§16.4: "`agent.interaction.cancel {interaction_id, reason?}` (client → master) ends a pending
interaction [...]: the session leaves `requires_action` when nothing else is pending, edges
remove the prompt, and a later `control.interaction.response` to it gets `interaction_state`."

The peers set the master's acks aside as they arrive (``Peer.acks``); these cases read them
there. "Nothing new, no ack" is shown by order, never by waiting: acks are cumulative, so the
ack after a refused frame must name the sender's next committed frame.
"""

from __future__ import annotations

import itertools
from typing import Any

from ..case import case, expect
from ..peer import Peer, describe
from ..runner import Context
from ..wire import new_id, sender_role, usage_payload

__all__: list[str] = []


def _ack(ack: dict[str, Any]) -> tuple[object, object]:
    payload = ack.get("payload")
    if not isinstance(payload, dict):
        return None, None
    return payload.get("last_seq"), payload.get("last_message_id")


def _acks_of(peer: Peer) -> str:
    return ", ".join(f"(seq={s}, id={m})" for s, m in map(_ack, peer.acks)) or "none"


@case(
    id="notes-16.3/ack-committed",
    level="MUST",
    description="the sender gets connection.ack naming its committed frame and that frame's seq",
    kill="acknowledge a committed frame with the seq after its own",
)
async def ack_committed(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    for peer in (client, edge):
        if peer is client:
            sent = await client.send("agent.state", {"state": "idle"})
        else:
            sent = await edge.send("user.message", {"text": "acknowledge me"})
        mid = sent["message_id"]
        observer = edge if peer is client else client
        delivered = (await observer.recv_id(mid, what=f"{peer.label}'s frame")).frame
        await peer.recv_ack(mid, what=f"connection.ack of {peer.label}'s frame")
        naming = [a for a in peer.acks if _ack(a)[1] == mid]
        expect(
            len(naming) == 1, f"{peer.label}: {len(naming)} acks name one frame: {_acks_of(peer)}"
        )
        ack = naming[0]
        seq, _ = _ack(ack)
        expect(
            seq == delivered.get("seq"),
            f"{peer.label}: connection.ack names its frame with last_seq={seq!r}, but the frame "
            f"was delivered with seq={delivered.get('seq')!r}",
        )
        expect(
            sender_role(ack) == "master",
            f"{peer.label}: connection.ack stamped with sender role {sender_role(ack)!r}",
        )


@case(
    id="notes-16.3/ack-sender-only",
    level="MUST",
    description="a sender's connection.ack goes to that sender only, never to other participants",
    kill="send each connection.ack to every participant of the session",
)
async def ack_sender_only(ctx: Context) -> None:
    client = await ctx.client()
    talker = await ctx.edge()
    silent = await ctx.edge()
    for peer in (client, talker):
        if peer is client:
            sent = await client.send("agent.state", {"state": "idle"})
        else:
            sent = await talker.send("user.message", {"text": "acknowledge me"})
        await peer.recv_ack(sent["message_id"], what=f"connection.ack of {peer.label}'s frame")
    # Each ack above was queued before these barriers: a copy sent elsewhere arrives first.
    await ctx.barrier(client, [talker, silent])
    await ctx.barrier(talker, [client, silent])
    expect(not silent.acks, f"{silent.label} sent nothing but got acks: {_acks_of(silent)}")
    for peer in (client, talker):
        others = {f.frame.get("message_id") for f in peer.log}  # frames others sent
        leaked = [str(m) for _, m in map(_ack, peer.acks) if m in others]
        expect(not leaked, f"{peer.label} got acks for others' frames: {', '.join(leaked)}")


@case(
    id="notes-16.3/ack-increasing",
    level="MUST",
    description="one sender's acks strictly increase; none when nothing new of its was committed",
    kill="send every connection.ack twice",
)
async def ack_increasing(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    for state in ("thinking", "idle"):
        await client.send("agent.state", {"state": state})
    last = await client.send("agent.state", {"state": "idle"})
    await client.recv_ack(last["message_id"], what="connection.ack of the third frame")
    before = len(client.acks)
    refused = await client.send(
        "session.turn.end", {"turn_id": new_id(), "stop_reason": "end_turn"}
    )
    await client.send_frame(last)  # the same message_id again: nothing new (notes §7)
    after = await client.send("agent.state", {"state": "idle"})
    frames = await client.recv_ack(after["message_id"], what="connection.ack of the next frame")
    errors = [f for f in frames if f.get("type") == "session.error"]
    expect(errors, f"the refused {describe(refused)} drew no session.error")
    seqs = [s if isinstance(s, int) else -1 for s, _ in map(_ack, client.acks)]
    expect(
        all(0 <= a < b for a, b in itertools.pairwise(seqs)),
        f"client's acks do not strictly increase: {_acks_of(client)}",
    )
    later = client.acks[before:]
    expect(
        len(later) == 1,
        "after a refused frame and a repeated one, the next ack must name the next committed "
        f"frame; got {len(later)} acks: {_acks_of(client)}",
    )
    await edge.recv_id(after["message_id"], what="the client's last frame")


@case(
    id="notes-16.3/refusal-ref-message-id",
    level="MUST",
    description="a refused frame's session.error names it in ref_message_id (invalid, state)",
    kill="send session.error refusals without ref_message_id",
)
async def refusal_ref(ctx: Context) -> None:
    client = await ctx.client()
    await ctx.edge()
    invalid = await client.send("session.turn.start", {"turn_id": "not-a-uuid", "turn_index": 0})
    error = await ctx.expect_error(client, "invalid_frame", about="turn start with a bad turn_id")
    ref = error.get("payload", {}).get("ref_message_id")
    expect(
        ref == invalid["message_id"],
        f"invalid_frame for a frame with a readable message_id has ref_message_id={ref!r}",
    )
    state = await client.send("session.turn.end", {"turn_id": new_id(), "stop_reason": "end_turn"})
    error = await ctx.expect_error(client, "turn_state", about="turn end without a turn")
    ref = error.get("payload", {}).get("ref_message_id")
    expect(ref == state["message_id"], f"turn_state refusal has ref_message_id={ref!r}")


@case(
    id="notes-16.3/warning-no-ref-message-id",
    level="MUST",
    description="a warning about an accepted frame (usage_missing) carries no ref_message_id",
    kill="name the accepted frame in usage_missing's ref_message_id",
)
async def warning_no_ref(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    turn = new_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    late = await client.send("agent.state", {"state": "idle"})
    error = await ctx.expect_error(client, "usage_missing", about="a frame instead of the usage")
    ref = error.get("payload", {}).get("ref_message_id")
    expect(ref is None, f"usage_missing carries ref_message_id={ref!r}; a warning names none")
    await edge.recv_id(late["message_id"], what="the frame that drew usage_missing")
    await client.send("session.usage", usage_payload(turn))


# --- §16.4 withdrawing a question ------------------------------------------------------------


async def _asking(ctx: Context, count: int) -> tuple[Peer, Peer, list[str]]:
    """A client with an open turn and ``count`` pending interactions an edge has seen."""
    client = await ctx.client()
    edge = await ctx.edge()
    await client.send("session.turn.start", {"turn_id": new_id(), "turn_index": 0})
    ids = [new_id() for _ in range(count)]
    last = ""
    for iid in ids:
        request = {"interaction_id": iid, "kind": "confirmation", "prompt": "Proceed?"}
        last = (await client.send("agent.interaction.request", request))["message_id"]
    await edge.recv_id(last, what="the interaction requests")
    return client, edge, ids


async def _cancel(client: Peer, edge: Peer, iid: str) -> None:
    frame = await client.send(
        "agent.interaction.cancel", {"interaction_id": iid, "reason": "moved on"}
    )
    await edge.recv_id(frame["message_id"], what="the relayed agent.interaction.cancel")


async def _status(ctx: Context) -> object:
    watcher = await ctx.edge()
    session = watcher.welcome.get("payload", {}).get("session")
    status = session.get("status") if isinstance(session, dict) else None
    await watcher.close()
    return status


@case(
    id="notes-16.4/cancel-leaves-requires-action",
    level="MUST",
    description="a cancel leaves requires_action only once no other interaction is pending",
    kill="make agent.interaction.cancel withdraw every pending interaction",
)
async def cancel_status(ctx: Context) -> None:
    client, edge, (first, second) = await _asking(ctx, 2)
    await _cancel(client, edge, first)
    status = await _status(ctx)
    expect(
        status == "requires_action",
        f"one of two interactions withdrawn: a new edge's welcome says status {status!r}, "
        "expected requires_action",
    )
    await _cancel(client, edge, second)
    status = await _status(ctx)
    expect(
        status == "running",
        f"both interactions withdrawn mid-turn: status {status!r}, expected running",
    )


@case(
    id="notes-16.4/cancelled-then-refused",
    level="MUST",
    description="after a cancel, a response to it or a second cancel gets interaction_state",
    kill="accept control.interaction.response to a withdrawn interaction",
)
async def cancelled_then_refused(ctx: Context) -> None:
    client, edge, (iid,) = await _asking(ctx, 1)
    await _cancel(client, edge, iid)
    await edge.send("control.interaction.response", {"interaction_id": iid, "response": "yes"})
    await ctx.expect_error(edge, "interaction_state", about="a response to a withdrawn question")
    await client.send("agent.interaction.cancel", {"interaction_id": iid})
    await ctx.expect_error(client, "interaction_state", about="a second cancel")


@case(
    id="notes-16.4/cancel-from-edge",
    level="MUST",
    description="agent.interaction.cancel from an edge gets direction and is not relayed",
    kill="let an edge send agent.interaction.cancel",
)
async def cancel_from_edge(ctx: Context) -> None:
    client, edge, (iid,) = await _asking(ctx, 1)
    refused = await edge.send("agent.interaction.cancel", {"interaction_id": iid})
    (before,) = await ctx.barrier(edge, [client])
    leaked = [describe(f) for f in before if f.get("message_id") == refused["message_id"]]
    expect(not leaked, f"the client received the edge's cancel: {leaked}")
    await ctx.expect_error(edge, "direction", about="an edge sends agent.interaction.cancel")
