"""Session state machine violations (rawp-notes §6, §15.11).

A frame that breaks the state machine is answered with ``session.error {fatal: false}`` to its
sender, with the code of notes §15.11 (``turn_state``, ``block_state``, ``tool_pairing``,
``interaction_state``, ``direction``; ``invalid_frame`` for bad compaction counts), and is
neither logged nor relayed. "Not relayed" is checked with a barrier: the sender's next valid
frame reaches the observer first.
"""

from __future__ import annotations

from typing import Any

from ..case import case, expect
from ..peer import Peer, describe
from ..runner import Context
from ..wire import new_id, usage_payload

__all__: list[str] = []


def _not_relayed(before: list[dict[str, Any]], refused: list[dict[str, Any]], who: Peer) -> None:
    ids = {f["message_id"] for f in refused}
    leaked = [describe(f) for f in before if f.get("message_id") in ids]
    expect(not leaked, f"{who.label} received refused frames: {', '.join(leaked)}")


@case(
    id="notes-6/turn-state",
    level="MUST",
    description="turn start while open, end of another turn, reused id, skipped index: turn_state",
    kill="accept a second session.turn.start while a turn is open",
)
async def turn_state(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    turn = new_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    refused = [
        await client.send("session.turn.start", {"turn_id": new_id(), "turn_index": 1}),
        await client.send("session.turn.end", {"turn_id": new_id(), "stop_reason": "end_turn"}),
    ]
    await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    await client.send("session.usage", usage_payload(turn))
    refused += [
        await client.send("session.turn.start", {"turn_id": turn, "turn_index": 1}),
        await client.send("session.turn.start", {"turn_id": new_id(), "turn_index": 5}),
    ]
    (before,) = await ctx.barrier(client, [edge])
    _not_relayed(before, refused, edge)
    for about in (
        "turn start while a turn is open",
        "turn end for another turn",
        "turn start reusing a turn id",
        "turn start skipping a turn index",
    ):
        await ctx.expect_error(client, "turn_state", about=about)


@case(
    id="notes-6/block-state",
    level="MUST",
    description="a text delta after its block's done gets block_state",
    kill="accept text deltas for a block that is already done",
)
async def block_state(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    await client.send("agent.text.delta", {"block_id": "b1", "delta": "a"})
    await client.send("agent.text.done", {"block_id": "b1", "text": "a"})
    refused = [await client.send("agent.text.delta", {"block_id": "b1", "delta": "late"})]
    (before,) = await ctx.barrier(client, [edge])
    _not_relayed(before, refused, edge)
    await ctx.expect_error(client, "block_state", about="delta after done")


@case(
    id="notes-6/tool-pairing",
    level="MUST",
    description="a result without its request, or a turn end with calls open, gets tool_pairing",
    kill="accept a tool.invoke.result whose call_id was never requested",
)
async def tool_pairing(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    turn = new_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    orphan = await client.send(
        "tool.invoke.result", {"call_id": new_id(), "status": "ok", "output": "?"}
    )
    await client.send(
        "tool.invoke.request", {"call_id": new_id(), "tool_name": "probe", "input": {}}
    )
    early_end = await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    (before,) = await ctx.barrier(client, [edge])
    _not_relayed(before, [orphan, early_end], edge)
    await ctx.expect_error(client, "tool_pairing", about="result without a request")
    await ctx.expect_error(client, "tool_pairing", about="turn end with an open call")


@case(
    id="notes-6/interaction-state",
    level="MUST",
    description="a response to an interaction that is not pending gets interaction_state",
    kill="accept control.interaction.response for an interaction that was never requested",
)
async def interaction_state(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    refused = [
        await edge.send(
            "control.interaction.response", {"interaction_id": new_id(), "response": "yes"}
        )
    ]
    (before,) = await ctx.barrier(edge, [client])
    _not_relayed(before, refused, client)
    await ctx.expect_error(edge, "interaction_state", about="response without a request")


@case(
    id="notes-6/direction",
    level="MUST",
    description="frames a role may not send (edge agent.*, client control.*) get direction",
    kill="let an edge send agent.* frames",
)
async def direction(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    from_edge = [await edge.send("agent.text.delta", {"block_id": "e1", "delta": "not mine"})]
    (before,) = await ctx.barrier(edge, [client])
    _not_relayed(before, from_edge, client)
    await ctx.expect_error(edge, "direction", about="edge sends agent.text.delta")
    from_client = [await client.send("control.cancel", {})]
    (before,) = await ctx.barrier(client, [edge])
    _not_relayed(before, from_client, edge)
    await ctx.expect_error(client, "direction", about="client sends control.cancel")


@case(
    id="notes-6/compacted-token-counts",
    level="MUST",
    description="session.compacted with current_token_count above previous gets invalid_frame",
    kill="accept session.compacted whose current_token_count exceeds previous_token_count",
)
async def compacted_counts(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    refused = [
        await client.send(
            "session.compacted",
            {
                "summary": "grew?",
                "previous_token_count": 100,
                "current_token_count": 500,
                "trigger": "auto",
            },
        )
    ]
    (before,) = await ctx.barrier(client, [edge])
    _not_relayed(before, refused, edge)
    await ctx.expect_error(client, "invalid_frame", about="compaction that grew")
