"""WSS disconnect recovery (RAWP 1.0.2 §7.8; rawp-notes §8, §15.1, §15.6, §15.10).

When the client's connection drops, the master finalizes its unfinished state (§7.8.1) with
frames carrying ``metadata.synthetic: true`` and relays them to the edges: open text and
thinking blocks done, open tool calls cancelled ("Connection lost"), the open turn ended
(``disconnected``), pending interactions discarded, the agent idle. When the client reattaches
and sends ``session.history`` the finalization is undone (§7.8.3) — unless the history is
truncated or holds a ``session.deleted``. After a normal termination nothing is finalized
(§7.8.2). Whether the session's view is finalized is read from a new edge's
``welcome.session.status`` (notes §4, §6: running while a turn is open, idle otherwise).
"""

from __future__ import annotations

import time
from typing import Any

from ..case import CaseFailed, case, expect, skip
from ..peer import Peer, describe
from ..runner import Context
from ..wire import envelope, is_synthetic, now_iso, sender_role, usage_payload
from .common import MidTurn, collect_finalization, mid_turn

__all__: list[str] = []


async def _dropped(ctx: Context, **kwargs: Any) -> tuple[MidTurn, Any]:
    state = await mid_turn(ctx, edges=1, calls=1, **kwargs)
    state.client.drop()
    return state, await collect_finalization(state.edges[0], state)


@case(
    id="7.8.1/finalize-tool-call",
    level="MUST",
    description="client drop: each open call gets a synthetic cancelled 'Connection lost' result",
    kill="finalize open tool calls with status error instead of cancelled",
)
async def finalize_tool_call(ctx: Context) -> None:
    state, found = await _dropped(ctx)
    frame = found.tool_result
    expect(frame is not None, f"no tool.invoke.result for the open call (saw {found.frames})")
    assert frame is not None
    payload = frame.get("payload", {})
    expect(payload.get("call_id") == state.calls[0], "the result names another call")
    expect(payload.get("status") == "cancelled", f"status {payload.get('status')!r}")
    expect(payload.get("output") == "Connection lost", f"output {payload.get('output')!r}")
    expect(is_synthetic(frame), "the finalization result lacks metadata.synthetic: true")


@case(
    id="7.8.1/finalize-turn",
    level="MUST",
    description="client drop: the open turn gets a synthetic turn end, stop_reason disconnected",
    kill="end the open turn with stop_reason error when the client drops",
)
async def finalize_turn(ctx: Context) -> None:
    _, found = await _dropped(ctx)
    frame = found.turn_end
    expect(frame is not None, "no session.turn.end for the open turn")
    assert frame is not None
    reason = frame.get("payload", {}).get("stop_reason")
    expect(reason == "disconnected", f"stop_reason {reason!r}, expected disconnected")
    expect(is_synthetic(frame), "the finalization turn end lacks metadata.synthetic: true")


@case(
    id="7.8.1/finalize-blocks",
    level="MUST",
    description="client drop: open text and thinking blocks get synthetic done frames",
    kill="leave open text blocks unfinished when the client drops",
)
async def finalize_blocks(ctx: Context) -> None:
    state, found = await _dropped(ctx, thinking=True)
    expect(found.text_done is not None, f"no agent.text.done for block {state.block_id}")
    expect(found.thinking_done is not None, f"no agent.thinking.done for block {state.thinking_id}")


@case(
    id="7.8.1/finalize-agent-idle",
    level="MUST",
    description="client drop: a non-idle agent is switched to idle with a synthetic agent.state",
    kill="leave agent.state as it was when the client drops",
)
async def finalize_agent_idle(ctx: Context) -> None:
    _, found = await _dropped(ctx, thinking=True)
    expect(found.idle is not None, "no agent.state idle after the client dropped while thinking")


@case(
    id="7.8.1/finalize-interaction-discarded",
    level="MUST",
    description="client drop: a pending interaction is discarded (no longer requires_action)",
    kill="keep pending interactions when finalizing",
)
async def finalize_interaction(ctx: Context) -> None:
    state = await mid_turn(ctx, edges=1, calls=1, interaction=True)
    window_ms = state.client.welcome["payload"].get("reattach_window_ms")
    expect(isinstance(window_ms, int), f"welcome.reattach_window_ms is {window_ms!r}")
    assert isinstance(window_ms, int)
    dropped = time.monotonic()
    state.client.drop()
    await collect_finalization(state.edges[0], state)
    # The late edge must see the finalized session while it still exists: the client's
    # reattach window (from its welcome) runs from the drop. Whether it attached in time is
    # the clock's doing, never the master's: past the window the case cannot be judged.
    try:
        late = await ctx.edge()
    except CaseFailed:
        if time.monotonic() - dropped < window_ms / 1000:
            raise
        _window_passed(ctx, window_ms, time.monotonic() - dropped)
    status = late.welcome["payload"].get("session", {}).get("status")
    if status == "terminated" and time.monotonic() - dropped >= window_ms / 1000:
        _window_passed(ctx, window_ms, time.monotonic() - dropped)
    expect(status == "idle", f"after finalization the session status is {status!r}, not idle")


