"""The master's HTTP API that other cases rely on (rawp-notes §10, §11).

These cases judge the features other cases only lean on (:data:`~conformance.case.FEATURES`):
the participants' connection state in ``GET /v1/sessions/{id}``, session tokens issued by
``POST /v1/sessions/{id}/tokens``, and renames made with ``PATCH /v1/sessions/{id}``. A master
without one of them fails exactly the case here; the cases that rely on it fall back to another
signal or SKIP naming it.
"""

from __future__ import annotations

import asyncio

from ..case import case, expect
from ..runner import Context

__all__: list[str] = []

_POLL_S = 0.02


@case(
    id="notes-10/session-state-over-http",
    level="MUST",
    description="GET /v1/sessions/{id} lists each participant, attached or detached as it is",
    kill="report a detached participant as attached in GET /v1/sessions/{id}",
    checks="rest-sessions",
)
async def session_state_over_http(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    for peer in (client, edge):
        state = await ctx.participant_state(ctx.session_id, peer.participant_id)
        expect(state == "attached", f"GET /v1/sessions/{{id}} shows {peer.label} as {state!r}")
    edge.drop()
    while True:
        state = await ctx.participant_state(ctx.session_id, edge.participant_id)
        if state == "detached":
            break
        expect(state == "attached", f"the dropped edge is shown as {state!r}")
        await asyncio.sleep(_POLL_S)
    state = await ctx.participant_state(ctx.session_id, client.participant_id)
    expect(state == "attached", f"after the edge's drop the client is shown as {state!r}")


@case(
    id="notes-10/session-tokens-over-http",
    level="MUST",
    description="POST /v1/sessions/{id}/tokens issues a session token an edge can attach with",
    kill="answer POST /v1/sessions/{id}/tokens with 404",
    checks="session-tokens",
)
async def session_tokens_over_http(ctx: Context) -> None:
    await ctx.client()
    status, body = await ctx.http("POST", f"/v1/sessions/{ctx.session_id}/tokens", body={})
    expect(200 <= status < 300, f"POST /v1/sessions/{{id}}/tokens answered HTTP {status}")
    token = body.get("token") if isinstance(body, dict) else None
    expect(isinstance(token, str) and token, f"the token answer has no token: {body!r}")
    assert isinstance(token, str)
    edge = await ctx.edge(token=token)
    expect(edge.participant_id, "the edge attached with the session token has no participant id")


@case(
    id="notes-10/rename-over-http",
    level="MUST",
    description="PATCH /v1/sessions/{id} renames the session: a new edge's welcome has the name",
    kill="answer PATCH /v1/sessions/{id} with 405",
    checks="rename-over-http",
)
async def rename_over_http(ctx: Context) -> None:
    await ctx.client()
    status, _ = await ctx.http(
        "PATCH", f"/v1/sessions/{ctx.session_id}", body={"name": "renamed over HTTP"}
    )
    expect(200 <= status < 300, f"PATCH /v1/sessions/{{id}} answered HTTP {status}")
    late = await ctx.edge()
    name = late.welcome["payload"].get("session", {}).get("name")
    expect(name == "renamed over HTTP", f"after the PATCH, welcome.session.name is {name!r}")
