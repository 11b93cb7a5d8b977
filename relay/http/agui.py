"""A session as an AG-UI agent endpoint (notes §16.5; docs/ag-ui.md).

* ``POST /v1/sessions/{id}/ag-ui`` takes AG-UI's ``RunAgentInput``. Its ``user`` messages the
  session does not have yet become ``user.message`` frames, committed as an edge would send
  them (:func:`relay.http.events.submit`; the AG-UI message id is the frame's ``message_id``,
  so a client that sends every message on every run adds each one once), its ``resume``
  entries become ``control.interaction.response`` frames. The answer is an AG-UI SSE stream
  of the session's events until the run the input started finishes (``RUN_FINISHED`` or
  ``RUN_ERROR``), then the stream closes. The user's own message is never echoed back as
  ``TEXT_MESSAGE_*``: it is in the run's ``RUN_STARTED.input.messages``.
* ``GET /v1/sessions/{id}/ag-ui`` tails the session: a run holding the ``MESSAGES_SNAPSHOT``
  folded from the log first (``@ag-ui/client`` wants ``RUN_STARTED`` first), then every turn
  as a run, live. ``Last-Event-ID`` (or ``?last_event_id=``) resumes after that event with no
  event missing or doubled; ``?until=run_end`` ends the stream with the run in progress (how a
  POST stream cut mid-run is resumed). An archived session (notes §16.1: ended by expiry or
  a fatal error, its log kept) replays — the snapshot run, or the rest after
  ``Last-Event-ID`` — and the stream ends; ``POST`` on it answers 409 ``archived``, as every
  HTTP write to an archived session does.

Same credentials and scopes as the other session routes (:mod:`relay.http.access`): a session
token may read and append user input here as on ``/events``. Both streams are registered in
:data:`relay.http.sse.STREAMS`, so a revoked or expired credential ends them (notes §16.9).
Every SSE ``id:`` is ``seq`` or ``seq.k`` (:func:`protocol.agui.parse_event_id`); data is
AG-UI's own encoder.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Final

from ag_ui.core import RunAgentInput, RunErrorEvent
from aiohttp import web
from pydantic import ValidationError

from protocol import codec, names
from protocol.agui import AguiEgress, EmittedEvent, encode_sse, input_user_messages, parse_event_id
from protocol.errors import ProtocolError
from protocol.frames import Frame, GenericFrame

from ..auth import Principal
from ..hub import Hub
from ..session import Session
from ..store.base import LogEntry
from .access import hub_of, principal_of, require_act, visible_header, writable_session
from .context import SESSION_PATH, authenticate
from .events import submit
from .hardening import peer_gone
from .middleware import HTTP_METRICS, ApiError
from .models import read_body, require_json
from .sse import STREAMS, EventStream, SessionTail, reloaded, wait_for_news

__all__ = [
    "MAX_INPUT_BYTES",
    "RUNS_PER_NODE",
    "RUNS_PER_SESSION",
    "RUN_START_TIMEOUT_S",
    "add_agui_routes",
    "agui_run",
    "agui_tail",
]

_PAGE: Final = 500
_USAGE_GRACE_S: Final = 5.0  # §7.5.2: usage follows turn.end at once; past this, end the run
MAX_INPUT_BYTES: Final = 4 << 20
"""The largest ``RunAgentInput`` taken (``@ag-ui/client`` sends the whole chat every run)."""
RUNS_PER_SESSION: Final = 16
"""``POST`` streams open at once for one session (each holds a connection); more: 429."""
RUNS_PER_NODE: Final = 1024
"""``POST`` streams open at once on this node, all sessions together; more: 429."""
RUN_START_TIMEOUT_S: Final = 60.0
"""How long a ``POST`` stream waits for an agent to start the run its input asked for."""

_OPEN_RUNS: Final = web.AppKey("agui_open_runs", dict[str, int])


def add_agui_routes(app: web.Application) -> None:
    """Register the two AG-UI routes."""
    app[_OPEN_RUNS] = {}
    app.router.add_post(f"/v1/sessions/{SESSION_PATH}/ag-ui", agui_run)
    app.router.add_get(f"/v1/sessions/{SESSION_PATH}/ag-ui", agui_tail)


class _Stream:
    """One AG-UI SSE response: the egress fold, the cursor, when to stop."""

    def __init__(
        self, session_id: str, response: web.StreamResponse, sse: EventStream, until_run_end: bool
    ) -> None:
        self.egress = AguiEgress(session_id)
        self.response = response
        self.sse = sse
        self.until_run_end = until_run_end
        self.last = 0  # the last seq folded
        self.skip = 0  # events of the next entry already delivered (a ``seq.k`` resume)
        self.done = False

    async def write(self, events: list[EmittedEvent]) -> None:
        for emitted in events:
            if self.sse.stop.is_set():
                # Revoked, expired or shutting down: a busy stream ends here, not at its next
                # idle ping (§16.9), as /events/stream does.
                self.done = True
            if self.done:
                return
            await self.response.write(encode_sse(emitted.event, emitted.event_id))
            self.sse.written.inc()
            if emitted.run_end and self.until_run_end:
                self.done = True
        if self.egress.ended:
            self.done = True

    async def entry(self, entry: LogEntry) -> None:
        """Fold one entry (``last + 1``) and write what it makes."""
        events = _fold(self.egress, entry)
        self.last = entry.seq
        if self.skip:
            events, self.skip = events[self.skip :], 0
        await self.write(events)


def _fold(egress: AguiEgress, entry: LogEntry) -> list[EmittedEvent]:
    """Feed one log entry to the egress (an entry that no longer decodes makes no event)."""
    try:
        frame = codec.decode(entry.data)
    except ProtocolError:
        return []
    return egress.feed(frame, entry.seq, entry.sender_role)


async def _fold_to(stream: _Stream, session_id: str, hub: Hub, until: int) -> None:
    """Fold entries ``(stream.last, until]`` silently (what a stream before this one saw)."""
    while stream.last < until:
        page = await hub.store.read(
            session_id, after_seq=stream.last, before_seq=until + 1, limit=_PAGE
        )
        if not page:
            stream.last = until
            return
        for entry in page:
            _fold(stream.egress, entry)
            stream.last = entry.seq


async def _catch_up(stream: _Stream, session_id: str, hub: Hub, before: int | None = None) -> None:
    """Write every stored entry after ``stream.last`` (and before ``before``)."""
    while not stream.done:
        page = await hub.store.read(
            session_id, after_seq=stream.last, before_seq=before, limit=_PAGE
        )
        for entry in page:
            if entry.seq != stream.last + 1:
                continue
            await stream.entry(entry)
            if stream.done:
                return
        if len(page) < _PAGE:
            return


def _start_response() -> web.StreamResponse:
    return web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache, no-transform",
            "X-Accel-Buffering": "no",
        }
    )


def _ping_interval(hub: Hub) -> float:
    return min(15.0, hub.settings.heartbeat_interval_s)


async def _follow(request: web.Request, stream: _Stream, session: Session) -> None:
    """Write live entries in seq order until the stream is done, ended or its client gone."""
    hub = hub_of(request)
    listener = SessionTail()
    session.listeners.add(listener)
    interval = _ping_interval(hub)
    try:
        await _catch_up(stream, session.id, hub)
        while not stream.done and not stream.sse.stop.is_set():
            listener.wake.clear()
            if listener.overflowed:
                listener.overflowed = False
                listener.entries.clear()
                await _catch_up(stream, session.id, hub)
            while listener.entries and not stream.done:
                entry = listener.entries.popleft()
                if entry.seq <= stream.last:
                    continue
                if entry.seq > stream.last + 1:
                    await _catch_up(stream, session.id, hub, before=entry.seq)
                if entry.seq == stream.last + 1:
                    await stream.entry(entry)
            if stream.done or listener.entries:
                continue
            timeout = _USAGE_GRACE_S if stream.egress.holding else interval
            woke = await wait_for_news(listener.wake, stream.sse.stop, session, timeout)
            if listener.wake.is_set() or stream.sse.stop.is_set():
                continue
            if not woke:
                if stream.egress.holding:
                    await stream.write(stream.egress.flush(stream.last))
                    continue
                await stream.response.write(b": ping\n\n")
                if stream.sse.principal.expired:
                    break
            current = await reloaded(hub, session)
            if current is not session:
                # Reloaded (or ended) on this node: follow the new object, from the store.
                session.listeners.discard(listener)
                if current is None or current.terminated:
                    # Purged, or archived (read-only, never changes): the rest, then the end.
                    await _catch_up(stream, session.id, hub)
                    break
                session = current
                session.listeners.add(listener)
                await _catch_up(stream, session.id, hub)
    finally:
        session.listeners.discard(listener)


async def _terminated(request: web.Request, session_id: str) -> Session | None:
    """The live session, or None when it has ended: archived (notes §16.1; the hub hands out
    a read-only, ``terminated`` object), or terminated by another request just now. Its log
    stays readable: replay."""
    session = await hub_of(request).open(session_id)
    if session is None or session.terminated:
        return None
    return session


async def agui_tail(request: web.Request) -> web.StreamResponse:
    """``GET /v1/sessions/{session_id}/ag-ui``."""
    hub = hub_of(request)
    if "Authorization" not in request.headers and "access_token" in request.query:
        principal = await hub.auth.authenticate(request.query["access_token"])
    else:
        principal = await authenticate(request)
    header = await visible_header(request, principal)
    require_act(principal, "read_session")
    session_id = header.session_id
    resume_text = request.headers.get("Last-Event-ID") or request.query.get("last_event_id")
    cursor: tuple[int, int | None] | None = None
    if resume_text:
        try:
            cursor = parse_event_id(resume_text)
        except ValueError as exc:
            raise ApiError(400, str(exc), code="invalid_query") from None
    until = request.query.get("until", "")
    if until not in ("", "run_end"):
        raise ApiError(400, "until must be run_end", code="invalid_query")
    session = await _terminated(request, session_id)
    if cursor is not None and cursor[0] > await hub.store.head_seq(session_id):
        # Not an event of this log (another session of that id, or a made-up id): what it
        # has is unknown, so the stream starts as a late joiner's does, with the snapshot
        # that replaces the reader's messages — as a WebSocket resume past the head gets a
        # truncated history (docs/ag-ui.md).
        cursor = None
    response = _start_response()
    sse = EventStream(response, principal, request.app[HTTP_METRICS].sse_events, request.transport)
    stream = _Stream(session_id, response, sse, until_run_end=until == "run_end")

    async def body() -> None:
        if cursor is not None:
            seq, seen = cursor
            await _fold_to(stream, session_id, hub, seq - 1 if seen is not None else seq)
            stream.skip = seen or 0
        else:
            head = session.head if session is not None else await hub.store.head_seq(session_id)
            await _fold_to(stream, session_id, hub, head)
            await stream.write(stream.egress.connect(f"snapshot-{head}", head))
            if not stream.egress.in_run and stream.until_run_end:
                stream.done = True
        if session is None:
            await _catch_up(stream, session_id, hub)  # an ended session: replay, then end
            return
        await _follow(request, stream, session)

    return await _serve(request, stream, body)


async def agui_run(request: web.Request) -> web.StreamResponse:
    """``POST /v1/sessions/{session_id}/ag-ui``."""
    principal = await principal_of(request)
    header = await visible_header(request, principal)
    require_json(request)
    data = await read_body(request, MAX_INPUT_BYTES)
    try:
        run = RunAgentInput.model_validate_json(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise ApiError(
            400, f"not a RunAgentInput: {where}: {first.get('msg', '')}", code="invalid_body"
        ) from None
    session = await writable_session(request, header)
    session_id = session.id
    open_runs = request.app[_OPEN_RUNS]
    if open_runs.get(session_id, 0) >= RUNS_PER_SESSION or sum(open_runs.values()) >= RUNS_PER_NODE:
        raise ApiError(
            429,
            "too many AG-UI runs are open (this session, or this node): end one, or tail the "
            "session with GET",
            code="too_many_runs",
        )
    open_runs[session_id] = open_runs.get(session_id, 0) + 1  # no await since the check
    try:
        return await _run(request, principal, session, run)
    finally:
        open_runs[session_id] -= 1
        if not open_runs[session_id]:
            del open_runs[session_id]


async def _run(
    request: web.Request, principal: Principal, session: Session, run: RunAgentInput
) -> web.StreamResponse:
    """The run's frames committed, then its event stream."""
    hub = hub_of(request)
    session_id = session.id
    response = _start_response()
    sse = EventStream(response, principal, request.app[HTTP_METRICS].sse_events, request.transport)
    stream = _Stream(session_id, response, sse, until_run_end=True)
    cursor = session.head
    turns_before = session.state.last_turn_index
    await _fold_to(stream, session_id, hub, cursor)
    # Every act the run asks for is checked, and every frame built and checked, before the
    # first is appended: an input with one bad message appends none of them (a store failure
    # half-way is mended by posting the same input again: the messages appended already are
    # recognised by their ids).
    require_act(principal, "read_session")
    if any(True for _ in input_user_messages(run, stream.egress.known_message_ids)):
        require_act(principal, "append_user_input")
    if run.resume:
        require_act(principal, "answer_interaction")
    frames = await _input_frames(session, run, stream.egress.known_message_ids)
    for frame, raw in frames:
        await submit(session, principal, frame, raw)
    preamble = not frames or (stream.egress.in_run and not run.resume)

    async def body() -> None:
        if preamble:
            await stream.write(stream.egress.connect(f"snapshot-{cursor}", cursor))
            if not stream.egress.in_run:
                return
        elif not await _run_started(stream, session, turns_before, _ping_interval(hub)):
            # Nobody answers (the agent is away): the input stays in the session; a run that
            # held its connection open for ever would let idle runs pile up.
            await stream.write([_agent_absent()])
            return
        await _follow(request, stream, session)

    return await _serve(request, stream, body)


