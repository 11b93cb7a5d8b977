"""History recovery (RAWP 1.0.2 §7.1.1; rawp-notes §7, §15.10).

§7.1.1: if ``buffer_status.truncated`` is true the master MUST notify the user that the data
is incomplete. Notes §7 / §15.10: the master relays the history to the edges and sends them
``session.error {error_code: "history_truncated", fatal: false, lost_frame_count: N}``.
The notice must reach the edges before the client's next frame does (the master handles one
sender's frames in order).
"""

from __future__ import annotations

from typing import Any

from ..case import case, expect
from ..runner import Context
from ..wire import envelope, now_iso

__all__: list[str] = []


async def _truncated_history(ctx: Context) -> list[dict[str, Any]]:
    """The frames an edge gets between a truncated client history and the client's next frame."""
    client = await ctx.client()
    edge = await ctx.edge()
    client.drop()
    again = await ctx.client(create=False, participant_id=client.participant_id)
    await again.send(
        "session.history",
        {
            "frames": [envelope(ctx.session_id, "agent.state", {"state": "idle"})],
            "buffer_status": {"policy_applied": "RING", "truncated": True, "lost_frame_count": 3},
            "last_sync_timestamp": now_iso(),
            "last_message_id": "",
        },
    )
    (before,) = await ctx.barrier(again, [edge])
    return before


def _notices(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        f
        for f in frames
        if f.get("type") == "session.error"
        and f.get("payload", {}).get("error_code") == "history_truncated"
    ]


@case(
    id="7.1.1/truncated-history-notice",
    level="MUST",
    description="a truncated client history makes the master send the edges history_truncated",
    kill="relay a truncated history without the history_truncated notice",
)
async def truncated_notice(ctx: Context) -> None:
    before = await _truncated_history(ctx)
    histories = [f for f in before if f.get("type") == "session.history"]
    expect(histories, "the truncated history was not relayed to the edge")
    status = histories[0].get("payload", {}).get("buffer_status", {})
    expect(status.get("truncated") is True, f"the relayed buffer_status is {status!r}")
    notices = _notices(before)
    expect(notices, "the edge got no session.error history_truncated")
    fatal = notices[0].get("payload", {}).get("fatal")
    expect(fatal is False, f"the history_truncated notice has fatal {fatal!r}")


@case(
    id="7.1.1/truncated-notice-lost-count",
    level="SHOULD",
    description="the history_truncated notice carries the history's lost_frame_count",
    kill="omit lost_frame_count from the history_truncated notice",
)
async def truncated_notice_count(ctx: Context) -> None:
    notices = _notices(await _truncated_history(ctx))
    expect(notices, "the edge got no session.error history_truncated")
    count = notices[0].get("payload", {}).get("lost_frame_count")
    expect(count == 3, f"lost_frame_count {count!r}, expected 3")
