"""Ended is not erased: archived sessions (rawp-notes §16.1, §9).

§16.1: "A session ended by reattach-window expiry (`timeout`) or by a fatal error (`error`)
becomes *archived*: status `terminated`, its header (with `ended_at`, `reason`, `deleted_by`) and
its whole log stay readable over HTTP (get, events, SSE replay, export, fork) until
`--archive-retention` (default 30 days) passes; attaching still closes 4410. An explicit
deletion — `DELETE /v1/session/{id}` (`master_request`) or a participant's delete request
(`user_request`) — purges the log at once (seed 001), after the §9 procedure. `DELETE` on an
archived session purges it (200)."

Both cases judge the ``archived-sessions`` feature itself (``checks``): a master that purges
every ended session fails them and nothing else. They read the session back with
``GET /v1/sessions/{id}``, so they need ``rest-sessions``.
"""

from __future__ import annotations

from ..case import case, expect
from ..peer import Peer
from ..runner import Context

__all__: list[str] = []


async def end_by_client_error(ctx: Context) -> tuple[Peer, dict[str, object]]:
    """Attach a client and an edge, relay one frame, end the session by the client's fatal
    ``session.error``; returns the edge and the frame, once both sockets are closed."""
    client = await ctx.client()
    edge = await ctx.edge()
    frame = await client.send("agent.state", {"state": "idle"})
    await edge.recv_id(frame["message_id"], what="the client's frame")
    await client.send(
        "session.error",
        {"error_code": "x_agent_crashed", "message": "unrecoverable", "fatal": True},
    )
    for peer in (client, edge):
        await peer.expect_close(what="the end of the session after the fatal error")
    return edge, frame


@case(
    id="notes-16.1/archived-readable",
    level="MUST",
    description="a session ended by the client's fatal error is terminated, readable, hellos 4410",
    kill="close hellos for an archived session with 4404 instead of 4410",
    checks="archived-sessions",
    needs=("rest-sessions",),
)
async def archived_readable(ctx: Context) -> None:
    _, frame = await end_by_client_error(ctx)
    status, body = await ctx.http("GET", f"/v1/sessions/{ctx.session_id}")
    expect(status == 200 and isinstance(body, dict), f"GET /v1/sessions/{{id}}: HTTP {status}")
    assert isinstance(body, dict)
    expect(body.get("status") == "terminated", f"archived status {body.get('status')!r}")
    expect(
        body.get("reason") == "error" and body.get("deleted_by") == "client",
        f"archived header reason={body.get('reason')!r} deleted_by={body.get('deleted_by')!r}, "
        "expected error/client",
    )
    status, events = await ctx.http("GET", f"/v1/sessions/{ctx.session_id}/events?order=asc")
    expect(status == 200 and isinstance(events, dict), f"GET …/events: HTTP {status}")
    assert isinstance(events, dict)
    logged = [e for e in events.get("events") or [] if isinstance(e, dict)]
    ids = {e.get("message_id") for e in logged}
    expect(frame["message_id"] in ids, "the archived log lacks the client's frame")
    expect(
        any(e.get("type") == "session.deleted" for e in logged),
        "the archived log lacks its session.deleted",
    )
    code = await ctx.refused("edge", what="close 4410 for an archived session")
    expect(code == 4410, f"a hello for an archived session was closed {code}, not 4410")


@case(
    id="notes-16.1/archived-delete-purges",
    level="MUST",
    description="DELETE of an archived session answers 200 and purges it (GET answers 404)",
    kill="answer DELETE of an archived session with 404 and keep it",
    checks="archived-sessions",
    needs=("rest-sessions",),
)
async def archived_delete(ctx: Context) -> None:
    await end_by_client_error(ctx)
    status, _ = await ctx.http("GET", f"/v1/sessions/{ctx.session_id}")
    expect(status == 200, f"GET of the archived session answered HTTP {status}, expected 200")
    status = await ctx.delete_session()
    expect(status == 200, f"DELETE of an archived session answered HTTP {status}, expected 200")
    status, _ = await ctx.http("GET", f"/v1/sessions/{ctx.session_id}")
    expect(status == 404, f"GET after DELETE of an archived session answered HTTP {status}")
