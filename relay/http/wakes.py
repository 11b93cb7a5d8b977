"""``GET /v1/wakes`` (notes §17.5): the workspace's wakes, for a scheduler to start agents by.

``due=true`` lists the wakes that came due while their client was not attached and that
client has not attached since (what a scheduler should start an agent for); without it the
pending ones are listed too. Paged by (session id, wake id) with an opaque cursor; the same
credentials as ``GET /v1/sessions`` (API keys with scope ``read``, their workspace only).
"""

from __future__ import annotations

import base64
import binascii
from typing import Literal

import msgspec
from aiohttp import web

from ..store.base import WakeRecord
from .access import hub_of, int_query, principal_of, require_act
from .middleware import ApiError
from .models import json_response, ms_to_time

__all__ = ["WakeOut", "WakePage", "WebhookOut", "list_wakes"]

_MAX_LIMIT = 500


class WebhookOut(msgspec.Struct, kw_only=True):
    """Where the wake's webhook stands (``--wake-webhook``): ``pending`` (with when it is
    tried next), ``sent`` or ``failed``, the attempts made and the last failure's reason."""

    state: Literal["pending", "sent", "failed"]
    attempts: int
    next_attempt_at: str | None
    last_error: str | None


class WakeOut(msgspec.Struct, kw_only=True):
    """One wake: ``state`` ``pending`` (not due yet) or ``due`` (logged while the client was
    away, not attached since); ``webhook`` null when no webhook is owed for it."""

    session_id: str
    revisit_id: str
    at: str
    reason: str | None
    state: Literal["pending", "due"]
    webhook: WebhookOut | None


class WakePage(msgspec.Struct, kw_only=True):
    """One page of wakes; ``next_cursor`` is the next page's ``cursor`` (null: the last)."""

    wakes: list[WakeOut]
    next_cursor: str | None


def _out(record: WakeRecord) -> WakeOut:
    webhook = None
    if record.webhook is not None:
        webhook = WebhookOut(
            state=record.webhook,
            attempts=record.attempts,
            next_attempt_at=ms_to_time(record.due_ms) if record.webhook == "pending" else None,
            last_error=record.last_error,
        )
    return WakeOut(
        session_id=record.session_id,
        revisit_id=record.revisit_id,
        at=record.at,
        reason=record.reason,
        state="pending" if record.state == "pending" else "due",
        webhook=webhook,
    )


def _cursor(record: WakeRecord) -> str:
    raw = msgspec.json.encode([record.session_id, record.wake_id])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _after(text: str) -> tuple[str, str]:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        session_id, wake_id = msgspec.json.decode(raw, type=tuple[str, str])
    except (binascii.Error, ValueError, msgspec.DecodeError):
        raise ApiError(400, "cursor: not a cursor this API gave", code="invalid_query") from None
    return session_id, wake_id


async def list_wakes(request: web.Request) -> web.Response:
    """``GET /v1/wakes?due=true&limit=&cursor=``."""
    hub = hub_of(request)
    principal = await principal_of(request)
    require_act(principal, "list_sessions")  # the workspace's listing: the same credentials
    limit = int_query(request, "limit", 100, minimum=1, maximum=_MAX_LIMIT)
    due = request.query.get("due", "false")
    if due not in ("true", "false"):
        raise ApiError(400, "due: true or false", code="invalid_query")
    cursor = request.query.get("cursor") or None
    after = None if cursor is None else _after(cursor)
    records = await hub.store.list_wakes(
        principal.workspace, due_only=due == "true", after=after, limit=limit + 1
    )
    more = len(records) > limit
    records = records[:limit]
    next_cursor = _cursor(records[-1]) if more and records else None
    return json_response(WakePage(wakes=[_out(r) for r in records], next_cursor=next_cursor))
