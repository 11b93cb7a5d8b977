"""Who may do what, names, credentials, the HTTP port (rawp-notes §10, §11, §16.6, §16.7, §16.9).

§16.6: "A participant's delete request, or a fatal `session.error` from an **edge**, needs a
credential that may delete (an API key, or a session token with the `delete` grant); without it
the frame is refused `not_allowed` (non-fatal, not logged, nothing ends)."

§16.7: "A frame `type` is dot-separated lowercase words (`[a-z0-9_]+(\\.[a-z0-9_]+)+`, at most 64
bytes), ignorable or not; a `session_id` is 1–128 characters of `[A-Za-z0-9._:-]` [...]. Anything
else: `invalid_frame` (WebSocket: close 4400 at hello), HTTP 400 problem."

§16.9: "A revoked key or token [...] ends every WebSocket (close 4401) [...] within a second or
two."

§11: "API keys belong to a workspace; sessions belong to a workspace; a key sees only its
workspace." A session the credential may not see is absent for it: 4404, exactly as for an unused
id (docs/protocol.md §5, §13). Errors over HTTP are `application/problem+json` with a `code`
member, and the `Server` header names no version (docs/protocol.md §10, §13).

The session-token cases need ``session-tokens`` (a token without the ``delete`` grant is the
valid-but-limited credential); the cross-workspace case needs a second workspace's API key
(``--other-workspace-key``) and SKIPs, saying so, without one.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, Final
from urllib.parse import urlsplit

from ..case import case, expect, fail, skip
from ..peer import Peer, describe
from ..runner import Context
from ..wire import new_id

__all__: list[str] = []

_PROBLEM: Final = "application/problem+json"
_VERSION: Final = re.compile(r"\d")


async def _token(ctx: Context, *grants: str) -> dict[str, Any]:
    status, body = await ctx.http(
        "POST", f"/v1/sessions/{ctx.session_id}/tokens", body={"grants": list(grants)}
    )
    expect(200 <= status < 300 and isinstance(body, dict), f"token issue answered HTTP {status}")
    assert isinstance(body, dict)
    expect(isinstance(body.get("token"), str), "the token answer has no token")
    return body


async def _goes_on(ctx: Context, client: Peer, edge: Peer, refused: dict[str, Any]) -> None:
    """The refused frame was not relayed, and the session still relays both ways."""
    (before,) = await ctx.barrier(edge, [client])
    leaked = [describe(f) for f in before if f.get("message_id") == refused["message_id"]]
    expect(not leaked, f"the client received the refused frame: {leaked}")
    ended = [describe(f) for f in before if f.get("type") == "session.deleted"]
    expect(not ended, f"the session ended: {ended}")
    await ctx.barrier(client, [edge])


@case(
    id="notes-16.6/edge-fatal-error-not-allowed",
    level="MUST",
    description="an edge's fatal session.error without delete grant: not_allowed, session goes on",
    kill="let an edge's fatal session.error end the session whatever its credential",
    needs=("session-tokens",),
)
async def edge_fatal_not_allowed(ctx: Context) -> None:
    client = await ctx.client()
    token = await _token(ctx)
    edge = await ctx.edge(token=token["token"])
    refused = await edge.send(
        "session.error", {"error_code": "x_edge_gave_up", "message": "bye", "fatal": True}
    )
    await ctx.expect_error(edge, "not_allowed", about="fatal session.error without delete grant")
    await _goes_on(ctx, client, edge, refused)


@case(
    id="notes-16.6/delete-request-not-allowed",
    level="MUST",
    description="a delete request from a token without the delete grant: not_allowed, goes on",
    kill="let a session token without the delete grant delete the session",
    needs=("session-tokens",),
)
async def delete_request_not_allowed(ctx: Context) -> None:
    client = await ctx.client()
    token = await _token(ctx)
    edge = await ctx.edge(token=token["token"])
    refused = await edge.send(
        "session.deleted",
        {"session_id": ctx.session_id, "reason": "user_request", "deleted_by": "edge"},
    )
    await ctx.expect_error(edge, "not_allowed", about="delete request without delete grant")
    await _goes_on(ctx, client, edge, refused)


@case(
    id="notes-16.7/type-grammar",
    level="MUST",
    description="an ignorable type with CR/LF or a '-' in it gets invalid_frame, not relayed",
    kill="accept any ignorable type, skipping the type grammar",
)
async def type_grammar(ctx: Context) -> None:
    client = await ctx.client()
    edge = await ctx.edge()
    for bad in ("conf.line\r\nbreak", "conf.custom-thing"):
        refused = await client.send(bad, {"n": 1}, metadata={"ignorable": True})
        (before,) = await ctx.barrier(client, [edge])
        leaked = [describe(f) for f in before if f.get("message_id") == refused["message_id"]]
        expect(not leaked, f"the edge received the frame of type {bad!r}")
        await ctx.expect_error(client, "invalid_frame", about=f"ignorable type {bad!r}")


@case(
    id="notes-16.7/session-id-grammar",
    level="MUST",
    description="a hello whose session id holds '{' or is over 128 characters is closed 4400",
    kill="accept any session id at hello",
)
async def session_id_grammar(ctx: Context) -> None:
    for bad, what in ((f"{ctx.session_id}{{x}}", "holding '{'"), ("s" * 129, "of 129 chars")):
        code = await ctx.refused(
            "client",
            session_id=bad,
            what=f"close 4400 for a session id {what}",
            create={"name": "conformance"},
        )
        expect(code == 4400, f"a hello with a session id {what} was closed {code}, not 4400")


@case(
    id="notes-11/other-workspace-absent",
    level="MUST",
    description="another workspace's key sees a session as absent: its hellos are closed 4404",
    kill="close hellos for another workspace's session with 4403 instead of 4404",
)
async def other_workspace_absent(ctx: Context) -> None:
    other = ctx.target.other_api_key
    if not other:
        skip(
            "missing prerequisite: an API key of a second workspace of this master "
            "(--other-workspace-key or RAWP_OTHER_WORKSPACE_KEY)",
            setting="--other-workspace-key (an API key of a second workspace)",
        )
    await ctx.client()
    unused = ctx.new_session_id()
    peers: list[Peer] = []
    for role in ("edge", "client"):
        for sid in (ctx.session_id, unused):
            peer = await ctx.send_hello(role, session_id=sid, token=other)
            peers.append(peer)
            code = await _close_code(peer, what=f"the close of a {role} hello")
            expect(
                code == 4404,
                f"{peer.label}: a {role} hello with another workspace's key for "
                f"{'the session' if sid == ctx.session_id else 'an unused id'} closed {code}",
            )
    mine, absent = ((p.ws.close_reason or "").replace(p.session_id, "ID") for p in peers[:2])
    expect(
        mine == absent,
        f"the close reason tells the session exists: {mine!r} vs {absent!r} for an unused id",
    )


async def _close_code(peer: Peer, *, what: str) -> int | None:
    frames = await peer.expect_close(what=what)
    welcomed = [f for f in frames if f.get("type") == "connection.welcome"]
    if welcomed:
        fail(f"{peer.label}: got connection.welcome, expected {what}")
    return peer.close_code


@case(
    id="notes-16.9/revoked-token-closes-4401",
    level="MUST",
    description="revoking a session token closes the WebSocket attached with it with 4401",
    kill="close a revoked token's WebSocket with 1008 instead of 4401",
    needs=("session-tokens",),
)
async def revoked_token(ctx: Context) -> None:
    await ctx.client()
    token = await _token(ctx)
    edge = await ctx.edge(token=token["token"])
    token_id = token.get("token_id")
    expect(isinstance(token_id, str) and token_id, "the token answer has no token_id")
    status, _ = await ctx.http("DELETE", f"/v1/tokens/{token_id}")
    expect(200 <= status < 300, f"DELETE /v1/tokens/{{token_id}} answered HTTP {status}")
    await edge.expect_close(what="the close of a revoked token's WebSocket")
    expect(edge.close_code == 4401, f"the revoked token's socket closed {edge.close_code}")


async def _raw_http(ctx: Context, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` as it is over TCP; the status, headers and body of the answer."""
    url = urlsplit(ctx.target.http_url)
    host = url.hostname or "127.0.0.1"
    port = url.port or (443 if url.scheme == "https" else 80)
    ssl = url.scheme == "https"
    ctx.transcript.add("http", "http", f"→ raw {request[:200]!r}")
    reader, writer = await asyncio.open_connection(host, port, ssl=ssl or None)
    try:
        writer.write(request)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(65536), max(0.1, ctx.remaining() - 0.1))
        while b"\r\n\r\n" not in data:
            more = await asyncio.wait_for(reader.read(65536), max(0.1, ctx.remaining() - 0.1))
            if not more:
                break
            data += more
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    ctx.transcript.add("http", "http", f"← raw {lines[0] if lines else ''}")
    parts = lines[0].split(" ") if lines else []
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body


