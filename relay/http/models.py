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

from protocol import codec, frames

from .context import HUB
from .middleware import ApiError

__all__ = [
    "AppendBody",
    "CancelBody",
    "ContinueBody",
    "CreateBody",
    "ForkBody",
    "ParticipantOut",
    "RenameBody",
    "RunErrorOut",
    "SessionOut",
    "TokenBody",
    "TokenOut",
    "UsageOut",
    "WhoAmI",
    "decode_body",
    "json_response",
    "ms_to_time",
]

SessionId = frames.SessionId  # the grammar of every store and transport (notes §16.7)
Name = Annotated[str, msgspec.Meta(max_length=200)]
Ttl = Annotated[float, msgspec.Meta(gt=0)]

_T = TypeVar("_T")


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


_decoders: Final[dict[type[Any], msgspec.json.Decoder[Any]]] = {}


async def decode_body(request: web.Request, kind: type[_T], *, optional: bool = False) -> _T:
    """Decode the JSON body as ``kind``; raises an HTTP 400 problem when it does not fit.

    With ``optional``, an empty body decodes as ``kind()``.
    """
    try:
        # A body that trickles in is cut like unfinished headers (relay/http/hardening.py).
        async with asyncio.timeout(_body_timeout(request)):
            data = await request.read()
    except TimeoutError:
        raise ApiError(408, "the request body did not arrive in time", code="timeout") from None
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