def _window_passed(ctx: Context, window_ms: int, elapsed: float) -> None:
    skip(
        f"the late edge attached {elapsed:.2f}s after the client's drop, past the reattach "
        f"window the welcome gives ({window_ms} ms): the session had ended by the clock",
        setting=f"a reattach window of at least {max(2.0, 2 * elapsed):.0f}s",
    )


@case(
    id="7.8.1/synthetic-flag",
    level="MUST",
    description="every frame the master synthesizes when finalizing carries metadata.synthetic",
    kill="omit metadata.synthetic from the cancelled tool results of a finalization",
)
async def synthetic_flag(ctx: Context) -> None:
    _, found = await _dropped(ctx, thinking=True)
    closers = found.closers()
    expect(closers, "no finalization frames at all")
    unmarked = [describe(f) for f in closers if not is_synthetic(f)]
    expect(not unmarked, f"finalization frames without metadata.synthetic: {', '.join(unmarked)}")
    roles = {sender_role(f) for f in closers}
    expect(roles == {"master"}, f"finalization frames stamped with sender roles {roles}")


@case(
    id="7.8.2/no-finalization-after-termination",
    level="MUST",
    description="a session deleted mid-turn is cleaned up, never finalized with synthetic frames",
    kill="finalize (synthetic frames) before the cleanup when a session is deleted",
)
async def no_finalization_after_termination(ctx: Context) -> None:
    state = await mid_turn(ctx, edges=1, calls=1)
    await ctx.delete_session()
    for peer in state.everyone:
        frames = await peer.expect_close(what="cleanup and the close")
        synthetic = [describe(f) for f in frames if is_synthetic(f)]
        expect(not synthetic, f"{peer.label} got synthetic frames: {', '.join(synthetic)}")


@case(
    id="notes-8/edge-drop-no-finalization",
    level="SHOULD",
    description="an edge dropping finalizes nothing: the client's turn goes on",
    kill="finalize the session when an edge's connection drops",
    uses=("presence", "rest-sessions"),
)
async def edge_drop(ctx: Context) -> None:
    state = await mid_turn(ctx, edges=2, calls=1)
    gone, watcher = state.edges
    gone.drop()
    await ctx.detached(gone, watcher, required=True)
    result = await state.client.send(
        "tool.invoke.result", {"call_id": state.calls[0], "status": "ok", "output": "done"}
    )
    frames = await watcher.recv_until(
        lambda f: f.get("message_id") == result["message_id"] or is_synthetic(f),
        what="the client's tool result",
    )
    synthetic = [describe(f) for f in frames if is_synthetic(f)]
    expect(not synthetic, f"an edge drop produced {', '.join(synthetic)}")


# --- §7.8.3 unfinalization -----------------------------------------------------------------


async def _reattach_with_history(
    ctx: Context, *, truncated: bool, deleted_inside: bool = False
) -> tuple[MidTurn, Peer, dict[str, Any], list[dict[str, Any]]]:
    """Drop mid-turn, wait for finalization, reattach and send a history.

    Returns the state, the reattached client, the history sent and the history as relayed to
    the edge.
    """
    state = await mid_turn(ctx, edges=1, calls=1)
    edge = state.edges[0]
    state.client.drop()
    await edge.recv_until(
        lambda f: f.get("type") == "session.turn.end" and is_synthetic(f),
        what="the synthetic turn end of the finalization",
    )
    again = await ctx.client(create=False, participant_id=state.client.participant_id)
    sid = ctx.session_id
    frames = [
        envelope(sid, "agent.text.delta", {"block_id": state.block_id, "delta": " more"}),
        envelope(
            sid,
            "tool.invoke.result",
            {"call_id": state.calls[0], "status": "ok", "output": "42"},
        ),
    ]
    if deleted_inside:
        frames.append(
            envelope(
                sid,
                "session.deleted",
                {"session_id": sid, "reason": "user_request", "deleted_by": "client"},
            )
        )
    last = state.sent[-1]
    status: dict[str, Any] = {"policy_applied": "RING", "truncated": truncated}
    status["lost_frame_count"] = 2 if truncated else 0
    history = await again.send(
        "session.history",
        {
            "frames": frames,
            "buffer_status": status,
            "last_sync_timestamp": last["timestamp"],
            "last_message_id": last["message_id"],
        },
    )
    got = await edge.recv_until(
        lambda f: f.get("message_id") == history["message_id"], what="the relayed session.history"
    )
    relayed = got[-1].get("payload", {})
    inner = relayed.get("frames") if isinstance(relayed, dict) else None
    expect(isinstance(inner, list), "the relayed session.history has no frames list")
    assert isinstance(inner, list)
    ids = [f.get("message_id") for f in inner if isinstance(f, dict)]
    missing = [describe(f) for f in frames[:2] if f["message_id"] not in ids]
    expect(not missing, f"the relayed history lacks {', '.join(missing)}")
    return state, again, history, inner


