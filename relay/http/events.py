"""A session's log over HTTP: read it in pages, append to it as an edge would (notes §10).

* ``GET /v1/sessions/{id}/events?after_seq=&before_seq=&limit=&order=desc|asc`` — the
  stamped envelopes exactly as they were logged and delivered (with ``seq`` and ``sender``),
  newest first by default; ``next`` holds the cursor of the following page (or null).
* ``POST /v1/sessions/{id}/events`` — append ``user.message``, ``control.cancel`` or
  ``control.interaction.response``. The frame goes through the session's own commit path
  (:meth:`relay.session.Session.submit_now`) as an edge participant with no socket: the
  state machine validates it, the log dedupes it by ``message_id``, and it is relayed to
  every attached participant. 201 with its seq; a repeated ``message_id`` answers 200 with
  the seq it already has (``duplicate: true``) when it is the same frame (an edge's, same
  type and payload), 409 ``message_id_conflict`` when another frame holds it; a refusal
  answers problem+json with the ``session.error`` code it would have had on the WebSocket.
* ``POST /v1/sessions/{id}/cancel`` — a ``control.cancel`` for the open turn (409
  ``not_running`` when no turn is open and none is named).
"""

from __future__ import annotations

import time
from typing import Any, Final

from aiohttp import web

from protocol import acts, codec
from protocol.errors import (
    Busy,
    CloseCode,
    InvalidFrame,
    NotAllowed,
    ProtocolError,
    StateViolation,
    StoreUnavailable,
)
from protocol.frames import Frame, GenericFrame

from ..auth import Principal
from ..session import RUN_WAIT_S, Participant, Session, same_frame
from ..store.base import ParticipantRecord
from .access import (
    hub_of,
    int_query,
    principal_of,
    require_act,
    visible_header,
    writable_session,
)
from .fencing import fenced_write
from .middleware import ApiError
from .models import AppendBody, CancelBody, decode_body, json_response

__all__ = [
    "APPENDABLE",
    "HttpParticipant",
    "append_event",
    "cancel_turn",
    "list_events",
    "submit",
]

APPENDABLE: Final = frozenset({"user.message", "control.cancel", "control.interaction.response"})
_MAX_PAGE: Final = 1000


