"""Usage metrics (RAWP 1.0.2 §7.3.1, §7.5.2; rawp-notes §6).

§7.3.1: ``session.usage`` MUST accompany the completion of text generation (``agent.text.done``)
or the end of a turn; §7.5.2: it MUST follow ``session.turn.end`` immediately. The master checks
the turn end (notes §6): when the client's next frame after its turn end is not a usage, the
client gets ``usage_missing`` (a warning: the frame is still processed).
"""

from __future__ import annotations

from ..case import case, expect
from ..peer import Peer, describe
from ..runner import Context
from ..wire import new_id, usage_payload

__all__: list[str] = []

_QUIET_S = 0.3


async def _no_errors(client: Peer) -> None:
    late = await client.quiet(_QUIET_S)
    errors = [describe(f) for f in late if f.get("type") == "session.error"]
    expect(not errors, f"the client got {', '.join(errors)}")


@case(
    id="7.5.2/usage-missing",
    level="MUST",
    description="a client frame other than session.usage right after a turn end gets usage_missing",
    kill="accept any frame after session.turn.end without a usage_missing warning",
)
async def usage_missing(ctx: Context) -> None:
    client = await ctx.client()
    turn = new_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    await client.send("agent.state", {"state": "idle"})
    await ctx.expect_error(client, "usage_missing", about="agent.state right after the turn end")


@case(
    id="notes-6/usage-missing-frame-processed",
    level="MUST",
    description="the frame that drew usage_missing is still processed and relayed",
    kill="refuse the frame that lacks the usage instead of only warning",
)
async def usage_missing_processed(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    turn = new_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    late = await client.send("agent.state", {"state": "idle"})
    usage = await client.send("session.usage", usage_payload(turn))
    frames = await edge.recv_until(
        lambda f: f.get("message_id") == usage["message_id"], what="the late session.usage"
    )
    ids = [f.get("message_id") for f in frames]
    expect(late["message_id"] in ids, "the frame that drew usage_missing was not relayed")


@case(
    id="7.5.2/usage-after-turn-end",
    level="MUST",
    description="session.usage right after session.turn.end is accepted and relayed right after it",
    kill="answer usage_missing even when session.usage follows the turn end",
)
async def usage_after_turn_end(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    turn = new_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    end = await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    usage = await client.send("session.usage", usage_payload(turn))
    frames = await edge.recv_until(
        lambda f: f.get("message_id") == usage["message_id"], what="the session.usage"
    )
    relayed = [f for f in frames if f.get("message_id") == end["message_id"]]
    expect(relayed, "the turn end was not relayed before the usage")
    end_seq, usage_seq = relayed[0].get("seq"), frames[-1].get("seq")
    expect(
        isinstance(end_seq, int) and usage_seq == end_seq + 1,
        f"usage is not right after the turn end in the log (seqs {end_seq}, {usage_seq})",
    )
    await _no_errors(client)


@case(
    id="7.3.1/usage-with-text-done",
    level="MUST",
    description="session.usage accompanying agent.text.done inside a turn is accepted and relayed",
    kill="refuse session.usage while a turn is open",
)
async def usage_with_text_done(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    turn = new_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send("agent.text.delta", {"block_id": "b1", "delta": "Hello"})
    await client.send("agent.text.done", {"block_id": "b1", "text": "Hello"})
    usage = await client.send("session.usage", usage_payload(turn))
    end = await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    await client.send("session.usage", usage_payload(turn))
    frames = await edge.recv_until(
        lambda f: f.get("message_id") == end["message_id"], what="the turn end"
    )
    ids = [f.get("message_id") for f in frames]
    expect(usage["message_id"] in ids, "the usage after agent.text.done was not relayed")
    await _no_errors(client)
