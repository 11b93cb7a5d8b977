"""Session errors (RAWP 1.0.2 §7.4.1).

``session.error`` with ``fatal: false`` reports a problem and the session goes on; only
``fatal: true`` starts the termination procedure (checked in :mod:`.s7_5_turns`).
"""

from __future__ import annotations

from ..case import case, expect
from ..runner import Context

__all__: list[str] = []


@case(
    id="7.4.1/nonfatal-error-continues",
    level="MUST",
    description="a client's session.error with fatal: false is relayed and the session goes on",
    kill="treat every session.error from a participant as fatal",
)
async def nonfatal_error(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    error = await client.send(
        "session.error",
        {"error_code": "x_tool_flaky", "message": "a tool timed out once", "fatal": False},
    )
    (before,) = await ctx.barrier(client, [edge])
    ids = [f.get("message_id") for f in before]
    expect(error["message_id"] in ids, "the non-fatal session.error was not relayed to the edge")
    deleted = [f for f in before if f.get("type") == "session.deleted"]
    expect(not deleted, "a non-fatal session.error ended the session")