class _NoSocket:
    """The sink of a participant that has no connection: nothing is ever written to it."""

    open = False
    writable = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        return None

    async def drain(self) -> None:
        return None

    async def close(self, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        return None


class HttpParticipant(Participant):
    """An edge with no socket, acting for one HTTP request; collects refusals.

    Its participant id is stable per credential (``http-`` + the start of the credential's
    public id), so the log shows which credential appended a frame.
    """

    def __init__(self, session: Session, principal: Principal) -> None:
        record = ParticipantRecord(
            participant_id="http-" + (principal.credential_id[:16] or "anonymous"),
            role="edge",
        )
        super().__init__(session, record, _NoSocket(), principal, send_queue_bytes=1 << 20)
        self.errors: list[ProtocolError] = []

    can_hold = False  # a user.message waiting for the agent waits in the request instead

    def send_error(
        self,
        error: ProtocolError,
        *,
        lost_frame_count: int | None = None,
        ref_message_id: str | None = None,
    ) -> None:
        """Keep the refusal for the HTTP answer instead of sending a ``session.error``."""
        self.session.metrics.errors.labels(error.code).inc()
        self.errors.append(error)


async def submit(
    session: Session, principal: Principal, frame: Frame | GenericFrame, raw: bytes
) -> web.Response:
    """Commit ``frame`` as an edge; the API answer for it (201, 200 duplicate, or a problem)."""
    store = session.store
    seq = await store.message_seq(session.id, frame.message_id)
    duplicate = seq is not None
    if seq is not None:
        held = await store.read(session.id, after_seq=seq - 1, limit=1)
        if held and not same_frame(held[0], "edge", frame, raw):
            # Another frame holds that id: refused, never answered as this one's duplicate.
            raise ApiError(
                409,
                f"message_id {frame.message_id} already names another frame of this session "
                f"(seq {seq}); send this one with a fresh id",
                code="message_id_conflict",
            )
    if seq is None:
        participant = HttpParticipant(session, principal)
        session.metrics.frames_in.inc()
        started = time.perf_counter()
        # One run at a time (notes §17.3): a user.message that finds the agent busy waits
        # here, up to RUN_WAIT_S, and is judged again; then it is relayed or refused busy.
        wait_ends = time.monotonic() + RUN_WAIT_S
        while True:
            async with fenced_write(
                session.coordinator, session.id
            ):  # [trust] a paused node's late write is refused
                await session.submit_now(participant, frame, raw)
            busy = [e for e in participant.errors if isinstance(e, Busy)]
            if not busy or time.monotonic() >= wait_ends or session.terminated:
                break
            participant.errors.clear()
            await session.runs.wait_free(wait_ends)
        if not participant.errors:
            # Arrival to fan-out, as for WebSocket frames (notes §10 relay latency).
            session.metrics.relay_latency.observe(time.perf_counter() - started)
        if participant.errors:
            raise _refusal(session, participant.errors[0])
        seq = await store.message_seq(session.id, frame.message_id)
        if seq is None:
            if session.terminated and not session.unloaded:
                raise ApiError(404, f"no session {session.id}", code="not_found")
            raise ApiError(503, "the frame was not stored", code="store_unavailable")
    entries = await store.read(session.id, after_seq=seq - 1, limit=1)
    event = codec.decode_object(entries[0].data) if entries else None
    body = {"seq": seq, "message_id": frame.message_id, "duplicate": duplicate, "event": event}
    return json_response(body, status=200 if duplicate else 201)


def _refusal(session: Session, error: ProtocolError) -> ApiError:
    if session.unloaded:  # a store failure unloaded it meanwhile: loaded again, it takes it
        return ApiError(503, "the store failed: send again", code="store_unavailable")
    if isinstance(error, StoreUnavailable):
        return ApiError(503, error.message, code=error.code)
    if session.terminated or isinstance(error, NotAllowed | Busy):
        return ApiError(409, error.message, code=error.code)
    if isinstance(error, StateViolation):
        # The session's state refuses it now (e.g. no such pending interaction).
        return ApiError(409, error.message, code=error.code)
    status = 400 if isinstance(error, InvalidFrame) else 422
    return ApiError(status, error.message, code=error.code)


def _frame_from(session_id: str, body: AppendBody) -> tuple[Frame | GenericFrame, bytes]:
    envelope: dict[str, Any] = {
        "type": body.type,
        "message_id": body.message_id or codec.new_message_id(),
        "session_id": session_id,
        "timestamp": codec.format_time(codec.now()),
        "payload": body.payload,
    }
    if body.metadata is not None:
        envelope["metadata"] = body.metadata
    raw = codec.encode_json(envelope)
    try:
        frame = codec.decode(raw)
    except ProtocolError as exc:
        raise ApiError(400, exc.message, code=exc.code) from None
    return frame, raw


async def append_event(request: web.Request) -> web.Response:
    """``POST /v1/sessions/{session_id}/events``."""
    principal = await principal_of(request)
    header = await visible_header(request, principal)
    body = await decode_body(request, AppendBody)
    if body.type not in APPENDABLE:
        raise ApiError(
            422,
            f"{body.type} cannot be appended over HTTP; this route takes "
            f"{', '.join(sorted(APPENDABLE))} (rename with PATCH, delete with DELETE)",
            code="unsupported_type",
        )
    act = acts.act_of(body.type)
    if act is not None:
        require_act(principal, act)
    session = await writable_session(request, header)
    frame, raw = _frame_from(session.id, body)
    return await submit(session, principal, frame, raw)


async def cancel_turn(request: web.Request) -> web.Response:
    """``POST /v1/sessions/{session_id}/cancel``."""
    principal = await principal_of(request)
    header = await visible_header(request, principal)
    body = await decode_body(request, CancelBody, optional=True)
    require_act(principal, "cancel_turn")
    session = await writable_session(request, header)
    turn_id = body.turn_id or session.state.turn_id
    if turn_id is None:
        raise ApiError(409, "no turn is running in this session", code="not_running")
    append = AppendBody(
        type="control.cancel", payload={"turn_id": turn_id}, message_id=body.message_id
    )
    frame, raw = _frame_from(session.id, append)
    return await submit(session, principal, frame, raw)


async def list_events(request: web.Request) -> web.Response:
    """``GET /v1/sessions/{session_id}/events``."""
    hub = hub_of(request)
    principal = await principal_of(request)
    header = await visible_header(request, principal)
    require_act(principal, "read_session")
    order = request.query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise ApiError(400, f"order must be asc or desc, got {order!r}", code="invalid_query")
    limit = int_query(request, "limit", 100, minimum=1, maximum=_MAX_PAGE)
    after_seq = int_query(request, "after_seq", 0)
    before_seq = int_query(request, "before_seq", None)
    entries = await hub.store.read(
        header.session_id,
        after_seq=after_seq,
        before_seq=before_seq,
        limit=limit + 1,
        newest_first=order == "desc",
    )
    more = len(entries) > limit
    entries = entries[:limit]
    head = await hub.store.head_seq(header.session_id)
    next_page: dict[str, int] | None = None
    if more and entries:
        key = "before_seq" if order == "desc" else "after_seq"
        next_page = {key: entries[-1].seq}
    # The envelopes are spliced in as logged: nothing is decoded or re-encoded.
    prefix = codec.encode_json(
        {"session_id": header.session_id, "order": order, "head_seq": head, "next": next_page}
    )
    body = b'%s,"events":[%s]}' % (prefix[:-1], b",".join(e.data for e in entries))
    return web.Response(body=body, content_type="application/json")
