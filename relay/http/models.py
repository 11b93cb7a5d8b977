"""Request and response bodies of the HTTP API (notes §10), as msgspec Structs.

Requests are decoded strictly (wrong types → 400 ``invalid_body`` naming the field; unknown
keys are ignored, as in envelopes). Responses are encoded with :func:`protocol.codec.encode_json`.
Times are RFC 3339 UTC strings, like the ones frames carry.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Annotated, Any, Final, Literal, TypeVar

import msgspec
from aiohttp import web

from protocol import codec, frames, names

from .context import HUB
from .middleware import ApiError

__all__ = [
    "JSON_BODY_LIMIT",
    "AppendBody",
    "CancelBody",
    "ContinueBody",
    "CreateBody",
    "ForkBody",
    "KeyBody",
    "KeyOut",
    "ParticipantOut",
    "RenameBody",
    "RunErrorOut",
    "SessionOut",
    "StreamGap",
    "StreamReset",
    "TokenBody",
    "TokenOut",
    "UsageOut",
    "WhoAmI",
    "decode_body",
    "json_response",
    "ms_to_time",
    "read_body",
    "require_json",
]

JSON_BODY_LIMIT: Final = 1 << 20
"""The largest JSON body of the REST routes (aiohttp's own default, kept explicit)."""

SessionId = frames.SessionId  # the grammar of every store and transport (notes §16.7)
Name = Annotated[str, msgspec.Meta(max_length=200)]
Ttl = Annotated[float, msgspec.Meta(gt=0)]
VaultIds = Annotated[list[SessionId], msgspec.Meta(max_length=10)]
"""≤ 10 opaque ids, each of the id grammar (notes §17.6)."""

_T = TypeVar("_T")


class StreamGap(msgspec.Struct, kw_only=True):
    """SSE ``event: stream.gap`` (no id): retention trimmed these seqs under the cursor."""

    from_seq: int
    to_seq: int
    reason: Literal["trimmed"] = "trimmed"


class StreamReset(msgspec.Struct, kw_only=True):
    """SSE ``event: stream.reset`` (no id): the cursor is past this log's head, so it is not
    from this log; the stream goes on from ``head_seq``."""

    reason: Literal["cursor_ahead"]
    last_event_id: int
    head_seq: int


class TokenBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=False):
    """``POST /v1/sessions/{id}/tokens`` (and ``token`` inside a create)."""

    grants: list[str] = msgspec.field(default_factory=list)
    ttl_s: Ttl | None = None


class CreateBody(msgspec.Struct, kw_only=True):
    """``POST /v1/sessions``."""

    session_id: SessionId | None = None
    name: Name = ""
    agent_id: str | None = None
    parent_session_id: SessionId | None = None
    token: TokenBody | None = None
    vault_ids: VaultIds = msgspec.field(default_factory=list)


class RenameBody(msgspec.Struct, kw_only=True):
    """``PATCH /v1/sessions/{id}``."""

    name: Name


class ForkBody(msgspec.Struct, kw_only=True):
    """``POST /v1/sessions/{id}/fork``; ``at_seq`` defaults to the head."""

    at_seq: Annotated[int, msgspec.Meta(ge=0)] | None = None
    session_id: SessionId | None = None
    name: Name | None = None


class ContinueBody(msgspec.Struct, kw_only=True):
    """``POST /v1/sessions/{id}/continue``; a named ``session_id`` makes asking twice return
    the same session."""

    session_id: SessionId | None = None
    name: Name | None = None


class CancelBody(msgspec.Struct, kw_only=True):
    """``POST /v1/sessions/{id}/cancel``; ``turn_id`` defaults to the open turn."""

    turn_id: str | None = None
    message_id: str | None = None


class AppendBody(msgspec.Struct, kw_only=True):
    """``POST /v1/sessions/{id}/events``: the frame an edge would send (envelope fields
    ``session_id``, ``timestamp``, ``seq`` and ``sender`` are filled in by the master)."""

    type: str
    payload: dict[str, Any]
    message_id: Annotated[str, msgspec.Meta(min_length=1, max_length=256)] | None = None
    metadata: dict[str, Any] | None = None


class ParticipantOut(msgspec.Struct, kw_only=True):
    """One participant of a session, with its presence."""

    participant_id: str
    role: str
    state: Literal["attached", "detached"]
    generation: int
    cursor: int
    detached_at: str | None = None
    presence: bool = True
    """False when it declined ``session.presence`` frames (docs/protocol.md §5 item 12)."""


class UsageOut(msgspec.Struct, kw_only=True):
    """Usage and cost totals folded from the session's ``session.usage`` frames."""

    input_tokens: int
    output_tokens: int
    cost_used: float
    cost_unit: str
    turns_completed: int
    compactions: int


class RunErrorOut(msgspec.Struct, kw_only=True):
    """Why the last run failed: its ``session.turn.end`` error (notes §17.4)."""

    code: str
    message: str


