"""Termination while a turn is in progress (RAWP 1.0.2 §7.5.3; rawp-notes §9, §15.8).

When a session terminates mid-turn — ``DELETE /v1/session/{id}``, a fatal ``session.error``,
a participant's delete request, or the client's reattach window running out — every attached
participant gets, before its WebSocket closes: a cancelled ``tool.invoke.result`` per open call,
then ``session.turn.end {stop_reason: error}``, then ``session.deleted``. With no turn in
progress the master closes right after ``session.deleted``.
"""

from __future__ import annotations

from ..case import case, expect, skip
from ..runner import Context
from ..wire import new_id, usage_payload
from .common import MidTurn, check_cleanup, mid_turn, window_fits

__all__: list[str] = []


@case(
    id="7.5.3/cleanup-order-delete",
    level="MUST",
    description="DELETE mid-turn: cancelled results, turn end (error), session.deleted, to all",
    kill="emit session.deleted before the cleanup frames when a session is deleted over HTTP",
)
async def cleanup_order_delete(ctx: Context) -> None:
    state = await mid_turn(ctx, edges=2, calls=2, resolved=1)
    status = await ctx.delete_session()
    expect(200 <= status < 300, f"DELETE answered HTTP {status}")
    await _everyone_sees_cleanup(ctx, state, reason="master_request", deleted_by="master")


@case(
    id="7.5.3/cleanup-order-fatal-error",
    level="MUST",
    description="fatal session.error mid-turn: cancelled results, turn end, session.deleted, close",
    kill="skip the cancelled tool results when a fatal session.error ends the session",
)
async def cleanup_order_fatal(ctx: Context) -> None:
    state = await mid_turn(ctx, edges=1, calls=2)
    await state.client.send(
        "session.error",
        {"error_code": "x_agent_crashed", "message": "unrecoverable", "fatal": True},
    )
    await _everyone_sees_cleanup(ctx, state, reason="error", deleted_by="client")


@case(
    id="7.5.3/cleanup-order-delete-request",
    level="MUST",
    description="an edge's session.deleted request mid-turn gets the same cleanup order, to all",
    kill="skip the turn end when a participant's delete request ends the session",
)
async def cleanup_order_request(ctx: Context) -> None:
    state = await mid_turn(ctx, edges=2, calls=1)
    await state.edges[0].send(
        "session.deleted",
        {"session_id": ctx.session_id, "reason": "user_request", "deleted_by": "edge"},
    )
    await _everyone_sees_cleanup(ctx, state, reason="user_request", deleted_by="edge")


@case(
    id="7.5.3/cleanup-order-expiry",
    level="MUST",
    description="window expiry mid-turn: call and turn closed, then session.deleted (timeout)",
    kill="report a session that expired past its reattach window as reason error by the master",
)
async def cleanup_order_expiry(ctx: Context) -> None:
    state = await mid_turn(ctx, edges=1, calls=1)
    window_ms = state.client.welcome["payload"].get("reattach_window_ms")
    expect(isinstance(window_ms, int), f"welcome.reattach_window_ms is {window_ms!r}")
    assert isinstance(window_ms, int)
    if window_ms < 0:
        skip("the master's reattach window is never (-1): nothing expires to test")
    window_fits(ctx, window_ms)
    state.client.drop()
    edge = state.edges[0]
    frames = await edge.expect_close(what="expiry of the reattach window")
    # Finalization (§7.8.1) or cleanup (§7.5.3) may close the call and the turn; either way
    # exactly once each, before session.deleted, which is the last frame.
    closers = [f for f in frames if f.get("type") in ("tool.invoke.result", "session.turn.end")]
    kinds = sorted(str(f.get("type")) for f in closers)
    expect(
        kinds == ["session.turn.end", "tool.invoke.result"],
        f"expected one tool result and one turn end before session.deleted, got {kinds}",
    )
    result = next(f for f in closers if f.get("type") == "tool.invoke.result")
    status = result.get("payload", {}).get("status")
    expect(status == "cancelled", f"the open call was closed with status {status!r}")
    expect(frames and frames[-1].get("type") == "session.deleted", "no session.deleted last")
    payload = frames[-1].get("payload", {})
    expect(
        payload.get("reason") == "timeout" and payload.get("deleted_by") == "system",
        f"expiry: session.deleted says reason={payload.get('reason')!r} "
        f"deleted_by={payload.get('deleted_by')!r}, expected timeout/system",
    )


@case(
    id="7.5.3/no-turn-no-cleanup",
    level="MUST",
    description="DELETE with no turn in progress: session.deleted and close, no cleanup frames",
    kill="treat the last completed turn as still in progress when deleting",
)
async def no_turn_no_cleanup(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    turn = new_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send("session.turn.end", {"turn_id": turn, "stop_reason": "end_turn"})
    usage = await client.send("session.usage", usage_payload(turn))
    await edge.recv_until(lambda f: f.get("message_id") == usage["message_id"], what="usage")
    status = await ctx.delete_session()
    expect(200 <= status < 300, f"DELETE answered HTTP {status}")
    for peer in (client, edge):
        frames = await peer.expect_close(what="session.deleted and the close")
        check_cleanup(
            peer,
            frames,
            turn_id=None,
            calls=[],
            reason="master_request",
            deleted_by="master",
            session_id=ctx.session_id,
        )


async def _everyone_sees_cleanup(
    ctx: Context, state: MidTurn, *, reason: str, deleted_by: str
) -> None:
    """Every attached participant gets the §7.5.3 / §7.7 order, then the close."""
    for peer in state.everyone:
        frames = await peer.expect_close(what="cleanup frames and the close")
        check_cleanup(
            peer,
            frames,
            turn_id=state.turn_id,
            calls=state.calls,
            reason=reason,
            deleted_by=deleted_by,
            session_id=ctx.session_id,
        )