async def _status(ctx: Context) -> str | None:
    """The session status a newly attaching edge is told, or None when the session is gone."""
    peer = await ctx.send_hello("edge")
    try:
        frame = await peer.recv(what="connection.welcome or a close")
    except CaseFailed:
        if peer.close_code == 4410:
            return None  # the history's session.deleted ended the session: also not restored
        raise
    if frame.get("type") != "connection.welcome":
        return None
    status = frame.get("payload", {}).get("session", {}).get("status")
    return str(status)


@case(
    id="7.8.3/unfinalization",
    level="MUST",
    description="a non-truncated history after reattach undoes the finalization: the turn goes on",
    kill="keep the finalized state even when the client's history is not truncated",
)
async def unfinalization(ctx: Context) -> None:
    state, again, _, _ = await _reattach_with_history(ctx, truncated=False)
    status = await _status(ctx)
    expect(status == "running", f"after unfinalization the status is {status!r}, not running")
    end = await again.send(
        "session.turn.end", {"turn_id": state.turn_id, "stop_reason": "end_turn"}
    )
    usage = await again.send("session.usage", usage_payload(state.turn_id))
    frames = await state.edges[0].recv_until(
        lambda f: f.get("message_id") == usage["message_id"],
        what="the turn end and usage after unfinalization",
    )
    ids = [f.get("message_id") for f in frames]
    expect(end["message_id"] in ids, "the real turn end of the restored turn was refused")


@case(
    id="7.8.3/no-unfinalize-truncated",
    level="MUST",
    description="a truncated history keeps the finalized state (its frames relayed, not replayed)",
    kill="undo the finalization even when the client's history is truncated",
)
async def no_unfinalize_truncated(ctx: Context) -> None:
    await _reattach_with_history(ctx, truncated=True)
    status = await _status(ctx)
    expect(status == "idle", f"after a truncated history the status is {status!r}, not idle")


@case(
    id="7.8.3/no-unfinalize-deleted",
    level="MUST",
    description="a history holding a session.deleted keeps the finalized state",
    kill="undo the finalization even when the history holds a session.deleted",
)
async def no_unfinalize_deleted(ctx: Context) -> None:
    await _reattach_with_history(ctx, truncated=False, deleted_inside=True)
    status = await _status(ctx)
    expect(
        status in (None, "idle", "terminated"),
        f"after a history holding session.deleted the status is {status!r} (turn restored)",
    )


@case(
    id="7.8.3/history-relayed-to-edges",
    level="MUST",
    description="the client's session.history is relayed to the edges with its buffer_status",
    kill="do not relay the client's session.history to the edges",
)
async def history_relayed(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    client.drop()
    again = await ctx.client(create=False, participant_id=client.participant_id)
    inner = envelope(ctx.session_id, "agent.state", {"state": "idle"})
    status = {"policy_applied": "DROP", "truncated": False, "lost_frame_count": 0}
    history = await again.send(
        "session.history",
        {
            "frames": [inner],
            "buffer_status": status,
            "last_sync_timestamp": now_iso(),
            "last_message_id": "",
        },
    )
    (before,) = await ctx.barrier(again, [edge])
    got = [f for f in before if f.get("message_id") == history["message_id"]]
    expect(got, "the client's session.history was not relayed to the edge")
    payload = got[0].get("payload", {})
    relayed_status = payload.get("buffer_status", {})
    expect(
        relayed_status.get("policy_applied") == "DROP" and relayed_status.get("truncated") is False,
        f"the relayed buffer_status is {relayed_status!r}",
    )
    ids = [f.get("message_id") for f in payload.get("frames", []) if isinstance(f, dict)]
    expect(inner["message_id"] in ids, "the relayed history lost its frame")
