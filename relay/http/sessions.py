"""Session resources: create, list, read, rename, fork (notes §10; seeds 000–002, 004).

* ``POST /v1/sessions`` — idempotent on ``session_id``. The first create answers 201 with
  the session and one session token (its secret shown in this answer only); a repeat create
  answers 200 with the existing session, unchanged, and **no** token (issue more with
  ``POST /v1/sessions/{id}/tokens``). API keys only.
* ``GET /v1/sessions`` — the key's workspace, ordered by session id, paged with ``limit``
  and the ``after`` cursor (``next_after`` in the answer). API keys only.
* ``GET /v1/sessions/{id}`` — header, status, participants with presence, usage totals.
* ``PATCH /v1/sessions/{id}`` — rename: a ``session.renamed`` with ``renamed_by: master``
  is logged and sent to every participant (§7.6).
* ``POST /v1/sessions/{id}/fork`` — a new session whose log is a copy of seqs 1..``at_seq``
  (header: ``parent_session_id``, ``seed_length``); a prefix that ends inside a turn is
  finalized in the fork (§7.8.2: nobody is attached to it). API keys only.
* ``POST /v1/sessions/{id}/continue`` — an ended session carried on (notes §17.2): a new
  live session whose parent is the ended one, holding its whole log but the final
  ``session.deleted``; 409 ``not_ended`` on a live one. API keys only.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from aiohttp import web

from protocol import codec, names
from protocol.errors import ProtocolError, StoreError
from protocol.frames import Renamed, RenamedPayload
from protocol.state import status

from ..auth import DEFAULT_TOKEN_TTL_S, GRANTS, MAX_TOKEN_TTL_S, KeyRefused, Principal
from ..hub import Hub, new_session_header
from ..session import Session
from ..store.base import SessionHeader
from .access import (
    hub_of,
    int_query,
    loaded_session,
    principal_of,
    require_act,
    visible_header,
    writable_session,
)
from .fencing import fenced_write
from .middleware import HTTP_METRICS, ApiError
from .models import (
    ContinueBody,
    CreateBody,
    ForkBody,
    ParticipantOut,
    RenameBody,
    RunErrorOut,
    SessionOut,
    TokenBody,
    TokenOut,
    UsageOut,
    decode_body,
    json_response,
    ms_to_time,
)

__all__ = [
    "continue_session",
    "create_session",
    "describe",
    "fork_session",
    "get_session",
    "issue_token",
    "list_sessions",
    "new_session_id",
    "rename_session",
]


def new_session_id() -> str:
    """A fresh session id for a create or fork that named none."""
    return "s-" + uuid.uuid4().hex


async def describe(hub: Hub, session: Session, header: SessionHeader | None = None) -> SessionOut:
    """The API view of a loaded session (presence from the store: every node's view)."""
    header = header or session.header
    records = sorted(
        await hub.store.list_participants(session.id),
        key=lambda r: (r.role != "client", r.participant_id),
    )
    client = [r for r in records if r.role == "client"]
    connection: Literal["attached", "detached", "none"] = "none"
    if client:
        connection = "attached" if client[0].attached else "detached"
    state = session.state
    return SessionOut(
        session_id=session.id,
        name=session.header.name,
        workspace=header.workspace,
        agent_id=header.agent_id,
        parent_session_id=header.parent_session_id,
        seed_length=header.seed_length,
        created_at=header.created_at,
        epoch=header.epoch,
        head_seq=session.head,
        status="terminated" if session.header.archived else status(state),
        connection=connection,
        agent_state=state.agent_state,
        pending_interactions=sorted(state.pending_interactions),
        participants=[
            ParticipantOut(
                participant_id=r.participant_id,
                role=r.role,
                state="attached" if r.attached else "detached",
                generation=r.generation,
                cursor=r.cursor,
                detached_at=None if r.attached else ms_to_time(r.detached_at_ms),
                presence=r.presence,
            )
            for r in records
        ],
        usage=UsageOut(
            input_tokens=state.input_tokens,
            output_tokens=state.output_tokens,
            cost_used=state.cost_used,
            cost_unit=state.cost_unit,
            turns_completed=state.turns_completed,
            compactions=state.compactions,
        ),
        ended_at=session.header.ended_at,
        reason=session.header.reason,
        deleted_by=session.header.deleted_by,
        vault_ids=list(header.vault_ids),
        stop_reason=state.stop_reason,
        last_error=None
        if state.last_error is None
        else RunErrorOut(code=state.last_error[0], message=state.last_error[1]),
    )


async def issue_token(
    request: web.Request, principal: Principal, session_id: str, spec: TokenBody
) -> TokenOut:
    """Issue a session token for ``session_id`` as ``spec`` asks (grants, ttl)."""
    unknown = sorted(set(spec.grants) - GRANTS)
    if unknown:
        raise ApiError(
            400,
            f"unknown grants {unknown}; a session token may be granted {sorted(GRANTS)}",
            code="invalid_body",
        )
    ttl = spec.ttl_s if spec.ttl_s is not None else DEFAULT_TOKEN_TTL_S
    if ttl > MAX_TOKEN_TTL_S:
        raise ApiError(
            400, f"ttl_s must be at most {int(MAX_TOKEN_TTL_S)} (30 days)", code="invalid_body"
        )
    try:
        secret, record = await hub_of(request).auth.issue_token(
            principal.workspace,
            session_id,
            grants=frozenset(spec.grants),
            ttl_s=ttl,
            issuer=principal,
        )
    except KeyRefused as exc:
        raise ApiError(exc.status, exc.message, code=exc.code) from None
    request.app[HTTP_METRICS].tokens_issued.inc()
    return TokenOut(
        token_id=record.digest,
        session_id=session_id,
        grants=list(record.grants),
        expires_at=ms_to_time(record.expires_at_ms),
        token=secret,
    )


async def create_session(request: web.Request) -> web.Response:
    """``POST /v1/sessions``."""
    hub = hub_of(request)
    principal = await principal_of(request)
    body = await decode_body(request, CreateBody, optional=True)
    require_act(principal, "create_session")
    may_issue = principal.may_issue_tokens()
    if body.token is not None:
        # Refused before anything is created: the create is all or nothing.
        require_act(principal, "issue_tokens")
        for grant in body.token.grants:
            if grant in GRANTS and not principal.may_grant(grant):
                raise ApiError(403, principal.grant_refusal(grant), code="not_allowed")
    session_id = body.session_id or new_session_id()
    if body.parent_session_id is not None:
        parent = await hub.store.get_session(body.parent_session_id)
        if parent is None or not principal.can_see(parent):
            raise ApiError(
                422, f"no parent session {body.parent_session_id}", code="parent_not_found"
            )
    existing = await hub.store.get_session(session_id)
    if existing is not None and existing.workspace != principal.workspace:
        raise ApiError(409, f"session id {session_id} is taken", code="session_id_taken")
    header = new_session_header(
        session_id,
        principal.workspace,
        name=body.name,
        agent_id=body.agent_id,
        parent_session_id=body.parent_session_id,
        vault_ids=body.vault_ids,
    )
    stored, created = await hub.create(header, principal)
    session = await hub.open(stored.session_id)
    if session is None:
        raise ApiError(409, f"session {session_id} was deleted meanwhile", code="conflict")
    token = None
    if created:
        request.app[HTTP_METRICS].sessions_created.inc()
        if may_issue:  # a key without the tokens scope creates sessions, gets no token
            token = await issue_token(request, principal, session_id, body.token or TokenBody())
    out: dict[str, Any] = {
        "session": await describe(hub, session, stored),
        "token": token,
        "created": created,
    }
    headers = {"Location": f"/v1/sessions/{session_id}"}
    return json_response(out, status=201 if created else 200, headers=headers)


async def list_sessions(request: web.Request) -> web.Response:
    """``GET /v1/sessions?limit=&after=``."""
    hub = hub_of(request)
    principal = await principal_of(request)
    require_act(principal, "list_sessions")
    limit = int_query(request, "limit", 50, minimum=1, maximum=200)
    after = request.query.get("after") or None
    if after is not None and not names.is_session_id(after):
        raise ApiError(400, "after: " + names.not_a_session_id(after), code="invalid_query")
    headers = await hub.store.list_sessions(principal.workspace, after=after, limit=limit + 1)
    more = len(headers) > limit
    headers = headers[:limit]
    sessions: list[SessionOut] = []
    for header in headers:
        try:
            session = await hub.open(header.session_id)
        except StoreError:
            continue  # unreadable here (e.g. a newer format): left out of the page
        if session is not None and (not session.terminated or session.header.archived):
            sessions.append(await describe(hub, session, header))
    next_after = headers[-1].session_id if more and headers else None
    return json_response({"sessions": sessions, "next_after": next_after})


async def get_session(request: web.Request) -> web.Response:
    """``GET /v1/sessions/{session_id}``."""
    principal = await principal_of(request)
    header = await visible_header(request, principal)
    require_act(principal, "read_session")
    session = await loaded_session(request, header)
    return json_response(await describe(hub_of(request), session, header))


async def rename_session(request: web.Request) -> web.Response:
    """``PATCH /v1/sessions/{session_id}`` ``{"name": …}`` (§7.6, renamed_by master)."""
    hub = hub_of(request)
    principal = await principal_of(request)
    header = await visible_header(request, principal)
    body = await decode_body(request, RenameBody)
    require_act(principal, "rename")
    session = await writable_session(request, header)
    async with (
        fenced_write(hub.cluster, session.id),
        session.lock,
    ):  # [trust] fenced like the append
        if session.unloaded:
            raise ApiError(503, "the store failed: send again", code="store_unavailable")
        if session.terminated:
            raise ApiError(404, f"no session {session.id}", code="not_found")
        previous = session.header.name
        if body.name != previous:
            frame = Renamed(
                message_id=codec.new_message_id(),
                session_id=session.id,
                timestamp=codec.now(),
                payload=RenamedPayload(
                    session_id=session.id,
                    name=body.name,
                    renamed_by="master",
                    previous_name=previous,
                ),
            )
            try:
                stored = await session.append_master([frame])
            except ProtocolError as exc:
                raise ApiError(409, exc.message, code=exc.code) from None
            if not stored:
                raise ApiError(503, "the rename could not be stored", code="store_unavailable")
    return json_response(await describe(hub, session, header))


async def fork_session(request: web.Request) -> web.Response:
    """``POST /v1/sessions/{session_id}/fork`` ``{"at_seq": N}``."""
    hub = hub_of(request)
    principal = await principal_of(request)
    source = await visible_header(request, principal)
    body = await decode_body(request, ForkBody, optional=True)
    require_act(principal, "fork")
    await loaded_session(request, source)
    head = await hub.store.head_seq(source.session_id)
    if source.archived and head > 0:
        # An archived log ends with the master's session.deleted: a fork copies what came
        # before it, so the fork starts alive (notes §16.1).
        head = await _before_the_end(hub, source.session_id, head)
    at_seq = head if body.at_seq is None else body.at_seq
    if at_seq > head:
        raise ApiError(
            422, f"at_seq {at_seq} is past the session's head ({head})", code="invalid_seq"
        )
    first = await hub.store.trimmed_before(source.session_id)
    if at_seq > 0 and first > 1:
        raise ApiError(
            409,
            f"seqs before {first} were trimmed by retention: a fork would not copy the prefix",
            code="trimmed",
        )
    name = body.name if body.name is not None else f"{source.name or source.session_id} (fork)"
    return await _copy(request, principal, source, at_seq, body.session_id, name)


async def continue_session(request: web.Request) -> web.Response:
    """``POST /v1/sessions/{session_id}/continue`` ``{"session_id"?, "name"?}`` (notes §17.2).

    The new session holds the ended one's whole log but its final ``session.deleted`` (the
    end of the old session, not of the conversation), so the agent that attaches to it reads
    its history and goes on: turn indexes continue from the old session's.
    """
    hub = hub_of(request)
    principal = await principal_of(request)
    source = await visible_header(request, principal)
    body = await decode_body(request, ContinueBody, optional=True)
    require_act(principal, "continue_session")
    await loaded_session(request, source)
    if not source.archived:
        raise ApiError(
            409,
            f"session {source.session_id} has not ended: attach to it (continue is for ended "
            "sessions)",
            code="not_ended",
        )
    head = await _before_the_end(
        hub, source.session_id, await hub.store.head_seq(source.session_id)
    )
    first = await hub.store.trimmed_before(source.session_id)
    if head > 0 and first > 1:
        raise ApiError(
            409,
            f"seqs before {first} were trimmed by retention: the log cannot be carried on whole",
            code="trimmed",
        )
    name = body.name if body.name is not None else source.name
    return await _copy(request, principal, source, head, body.session_id, name)


async def _before_the_end(hub: Hub, session_id: str, head: int) -> int:
    """The seq before an ended log's end: its final session.deleted and the session.status
    (terminated) just before it are the old session's end, not the conversation's."""
    for entry in await hub.store.read(session_id, limit=2, newest_first=True):
        if entry.seq == head and entry.type in ("session.deleted", "session.status"):
            head -= 1
            if entry.type == "session.status":
                break
    return head


async def _copy(
    request: web.Request,
    principal: Principal,
    source: SessionHeader,
    at_seq: int,
    new_id: str | None,
    name: str,
) -> web.Response:
    """A new session with a copy of ``source``'s seqs 1..``at_seq`` (a fork or a continue);
    a named id that already holds that very copy answers it again (200, no token)."""
    hub = hub_of(request)
    fork_id = new_id or new_session_id()
    existing = await hub.store.get_session(fork_id)
    if existing is not None:
        same = (
            existing.workspace == principal.workspace
            and existing.parent_session_id == source.session_id
            and existing.seed_length == at_seq
        )
        if not same:
            raise ApiError(409, f"session id {fork_id} is taken", code="session_id_taken")
        fork = await hub.open(fork_id)
        if fork is None:
            raise ApiError(409, f"session {fork_id} was deleted meanwhile", code="conflict")
        again = {"session": await describe(hub, fork, existing), "token": None, "created": False}
        return json_response(again)
    header = new_session_header(
        fork_id,
        principal.workspace,
        name=name[:200],
        agent_id=source.agent_id,
        parent_session_id=source.session_id,
        seed_length=at_seq,
        vault_ids=source.vault_ids,  # the fork works with the same vaults
    )
    if not await hub.store.fork_session(source.session_id, header, at_seq):
        raise ApiError(409, f"session {fork_id} could not be created", code="conflict")
    fork = await hub.open(fork_id)
    if fork is None:
        raise ApiError(409, f"session {fork_id} was deleted meanwhile", code="conflict")
    # Nobody is attached to a fork: the source's participants its copied presence names are
    # logged expired, a prefix ending inside a turn is finalized (§7.8.2).
    await hub.settle_fork(fork)
    request.app[HTTP_METRICS].sessions_created.inc()
    token = None
    if principal.may_issue_tokens():
        token = await issue_token(request, principal, fork_id, TokenBody())
    made = {"session": await describe(hub, fork, header), "token": token, "created": True}
    return json_response(made, status=201, headers={"Location": f"/v1/sessions/{fork_id}"})
