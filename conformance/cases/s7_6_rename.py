"""Session rename (RAWP 1.0.2 §7.6.1; rawp-notes §15.9).

The master MUST broadcast ``session.renamed`` to every edge attached to the session; notes
§15.9 adds the requester (an edge gets its own rename back) and the client, and requires
``renamed_by`` to equal the sender's role.
"""

from __future__ import annotations

from typing import Any

from ..case import case, expect
from ..peer import Peer
from ..runner import Context

__all__: list[str] = []


def _renamed(name: str) -> Any:
    def match(frame: dict[str, Any]) -> bool:
        payload = frame.get("payload", {})
        return frame.get("type") == "session.renamed" and payload.get("name") == name

    return match


def _check(frame: dict[str, Any], peer: Peer, *, session_id: str, renamed_by: str) -> None:
    payload = frame.get("payload", {})
    expect(payload.get("session_id") == session_id, f"{peer.label}: rename names another session")
    expect(
        payload.get("renamed_by") == renamed_by,
        f"{peer.label}: renamed_by {payload.get('renamed_by')!r}, expected {renamed_by}",
    )


@case(
    id="7.6.1/rename-broadcast-from-edge",
    level="MUST",
    description="an edge's session.renamed reaches every edge (requester included) and the client",
    kill="do not send a rename back to the edge that requested it",
)
async def rename_from_edge(ctx: Context) -> None:
    client = await ctx.client()
    first = await ctx.edge()
    second = await ctx.edge()
    await first.send(
        "session.renamed",
        {
            "session_id": ctx.session_id,
            "name": "renamed by an edge",
            "previous_name": "conformance",
            "renamed_by": "edge",
        },
    )
    for peer in (second, client):
        frames = await peer.recv_until(_renamed("renamed by an edge"), what="the rename")
        _check(frames[-1], peer, session_id=ctx.session_id, renamed_by="edge")
    # The second edge renames back; the requester must see its own rename before that one.
    await second.send(
        "session.renamed",
        {"session_id": ctx.session_id, "name": "and back", "renamed_by": "edge"},
    )
    frames = await first.recv_until(_renamed("and back"), what="the renames")
    mine = [f for f in frames if _renamed("renamed by an edge")(f)]
    expect(mine, "the requesting edge did not get its own rename back (§7.6.1: every edge)")
    _check(mine[0], first, session_id=ctx.session_id, renamed_by="edge")


@case(
    id="7.6.1/rename-broadcast-from-client",
    level="MUST",
    description="a client's session.renamed reaches every attached edge",
    kill="deliver a client's rename to the first attached edge only",
)
async def rename_from_client(ctx: Context) -> None:
    client = await ctx.client()
    edges = [await ctx.edge() for _ in range(3)]
    await client.send(
        "session.renamed",
        {"session_id": ctx.session_id, "name": "renamed by the client", "renamed_by": "client"},
    )
    for observed, edge in zip(await ctx.barrier(client, edges), edges, strict=True):
        got = [f for f in observed if _renamed("renamed by the client")(f)]
        expect(got, f"{edge.label} did not get the client's rename")
        _check(got[0], edge, session_id=ctx.session_id, renamed_by="client")


@case(
    id="notes-15.9/renamed-by-sender-role",
    level="MUST",
    description="a rename whose renamed_by is not the sender's role: invalid_frame, not relayed",
    kill="accept renamed_by values other than the sender's role",
)
async def renamed_by_role(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    other = await ctx.edge()
    forged = await edge.send(
        "session.renamed",
        {"session_id": ctx.session_id, "name": "forged", "renamed_by": "master"},
    )
    for observed in await ctx.barrier(edge, [client, other]):
        leaked = [f for f in observed if f.get("message_id") == forged["message_id"]]
        expect(not leaked, "a rename with a forged renamed_by was relayed")
    await ctx.expect_error(edge, "invalid_frame", about="renamed_by master from an edge")


@case(
    id="7.6.1/rename-in-welcome",
    level="SHOULD",
    description="after a rename, a newly attaching edge's welcome carries the new name",
    kill="keep the session's old name after a rename",
)
async def rename_in_welcome(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    await client.send(
        "session.renamed",
        {"session_id": ctx.session_id, "name": "new name", "renamed_by": "client"},
    )
    await edge.recv_until(_renamed("new name"), what="the rename")
    late = await ctx.edge()
    name = late.welcome["payload"].get("session", {}).get("name")
    expect(name == "new name", f"welcome.session.name is {name!r} after the rename")


@case(
    id="7.6.1/rename-by-master",
    level="MUST",
    description="a rename made by the master (PATCH /v1/sessions/{id}) reaches every edge",
    kill="send a rename made by the master to the client only",
    needs=("rename-over-http",),
)
async def rename_by_master(ctx: Context) -> None:
    client = await ctx.client()
    edges = [await ctx.edge() for _ in range(2)]
    status, _ = await ctx.http(
        "PATCH", f"/v1/sessions/{ctx.session_id}", body={"name": "renamed by the master"}
    )
    expect(200 <= status < 300, f"PATCH /v1/sessions/{{id}} answered HTTP {status}")
    for observed, edge in zip(await ctx.barrier(client, edges), edges, strict=True):
        got = [f for f in observed if _renamed("renamed by the master")(f)]
        expect(got, f"{edge.label} did not get the master's rename")
        _check(got[0], edge, session_id=ctx.session_id, renamed_by="master")
