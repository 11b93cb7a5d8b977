"""One probe per feature (:data:`~.case.FEATURES`): does this master offer it?

A probe is a short scenario run once per run, the first time a case declares the feature
(``checks``, ``needs`` or ``uses``). It returns when the master offers the feature and raises
(:class:`~.case.CaseFailed`, with the reason) when it does not. A probe judges only whether the
feature is there to rely on; the feature's own cases (``checks=...``) judge it fully. Adding a
feature: declare it with :func:`~.case.feature` and register its probe here with :func:`probe`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from .case import FEATURES, CaseFailed, expect
from .runner import Context, ProbeBody
from .wire import presence_change

__all__ = ["PROBES", "probe"]

PROBES: Final[dict[str, ProbeBody]] = {}
_PROBE_NAME: Final = "conformance probe"


def probe(name: str) -> Callable[[ProbeBody], ProbeBody]:
    """Register the decorated coroutine function as the probe of feature ``name``."""

    def register(body: ProbeBody) -> ProbeBody:
        if name not in FEATURES:
            raise ValueError(f"probe for unknown feature {name!r}")
        if name in PROBES:
            raise ValueError(f"duplicate probe for {name!r}")
        PROBES[name] = body
        return body

    return register


def _presence_about(pid: str, state: str) -> Callable[[dict[str, Any]], bool]:
    def match(frame: dict[str, Any]) -> bool:
        change = presence_change(frame, pid)  # one change, or coalesced ones
        return change is not None and change.get("state") == state

    return match


@probe("presence")
async def presence(ctx: Context) -> None:
    """An edge attaching and closing is announced as presence attached, then detached."""
    await ctx.client()
    watcher = await ctx.edge()
    other = await ctx.edge()
    pid = other.participant_id
    try:
        await watcher.recv_until(_presence_about(pid, "attached"), what="presence attached")
        await other.close()
        await watcher.recv_until(_presence_about(pid, "detached"), what="presence detached")
    except CaseFailed as exc:
        raise CaseFailed(f"no session.presence for an edge's attach and close ({exc})") from None


@probe("rest-sessions")
async def rest_sessions(ctx: Context) -> None:
    """``GET /v1/sessions/{id}`` lists the attached client with state attached."""
    client = await ctx.client()
    status, body = await ctx.http("GET", f"/v1/sessions/{ctx.session_id}")
    expect(status == 200, f"GET /v1/sessions/{{id}} answered HTTP {status}")
    participants = body.get("participants") if isinstance(body, dict) else None
    expect(isinstance(participants, list), "GET /v1/sessions/{id} has no participants list")
    assert isinstance(participants, list)
    mine = [
        p
        for p in participants
        if isinstance(p, dict) and p.get("participant_id") == client.participant_id
    ]
    expect(
        mine and mine[0].get("state") == "attached",
        "GET /v1/sessions/{id} does not list the attached client as attached",
    )


@probe("session-tokens")
async def session_tokens(ctx: Context) -> None:
    """``POST /v1/sessions/{id}/tokens`` issues a token an edge can attach with."""
    await ctx.client()
    status, body = await ctx.http("POST", f"/v1/sessions/{ctx.session_id}/tokens", body={})
    expect(200 <= status < 300, f"POST /v1/sessions/{{id}}/tokens answered HTTP {status}")
    token = body.get("token") if isinstance(body, dict) else None
    expect(isinstance(token, str) and token, "the token answer has no token")
    assert isinstance(token, str)
    await ctx.edge(token=token)


@probe("rename-over-http")
async def rename_over_http(ctx: Context) -> None:
    """``PATCH /v1/sessions/{id}`` with a name answers 2xx."""
    await ctx.client()
    status, _ = await ctx.http(
        "PATCH", f"/v1/sessions/{ctx.session_id}", body={"name": _PROBE_NAME}
    )
    expect(200 <= status < 300, f"PATCH /v1/sessions/{{id}} answered HTTP {status}")


@probe("archived-sessions")
async def archived_sessions(ctx: Context) -> None:
    """A session its client ends with a fatal ``session.error`` reads back as terminated."""
    client = await ctx.client()
    await client.send(
        "session.error", {"error_code": "x_probe_done", "message": "probe", "fatal": True}
    )
    await client.expect_close(what="the end of the session after the fatal error")
    status, body = await ctx.http("GET", f"/v1/sessions/{ctx.session_id}")
    expect(status == 200, f"GET /v1/sessions/{{id}} of an ended session answered HTTP {status}")
    expect(
        isinstance(body, dict) and body.get("status") == "terminated",
        "GET /v1/sessions/{id} of an ended session does not say terminated",
    )
