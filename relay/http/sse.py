"""``GET /v1/sessions/{id}/events/stream``: a session's log as Server-Sent Events.

Each log entry is one event: ``id:`` its seq, ``event:`` its frame type, ``data:`` the
stamped envelope (one line of JSON). The stream starts after the seq in ``Last-Event-ID``
(what a reconnecting ``EventSource`` sends) or ``?after_seq=``; with neither it tails the
log from its current head. Heartbeats are SSE comments (``: ping``). The stream ends after
the session's ``session.deleted`` event, when the credential expires or is revoked, and at
shutdown.

No gap, no duplicate: the stream registers a listener on the session (every committed
entry, in seq order) *before* it reads the backlog from the store, then writes each seq
once, in order — an entry is written only when it is exactly ``last + 1``; anything the
listener skipped (a gap, or its queue overflowed for a slow reader) is read from the store.
Retention can have trimmed the log under a cursor: the stream then says so with a
``stream.gap`` event (no id) naming the seqs that are gone. A cursor past the head is not
from this log: a ``stream.reset`` event (no id) says so and the stream goes on from the head.

Browsers' ``EventSource`` cannot send ``Authorization``; it may pass the credential as
``?access_token=`` instead (only on this route; prefer a session token there).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections import deque
from typing import Final

from aiohttp import web
from prometheus_client import Counter

from protocol import codec, names
from protocol.errors import StoreError

from ..auth import Principal
from ..hub import Hub
from ..session import Session
from ..store.base import LogEntry
from .access import hub_of, int_query, loaded_session, require_act, visible_header
from .context import authenticate
from .hardening import peer_gone
from .middleware import HTTP_METRICS, ApiError
from .models import StreamGap, StreamReset

__all__ = [
    "STREAMS",
    "EventStream",
    "SessionTail",
    "end_streams",
    "end_streams_of",
    "reloaded",
    "stream_events",
    "wait_for_news",
]

_PAGE: Final = 500
_QUEUE_LIMIT: Final = 4096
_RETRY_MS: Final = 2000
_SHUTDOWN_GRACE_S: Final = 1.0
_SEQ_TEXT: Final = re.compile(r"[0-9]{1,18}")


class SessionTail:
    """Session listener of a stream (SSE, AG-UI): queues committed entries, flags an
    overflow instead of growing (the stream then re-reads from the store)."""

    def __init__(self) -> None:
        self.entries: deque[LogEntry] = deque()
        self.overflowed = False
        self.wake = asyncio.Event()

    def __call__(self, entry: LogEntry) -> None:
        if len(self.entries) >= _QUEUE_LIMIT:
            self.entries.clear()
            self.overflowed = True
        else:
            self.entries.append(entry)
        self.wake.set()


class EventStream:
    """One open SSE response."""

    def __init__(
        self,
        response: web.StreamResponse,
        principal: Principal,
        written: Counter,
        transport: asyncio.BaseTransport | None = None,
    ) -> None:
        self.response = response
        self.principal = principal
        self.written = written
        self.last = 0
        self.done = False
        self.stop = asyncio.Event()
        self._transport = transport

    def end(self) -> None:
        """Ask the stream to finish (shutdown, revocation); asked again, cut its connection.

        A stream ends at its next event once asked; one still open when asked again (the
        credential watch asks every round, relay/revocation.py) is stuck writing to a reader
        that stopped reading, so its connection is closed under it (§16.9).
        """
        if self.stop.is_set() and self._transport is not None:
            # Not an isinstance check: uvloop's transports are no asyncio.WriteTransport, yet
            # abort the same. close() would wait to flush what the reader never takes.
            abort = getattr(self._transport, "abort", None)
            if abort is not None:
                abort()
        self.stop.set()


STREAMS: web.AppKey[set[EventStream]] = web.AppKey("sse_streams", set[EventStream])


def end_streams_of(app: web.Application, credential_id: str) -> None:
    """End every stream of this node opened with that credential (it was revoked)."""
    streams: set[EventStream] = app[STREAMS]
    for stream in list(streams):
        principal = stream.principal
        if credential_id in (principal.credential_id, principal.issued_by):
            stream.end()


async def end_streams(app: web.Application) -> None:
    """``on_shutdown``: end every stream so the server can close.

    Streams end at their next event; any still open after :data:`_SHUTDOWN_GRACE_S` are
    stuck behind readers that stopped reading and are cut, so shutdown does not wait on them.
    """
    streams: set[EventStream] = app[STREAMS]
    for stream in list(streams):
        stream.end()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _SHUTDOWN_GRACE_S
    while streams and loop.time() < deadline:
        await asyncio.sleep(0.02)
    for stream in list(streams):
        stream.end()  # asked twice: its connection is cut


def _event(entry: LogEntry) -> bytes:
    data = entry.data
    if b"\n" in data or b"\r" in data:
        # A sender's pretty-printed JSON: one line per event (same object, compact).
        data = codec.encode_json(codec.decode_object(data))
    # Logged types follow the grammar (§16.7); an entry of an older build might not, and an
    # SSE field must never carry a received CR/LF (a forged "id:" or "event:" line).
    kind = entry.type if names.is_frame_type(entry.type) else names.one_line(entry.type)
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (entry.seq, kind.encode(), data)


async def _start_cursor(request: web.Request, session: Session) -> int:
    last_event_id = request.headers.get("Last-Event-ID", "").strip()
    if last_event_id:
        # ASCII digits only: str.isdigit() also takes "²", which int() then refuses.
        if not _SEQ_TEXT.fullmatch(last_event_id):
            shown = names.one_line(last_event_id[:40])
            raise ApiError(400, f"Last-Event-ID must be a seq, got {shown!r}", code="invalid_query")
        return int(last_event_id)
    after = int_query(request, "after_seq", None)
    return session.head if after is None else after


async def stream_events(request: web.Request) -> web.StreamResponse:
    """``GET /v1/sessions/{session_id}/events/stream``."""
    hub = hub_of(request)
    if "Authorization" not in request.headers and "access_token" in request.query:
        principal = await hub.auth.authenticate(request.query["access_token"])
    else:
        principal = await authenticate(request)
    header = await visible_header(request, principal)
    require_act(principal, "read_session")
    session = await loaded_session(request, header)
    cursor = await _start_cursor(request, session)
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache, no-transform",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    stream = EventStream(
        response, principal, request.app[HTTP_METRICS].sse_events, request.transport
    )
    stream.last = cursor
    streams = request.app[STREAMS]
    metrics = request.app[HTTP_METRICS]
    streams.add(stream)
    metrics.streams.inc()
    tail = SessionTail()
    session.listeners.add(tail)
    interval = min(15.0, hub.settings.heartbeat_interval_s)
    try:
        await response.write(b"retry: %d\n\n" % _RETRY_MS)
        head = await session.store.head_seq(session.id)
        if stream.last > head:
            # The cursor is not in this log (another session of that id, or a made-up id):
            # say so and go on from the head, as a WebSocket resume past the head gets a
            # truncated history — never wait, silent, for seqs this log will not reach.
            reset = StreamReset(reason="cursor_ahead", last_event_id=stream.last, head_seq=head)
            await response.write(b"event: stream.reset\ndata: %s\n\n" % codec.encode_json(reset))
            stream.last = head
        await _catch_up(stream, session)
        while not stream.done and not stream.stop.is_set():
            tail.wake.clear()
            if tail.overflowed:
                tail.overflowed = False
                tail.entries.clear()
                await _catch_up(stream, session)
            while tail.entries and not stream.done:
                entry = tail.entries.popleft()
                if entry.seq <= stream.last:
                    continue
                if entry.seq > stream.last + 1:
                    await _catch_up(stream, session, before=entry.seq)
                if entry.seq == stream.last + 1:
                    await _write(stream, entry)
            if stream.done or tail.entries:
                continue
            woke = await wait_for_news(tail.wake, stream.stop, session, interval)
            if tail.wake.is_set() or stream.stop.is_set():
                continue
            if not woke:
                await response.write(b": ping\n\n")
                if stream.principal.expired:
                    break
            current = await reloaded(hub, session)
            if current is not session:
                # The session was reloaded (or deleted): follow the new object from the store.
                session.listeners.discard(tail)
                if current is None:
                    break
                session = current
                session.listeners.add(tail)
                await _catch_up(stream, session)
    except ConnectionError as exc:  # the reader reset or dropped its connection: its doing
        peer_gone(request, exc)
    except asyncio.CancelledError:
        pass
    finally:
        session.listeners.discard(tail)
        streams.discard(stream)
        metrics.streams.dec()
    with contextlib.suppress(ConnectionError):
        await response.write_eof()
    return response


async def wait_for_news(
    wake: asyncio.Event, stop: asyncio.Event, session: Session, timeout: float
) -> bool:
    """Wait until an entry comes (``wake``), the stream stops, or ``session`` ends on this
    node — unloaded after a store failure, or terminated: the stream then follows the object
    loaded afresh at once, not at its next ping (frames logged meanwhile would wait up to the
    ping interval) — for at most ``timeout`` seconds. False when the time ran out."""
    events = [wake, stop]
    if not session.ended.is_set():  # once set, it stays set: waited for once only
        events.append(session.ended)
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
    return any(event.is_set() for event in events)


async def reloaded(hub: Hub, session: Session) -> Session | None:
    """What a stream of ``session`` follows now: ``session`` while it is the object loaded on
    this node, or while the store refuses to load it again (tried again at the next
    heartbeat); else the object loaded afresh from the store, or None once it is gone."""
    if hub.sessions.get(session.id) is session:
        return session
    try:
        return await hub.open(session.id)
    except StoreError:
        return session


async def _catch_up(stream: EventStream, session: Session, before: int | None = None) -> None:
    """Write every stored entry after ``stream.last`` (and before ``before``)."""
    store = session.store
    first = await store.trimmed_before(session.id)
    if stream.last + 1 < first:
        gap = StreamGap(from_seq=stream.last + 1, to_seq=first - 1)
        await stream.response.write(b"event: stream.gap\ndata: %s\n\n" % codec.encode_json(gap))
        stream.last = first - 1
    while not stream.done:
        page = await store.read(session.id, after_seq=stream.last, before_seq=before, limit=_PAGE)
        for entry in page:
            if entry.seq != stream.last + 1:
                continue
            await _write(stream, entry)
            if stream.done:
                return
        if len(page) < _PAGE:
            return


async def _write(stream: EventStream, entry: LogEntry) -> None:
    if stream.stop.is_set():
        # Revoked, expired or shutting down: a busy stream ends here, not at its next idle
        # ping (§16.9) — every loop that writes stops once ``done`` is set.
        stream.done = True
        return
    await stream.response.write(_event(entry))
    stream.last = entry.seq
    stream.written.inc()
    if entry.type == "session.deleted" and entry.sender_role == "master":
        stream.done = True