async def _input_frames(
    session: Session, run: RunAgentInput, known: set[str]
) -> list[tuple[Frame | GenericFrame, bytes]]:
    """The frames the input makes, each checked; nothing is appended here (400 / 409)."""
    frames: list[tuple[Frame | GenericFrame, bytes]] = []
    seen: set[str] = set()
    for message_id, text in input_user_messages(run, known):
        if not 0 < len(message_id) <= 256:
            raise ApiError(
                400, "a message id must be 1 to 256 characters long", code="invalid_body"
            )
        if message_id in seen:
            continue
        seen.add(message_id)
        seq = await session.store.message_seq(session.id, message_id)
        if seq is not None:
            held = await session.store.read(session.id, after_seq=seq - 1, limit=1)
            if held and held[0].type != "user.message":
                # Another frame holds that id: refused (docs/protocol.md §3), not taken for
                # a message the session already has.
                raise ApiError(
                    409,
                    f"message id {names.one_line(message_id[:80])!r} already names another "
                    f"frame of this session (seq {seq})",
                    code="message_id_conflict",
                )
            continue  # the session has this message (AG-UI clients send every message)
        frames.append(_frame(session.id, "user.message", {"text": text}, message_id))
    answered: set[str] = set()
    for entry in run.resume or []:
        iid = entry.interrupt_id
        if iid not in session.state.pending_interactions or iid in answered:
            raise ApiError(
                409,
                f"interaction {names.one_line(iid[:80])!r} is not pending (unknown or answered)",
                code="interaction_state",
            )
        answered.add(iid)
        response_value: Any = entry.payload if entry.status == "resolved" else {"cancelled": True}
        payload = {"interaction_id": iid, "response": response_value}
        frames.append(_frame(session.id, "control.interaction.response", payload, None))
    return frames


