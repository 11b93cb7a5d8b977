"""Session deletion (RAWP 1.0.2 §7.7.1; rawp-notes §9, §15.2, §15.8).

``session.deleted`` is sent after the §7.5.3 cleanup frames and right before the WebSocket
closes (1000, notes §9), broadcast to every edge attached to the session. Its reason and
``deleted_by`` name the trigger; a participant's delete request is answered with the master's
own ``session.deleted``, never relayed.
"""

from __future__ import annotations

from ..case import case, expect
from ..peer import describe
from ..runner import Context
from ..wire import sender_role
from .common import mid_turn

__all__: list[str] = []


@case(
    id="7.7.1/deleted-to-every-edge",
    level="MUST",
    description="session.deleted reaches every attached edge (and the client) before the close",
    kill="send session.deleted only to the session's client",
)
async def deleted_to_every_edge(ctx: Context) -> None:
    client = await ctx.client()
    edges = [await ctx.edge() for _ in range(3)]
    status = await ctx.delete_session()
    expect(200 <= status < 300, f"DELETE answered HTTP {status}")
    for peer in [*edges, client]:
        frames = await peer.expect_close(what="session.deleted and the close")
        deleted = [f for f in frames if f.get("type") == "session.deleted"]
        expect(deleted, f"{peer.label} was closed without session.deleted")


@case(
    id="7.7.1/deleted-last-before-close",
    level="MUST",
    description="session.deleted is the last frame before the WebSocket closes",
    kill="send a presence frame after session.deleted",
)
async def deleted_last(ctx: Context) -> None:
    state = await mid_turn(ctx, edges=2, calls=1)
    await ctx.delete_session()
    for peer in state.everyone:
        frames = await peer.expect_close(what="session.deleted and the close")
        expect(frames, f"{peer.label}: closed without any frame")
        expect(
            frames[-1].get("type") == "session.deleted",
            f"{peer.label}: the last frame before the close is {describe(frames[-1])}",
        )


@case(
    id="notes-9/close-1000-after-delete",
    level="MUST",
    description="after session.deleted the master closes every participant's socket with 1000",
    kill="close the sockets of a deleted session with 1001 instead of 1000",
)
async def close_1000(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    await ctx.delete_session()
    for peer in (client, edge):
        await peer.expect_close(what="the close after session.deleted")
        expect(peer.close_code == 1000, f"{peer.label}: closed with {peer.close_code}, not 1000")


@case(
    id="7.7.1/deleted-payload-delete",
    level="MUST",
    description="DELETE: session.deleted {session_id, reason master_request, deleted_by master}",
    kill="report a DELETE over HTTP as reason user_request",
)
async def deleted_payload_delete(ctx: Context) -> None:
    await ctx.client()
    edge = await ctx.edge()
    await ctx.delete_session()
    frames = await edge.expect_close(what="session.deleted")
    deleted = [f for f in frames if f.get("type") == "session.deleted"]
    expect(deleted, "no session.deleted before the close")
    frame = deleted[-1]
    payload = frame.get("payload", {})
    expect(payload.get("session_id") == ctx.session_id, "session.deleted names another session")
    expect(
        payload.get("reason") == "master_request" and payload.get("deleted_by") == "master",
        f"reason={payload.get('reason')!r} deleted_by={payload.get('deleted_by')!r}, "
        "expected master_request/master",
    )
    expect(sender_role(frame) == "master", f"stamped sender role {sender_role(frame)!r}")


@case(
    id="notes-15.8/delete-request-answered",
    level="MUST",
    description="a participant's delete request is answered by the master's own session.deleted",
    kill="answer an edge's delete request with deleted_by master instead of edge",
)
async def delete_request_answered(ctx: Context) -> None:
    client = await ctx.client()
    requester = await ctx.edge()
    other = await ctx.edge()
    request = await requester.send(
        "session.deleted",
        {"session_id": ctx.session_id, "reason": "user_request", "deleted_by": "edge"},
    )
    for peer in (client, requester, other):
        frames = await peer.expect_close(what="session.deleted")
        deleted = [f for f in frames if f.get("type") == "session.deleted"]
        expect(len(deleted) == 1, f"{peer.label} got {len(deleted)} session.deleted frames")
        frame = deleted[0]
        expect(
            frame.get("message_id") != request["message_id"],
            f"{peer.label} got the request itself relayed",
        )
        expect(sender_role(frame) == "master", f"{peer.label}: sender {sender_role(frame)!r}")
        payload = frame.get("payload", {})
        expect(
            payload.get("reason") == "user_request" and payload.get("deleted_by") == "edge",
            f"{peer.label}: reason={payload.get('reason')!r} "
            f"deleted_by={payload.get('deleted_by')!r}, expected user_request/edge",
        )