class SessionOut(msgspec.Struct, kw_only=True):
    """A session as the API shows it (header + status + presence + totals)."""

    session_id: str
    name: str
    workspace: str
    agent_id: str | None
    parent_session_id: str | None
    seed_length: int
    created_at: str
    epoch: str
    head_seq: int
    status: str
    connection: Literal["attached", "detached", "none"]
    agent_state: str
    pending_interactions: list[str]
    participants: list[ParticipantOut]
    usage: UsageOut
    # archived sessions (notes §16.1): when and why the session ended
    ended_at: str | None = None
    reason: str | None = None
    deleted_by: str | None = None
    vault_ids: list[str] = msgspec.field(default_factory=list)
    # how the last run ended, and why when it failed (notes §17.4)
    stop_reason: str | None = None
    last_error: RunErrorOut | None = None


class TokenOut(msgspec.Struct, kw_only=True):
    """A session token as issued: ``token`` is the secret, present in this answer only."""

    token_id: str
    session_id: str
    grants: list[str]
    expires_at: str | None
    token: str | None = None


class WhoAmI(msgspec.Struct, kw_only=True):
    """``GET /v1/whoami``: what the presented credential is and may do."""

    kind: Literal["key", "token"]
    workspace: str
    session_id: str | None
    grants: list[str]
    expires_at: str | None
    token_id: str
    scopes: list[str] = msgspec.field(default_factory=list)
    """What it may do (notes §17.6): a view hides the controls of acts it lacks."""


class KeyBody(msgspec.Struct, kw_only=True):
    """``POST /v1/keys``: the new key's scopes, optional expiry (RFC 3339 with a zone) and
    label; ``workspace`` defaults to (and may only be) the admin key's own."""

    scopes: Annotated[list[Annotated[str, msgspec.Meta(max_length=32)]], msgspec.Meta(max_length=8)]
    expires_at: Annotated[dt.datetime, msgspec.Meta(tz=True)] | None = None
    name: Annotated[str, msgspec.Meta(max_length=100)] = ""
    workspace: str | None = None


class KeyOut(msgspec.Struct, kw_only=True):
    """An API key as listed (never its secret), or as created (``key``: the secret, present
    in the create's answer only)."""

    key_id: str
    workspace: str
    scopes: list[str]
    name: str
    created_at: str | None
    expires_at: str | None
    last_used_at: str | None
    given: bool = False
    """Given by ``--api-key``: not stored, not revocable over the API."""
    development: bool = False
    key: str | None = None


_decoders: Final[dict[type[Any], msgspec.json.Decoder[Any]]] = {}


def require_json(request: web.Request) -> None:
    """415 ``unsupported_media_type`` unless the body is declared JSON (``application/json``
    or a ``+json`` type): a form or ``text/plain`` post is never taken for one."""
    kind = request.content_type  # lower-cased, without parameters
    if kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json")):
        return
    shown = names.one_line(request.headers.get("Content-Type", "")[:80]) or "none"
    raise ApiError(
        415,
        f"the body must be application/json (Content-Type: {shown})",
        code="unsupported_media_type",
    )


async def read_body(request: web.Request, limit: int = JSON_BODY_LIMIT) -> bytes:
    """The whole request body, at most ``limit`` bytes: 413 ``too_large`` past it, 408
    ``timeout`` when it does not arrive within the body deadline.

    Read to its end, whatever the chunks it arrives in (a read of the stream answers what
    has arrived so far, not the body), and refused by its declared length before any of it
    is read.
    """
    declared = request.content_length
    if declared is not None and declared > limit:
        raise ApiError(413, f"the body is larger than {limit} bytes", code="too_large")
    chunks: list[bytes] = []
    size = 0
    try:
        # A body that trickles in is cut like unfinished headers (relay/http/hardening.py).
        async with asyncio.timeout(_body_timeout(request)):
            while chunk := await request.content.read(64 << 10):
                size += len(chunk)
                if size > limit:
                    raise ApiError(413, f"the body is larger than {limit} bytes", code="too_large")
                chunks.append(chunk)
    except TimeoutError:
        raise ApiError(408, "the request body did not arrive in time", code="timeout") from None
    return b"".join(chunks)


async def decode_body(request: web.Request, kind: type[_T], *, optional: bool = False) -> _T:
    """Decode the JSON body as ``kind``; raises an HTTP 400 problem when it does not fit.

    With ``optional``, an empty body decodes as ``kind()``.
    """
    data = await read_body(request)
    if optional and not data.strip():
        return kind()
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind)
    try:
        value: _T = decoder.decode(data)
    except msgspec.ValidationError as exc:
        detail = str(exc).replace("`$.", "`").replace("`$`", "the body")
        raise ApiError(400, detail, code="invalid_body") from None
    except msgspec.DecodeError as exc:
        raise ApiError(400, f"the body is not JSON: {exc}", code="invalid_body") from None
    except RecursionError:
        raise ApiError(400, "the body's JSON is nested too deeply", code="invalid_body") from None
    return value


def _body_timeout(request: web.Request) -> float:
    return request.app[HUB].settings.hello_timeout_s


def json_response(
    value: Any, *, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    """A JSON response encoded with msgspec."""
    return web.Response(
        status=status,
        body=codec.encode_json(value),
        content_type="application/json",
        headers=headers,
    )


def ms_to_time(ms: int | None) -> str | None:
    """Epoch milliseconds as an RFC 3339 UTC string (None stays None)."""
    if ms is None:
        return None
    return codec.format_time(dt.datetime.fromtimestamp(ms / 1000, dt.UTC))
