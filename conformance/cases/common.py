"""Scenarios several case modules share (RAWP §7.5.3, §7.7, §7.8.1; rawp-notes §8, §9).

* :func:`mid_turn` — a client with an open turn, an open text block and open tool calls, and
  edges that have seen all of it;
* :func:`check_cleanup` — the §7.5.3 / §7.7 order one participant saw before its socket closed;
* :func:`collect_finalization` — the frames an edge gets when the client's connection drops.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ..case import CaseFailed, expect, skip
from ..peer import Peer, describe
from ..runner import Context
from ..wire import is_synthetic, new_id, sender_role

__all__ = [
    "CLEANUP_TYPES",
    "Finalization",
    "MidTurn",
    "check_cleanup",
    "collect_finalization",
    "mid_turn",
    "synthetic_summary",
    "window_fits",
]

CLEANUP_TYPES: Final = frozenset({"tool.invoke.result", "session.turn.end", "session.deleted"})


@dataclass
class MidTurn:
    """A session with a turn in progress."""

    client: Peer
    edges: list[Peer]
    turn_id: str
    calls: list[str]
    block_id: str = "b1"
    thinking_id: str = "th1"
    interaction_id: str | None = None
    sent: list[dict[str, Any]] = field(default_factory=list)

    @property
    def everyone(self) -> list[Peer]:
        """The client and the edges."""
        return [self.client, *self.edges]


async def mid_turn(
    ctx: Context,
    *,
    edges: int = 1,
    calls: int = 2,
    thinking: bool = False,
    interaction: bool = False,
    resolved: int = 0,
) -> MidTurn:
    """Open a turn with a text block and ``calls`` unresolved tool calls; edges see it all.

    ``resolved`` more calls are made and answered first (they are not open any more).
    """
    client = await ctx.client()
    peers = [await ctx.edge() for _ in range(edges)]
    state = MidTurn(client, peers, new_id(), [new_id() for _ in range(calls)])
    send = client.send
    state.sent.append(await send("session.turn.start", {"turn_id": state.turn_id, "turn_index": 0}))
    if thinking:
        state.sent.append(await send("agent.state", {"state": "thinking"}))
        state.sent.append(
            await send("agent.thinking.delta", {"block_id": state.thinking_id, "delta": "hm"})
        )
    state.sent.append(await send("agent.text.delta", {"block_id": state.block_id, "delta": "Hi"}))
    for _ in range(resolved):
        call = new_id()
        request = {"call_id": call, "tool_name": "probe", "input": {"n": 0}}
        state.sent.append(await send("tool.invoke.request", request))
        result = {"call_id": call, "status": "ok", "output": "done"}
        state.sent.append(await send("tool.invoke.result", result))
    for call in state.calls:
        state.sent.append(
            await send(
                "tool.invoke.request", {"call_id": call, "tool_name": "probe", "input": {"n": 1}}
            )
        )
    if interaction:
        state.interaction_id = new_id()
        state.sent.append(
            await send(
                "agent.interaction.request",
                {
                    "interaction_id": state.interaction_id,
                    "kind": "confirmation",
                    "prompt": "Proceed?",
                },
            )
        )
    last = state.sent[-1]["message_id"]
    for edge in peers:
        await edge.recv_until(lambda f: f.get("message_id") == last, what="the turn's frames")
    return state


def check_cleanup(
    peer: Peer,
    frames: Sequence[dict[str, Any]],
    *,
    turn_id: str | None,
    calls: Sequence[str],
    reason: str,
    deleted_by: str,
    session_id: str,
) -> dict[str, Any]:
    """The §7.5.3 order in what ``peer`` read up to its close; returns the session.deleted.

    Every open call gets one ``tool.invoke.result`` with status cancelled, then the open turn
    one ``session.turn.end`` with stop_reason error, then ``session.deleted`` as the very last
    frame before the close (§7.7.1).
    """
    seen = [describe(f) for f in frames]
    expect(frames, f"{peer.label}: the connection closed without any frame")
    last = frames[-1]
    expect(
        last.get("type") == "session.deleted",
        f"{peer.label}: the last frame before the close is {describe(last)}, not "
        f"session.deleted (saw {seen})",
    )
    deleted_at = len(frames) - 1
    early = [i for i, f in enumerate(frames[:-1]) if f.get("type") == "session.deleted"]
    expect(not early, f"{peer.label}: more than one session.deleted: {seen}")
    results: dict[str, int] = {}
    for index, frame in enumerate(frames):
        if frame.get("type") != "tool.invoke.result":
            continue
        payload = frame.get("payload", {})
        call = payload.get("call_id")
        expect(call not in results, f"{peer.label}: two results for call {call}: {seen}")
        results[str(call)] = index
        expect(
            payload.get("status") == "cancelled",
            f"{peer.label}: cleanup result for {call} has status {payload.get('status')!r}",
        )
    extra = [c for c in results if c not in calls]
    expect(not extra, f"{peer.label}: cleanup results for calls that were not open: {extra}")
    missing = [c for c in calls if c not in results]
    expect(not missing, f"{peer.label}: no cancelled tool.invoke.result for {missing} (saw {seen})")
    ends = [i for i, f in enumerate(frames) if f.get("type") == "session.turn.end"]
    if turn_id is None:
        expect(not ends, f"{peer.label}: a session.turn.end without a turn in progress: {seen}")
    else:
        expect(len(ends) == 1, f"{peer.label}: expected one session.turn.end, saw {seen}")
        end = frames[ends[0]]
        payload = end.get("payload", {})
        expect(payload.get("turn_id") == turn_id, f"{peer.label}: turn end names another turn")
        expect(
            payload.get("stop_reason") == "error",
            f"{peer.label}: cleanup turn end has stop_reason {payload.get('stop_reason')!r}",
        )
        late = [c for c, i in results.items() if i > ends[0]]
        expect(not late, f"{peer.label}: tool results after the turn end: {seen}")
        expect(ends[0] < deleted_at, f"{peer.label}: session.deleted before the turn end")
    payload = last.get("payload", {})
    expect(
        payload.get("session_id") == session_id,
        f"{peer.label}: session.deleted names session {payload.get('session_id')!r}",
    )
    expect(
        payload.get("reason") == reason and payload.get("deleted_by") == deleted_by,
        f"{peer.label}: session.deleted says reason={payload.get('reason')!r} "
        f"deleted_by={payload.get('deleted_by')!r}, expected {reason}/{deleted_by}",
    )
    return last


@dataclass
class Finalization:
    """What an edge saw after the client dropped, sorted by what it closes."""

    frames: list[dict[str, Any]]
    text_done: dict[str, Any] | None = None
    thinking_done: dict[str, Any] | None = None
    tool_result: dict[str, Any] | None = None
    turn_end: dict[str, Any] | None = None
    idle: dict[str, Any] | None = None

    def closers(self) -> list[dict[str, Any]]:
        """The frames that closed something."""
        found = [self.text_done, self.thinking_done, self.tool_result, self.turn_end, self.idle]
        return [f for f in found if f is not None]


async def collect_finalization(edge: Peer, state: MidTurn) -> Finalization:
    """Read what ``edge`` gets after the client dropped, until every closer arrived.

    Reading stops when a text done, thinking done (if a thinking block was open), tool result,
    turn end and ``agent.state idle`` (if the agent was busy) have all been seen, or at the
    case's deadline (then the caller judges what arrived). No shorter wait: how fast a master
    emits its finalization frames is not what the cases check.
    """
    found = Finalization(frames=[])
    sent = {str(f.get("type")) for f in state.sent}
    want_thinking = "agent.thinking.delta" in sent
    want_idle = "agent.state" in sent or "agent.interaction.request" in sent
    while True:
        complete = (
            found.text_done is not None
            and (found.thinking_done is not None or not want_thinking)
            and found.tool_result is not None
            and found.turn_end is not None
            and (found.idle is not None or not want_idle)
        )
        if complete:
            return found
        started = bool(found.closers())
        try:
            frame = await edge.recv(what="finalization frames after the client dropped")
        except CaseFailed:
            if started:
                return found
            raise
        found.frames.append(frame)
        kind = frame.get("type")
        payload = frame.get("payload", {})
        if not isinstance(payload, dict) or sender_role(frame) == "client":
            continue
        if kind == "agent.text.done" and payload.get("block_id") == state.block_id:
            found.text_done = frame
        elif kind == "agent.thinking.done" and payload.get("block_id") == state.thinking_id:
            found.thinking_done = frame
        elif kind == "tool.invoke.result" and payload.get("call_id") in state.calls:
            found.tool_result = frame
        elif kind == "session.turn.end" and payload.get("turn_id") == state.turn_id:
            found.turn_end = frame
        elif kind == "agent.state" and payload.get("state") == "idle":
            found.idle = frame


def synthetic_summary(frames: Sequence[dict[str, Any]]) -> list[str]:
    """Descriptions of the synthetic frames among ``frames``."""
    return [describe(f) for f in frames if is_synthetic(f)]


def window_fits(ctx: Context, window_ms: int) -> None:
    """Skip the case when waiting out the master's reattach window would not fit in what
    is left of the per-case timeout — saying both ways to make it run."""
    if window_ms / 1000 + 1.0 <= ctx.remaining():
        return
    needed = math.ceil(ctx.timeout - ctx.remaining() + window_ms / 1000 + 5)
    skip(
        f"the master's reattach window ({window_ms} ms) does not fit in the per-case timeout "
        f"({ctx.timeout:g}s); to run it, give --timeout {needed} or more, or test a master "
        "started with a shorter window (rawp serve --reattach-window 3)",
        setting=f"a reattach window of at most {max(ctx.timeout - 1.0, 0):g}s "
        f"(or --timeout of at least {needed}s)",
    )