def _check_problem(where: str, status: int, content_type: str, body: bytes) -> None:
    expect(400 <= status < 500, f"{where}: answered HTTP {status}, expected a 4xx")
    expect(
        content_type.split(";")[0].strip() == _PROBLEM,
        f"{where}: content type {content_type!r}, expected {_PROBLEM}",
    )
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    expect(
        isinstance(data, dict) and isinstance(data.get("code"), str),
        f"{where}: the problem has no code member: {body[:200]!r}",
    )


@case(
    id="notes-10/malformed-requests-problem-json",
    level="MUST",
    description="malformed HTTP requests (bad id, bad JSON, bad request line) get problem+json",
    kill="answer a malformed request line with aiohttp's own text/plain 400",
)
async def malformed_problem(ctx: Context) -> None:
    base = ctx.target.http_url.rstrip("/")
    auth = {"Authorization": f"Bearer {ctx.target.api_key}"}
    for method, path, data in (
        ("DELETE", "/v1/session/bad%0Aid", None),
        ("DELETE", "/v1/session/" + "s" * 129, None),
        ("POST", "/v1/sessions", b"{not json"),
    ):
        ctx.transcript.add("http", "http", f"→ {method} {path} {data!r}")
        async with ctx.http_session.request(
            method,
            base + path,
            data=data,
            headers={**auth, "Content-Type": "application/json"},
            timeout=None,
        ) as response:
            body = await response.read()
            ctx.transcript.add(
                "http", "http", f"← {response.status} {body[:300]!r}", http_status=response.status
            )
            _check_problem(f"{method} {path}", response.status, response.content_type, body)
    status, headers, body = await _raw_http(ctx, b"GET /v1/ sessions HTTP/1.1\x01\r\n\r\n")
    _check_problem("a malformed request line", status, headers.get("content-type", ""), body)


@case(
    id="notes-10/server-header-no-version",
    level="MUST",
    description="no Server header (HTTP port, WebSocket handshake) carries a version",
    kill="send aiohttp's own Server header, with its version, on the HTTP port",
)
async def server_header(ctx: Context) -> None:
    base = ctx.target.http_url.rstrip("/")
    banners: list[tuple[str, str]] = []
    for path in ("/healthz", f"/v1/sessions/{new_id()}"):
        async with ctx.http_session.get(base + path, timeout=None) as response:
            await response.read()
            server = response.headers.get("Server", "")
            ctx.transcript.add("http", "http", f"← {response.status} GET {path} Server: {server}")
            banners.append((f"GET {path}", server))
    client = await ctx.client()
    handshake = client.ws.response
    server = handshake.headers.get("Server", "") if handshake is not None else ""
    banners.append(("the WebSocket handshake", server))
    versioned = [f"{where}: {value!r}" for where, value in banners if _VERSION.search(value)]
    expect(not versioned, "a Server header carries a version: " + "; ".join(versioned))