async def _run_started(stream: _Stream, session: Session, turns_before: int, ping: float) -> bool:
    """Wait (at most :data:`RUN_START_TIMEOUT_S`) until a turn is open or one started since
    the input was taken, writing only pings meanwhile; False when no agent started it in time."""
    listener = SessionTail()
    session.listeners.add(listener)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RUN_START_TIMEOUT_S
    try:
        while not stream.sse.stop.is_set() and not session.ended.is_set():
            listener.wake.clear()
            listener.entries.clear()
            state = session.state
            if state.turn_id is not None or state.last_turn_index > turns_before:
                return True
            left = deadline - loop.time()
            if left <= 0:
                return False
            if not await wait_for_news(listener.wake, stream.sse.stop, session, min(left, ping)):
                await stream.response.write(b": ping\n\n")
        return True  # stopped or ended: the follow loop writes what there is and ends
    finally:
        session.listeners.discard(listener)


def _agent_absent() -> EmittedEvent:
    message = (
        f"no agent started a run within {RUN_START_TIMEOUT_S:g} s; the input is in the "
        "session: tail it with GET to see the run when its agent comes"
    )
    return EmittedEvent(RunErrorEvent(message=message, code="agent_absent"), None, run_end=True)


async def _serve(
    request: web.Request, stream: _Stream, body: Callable[[], Awaitable[None]]
) -> web.StreamResponse:
    """Prepare the response, run ``body``; the stream is registered for shutdown/revocation."""
    response = stream.response
    await response.prepare(request)
    metrics = request.app[HTTP_METRICS]
    streams = request.app[STREAMS]
    streams.add(stream.sse)
    metrics.streams.inc()
    try:
        await body()
    except ConnectionError as exc:  # the reader reset or dropped its connection: its doing
        peer_gone(request, exc)
    except asyncio.CancelledError:
        pass
    finally:
        streams.discard(stream.sse)
        metrics.streams.dec()
    with contextlib.suppress(ConnectionError):
        await response.write_eof()
    return response


def _frame(
    session_id: str, frame_type: str, payload: dict[str, Any], message_id: str | None
) -> tuple[Frame | GenericFrame, bytes]:
    """One edge frame, built and decoded as the WebSocket would (400 when it does not)."""
    envelope = {
        "type": frame_type,
        "message_id": message_id or codec.new_message_id(),
        "session_id": session_id,
        "timestamp": codec.format_time(codec.now()),
        "payload": payload,
    }
    raw = codec.encode_json(envelope)
    try:
        frame = codec.decode(raw)
    except ProtocolError as exc:
        raise ApiError(400, exc.message, code=exc.code) from None
    return frame, raw
