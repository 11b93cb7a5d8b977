"""An asyncio RAWP client for agents (role ``client``) and UIs (role ``edge``).

Spec: notes §2 (transport), §3 (envelope), §5 (hello, welcome, resume), §7 (buffers and
cursors), §15.4–§15.6; RAWP 1.0.2 §7.1.1 (``session.history``) and §7.8 (finalization). This
is the only module of :mod:`protocol` that does I/O (asyncio, websockets); everything it
decides is decided by the sans-I/O modules: :mod:`protocol.buffers` bounds the outgoing
frames, :mod:`protocol.view` (on :mod:`protocol.state` and :mod:`protocol.finalize`) folds
what arrives.

Use::

    async with RawpClient(url, session_id, role="client", token=key, create=True) as client:
        turn = await client.turn_start()
        await client.text_delta("b1", "Hello")
        ...
        async for frame in client:  # typed frames: the welcome, the backlog, live frames
            ...

What the client does on its own:

* **Handshake** (notes §5): ``connection.hello`` with the participant id and the cursor
  (``resume.last_seq`` = the last seq received) once it has them, then ``connection.welcome``
  and, on a reattach, the master's backlog as one ``session.history`` (yielded as that History
  frame and folded into :attr:`RawpClient.view`).
* **Acknowledgements**: ``connection.ack`` after every ``ack_every`` frames received and after
  ``ack_interval`` seconds without one, so the master keeps the cursor too.
* **Commits** (notes §16.3): the master acknowledges what it committed of ours with its own
  cumulative ``connection.ack {last_seq, last_message_id}`` and names a refused frame in its
  ``session.error``'s ``ref_message_id``. :meth:`RawpClient.send` waits for that answer (the
  seq, or :class:`FrameRefused`); the typed helpers and :meth:`RawpClient.post` return at once
  and :meth:`RawpClient.committed` / :meth:`RawpClient.flush` wait later. Acknowledged frames
  leave the in-flight window, so a reattach resends only what the master may lack.
* **Reconnect** with exponential backoff and full jitter (:class:`Backoff`) after any close
  but a refusal (4400, 4401, 4403, 4404, 4409, 4410, 4426), a normal end (1000: the session
  was deleted) or :meth:`RawpClient.close`. The view is finalized locally when the connection
  drops (§7.8.1) and unfinalized by the backlog of the next reattach (§7.8.3).
* **Outgoing frames while disconnected** go to a :class:`~protocol.buffers.BoundedBuffer`
  (RING / DROP / NONE over a byte capacity, the hello's ``buffer``). Frames already written to
  a socket that died stay "in flight" (a byte-bounded window): after the next welcome the
  client drops those ``welcome.received.last_message_id`` says the master has, and sends the
  rest plus the buffered frames as ONE ``session.history`` (§7.1.1) with the buffer's exact
  ``buffer_status`` (in-flight frames were sent once, so they never count as lost) and
  ``last_message_id`` / ``last_sync_timestamp`` of that last frame the master had. A client
  sends such a history after every reattach, empty or not: it is what retracts the master's
  finalization (§7.8.3). An edge may not send histories (notes §4): it sends the same frames
  one by one, and a loss is recorded as a local notice in its view.
* **Persistence**: :meth:`RawpClient.save` writes cursor, participant id, view, unsent and
  in-flight frames to a JSON file atomically (temp file, fsync, rename); a client built with
  that ``state_path`` resumes the same session after an app restart (its view is finalized
  on load, §7.8.2, and unfinalized by the reattach).

Own frames: the master does not echo a participant's frames back (renames aside, which are
folded when their echo arrives; a delete request is never logged, the master's cleanup and
``session.deleted`` are folded instead), so the client folds each frame it sends into its view when
the frame leaves on a socket (a live frame at once, buffered frames inside the history that
carries them). A sender's view can therefore order its own frames slightly differently from
the log when frames from other participants cross them in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import enum
import logging
import os
import random
import ssl
import tempfile
import uuid
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, TypeVar

import msgspec
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.typing import Subprotocol

from . import codec
from .buffers import BoundedBuffer, BufferedItem, buffer_status
from .errors import (
    BadCredential,
    ClientAttached,
    CloseCode,
    DirectionError,
    Forbidden,
    HandshakeError,
    InvalidFrame,
    MalformedHello,
    NoSuchSession,
    ProtocolError,
    ProtocolVersionMismatch,
    RawpError,
    SessionGone,
)
from .frames import (
    PROTOCOL_VERSION,
    SUBPROTOCOL,
    Ack,
    AckPayload,
    AgentState,
    AgentStatePayload,
    BufferRequest,
    BufferStatus,
    Cancel,
    CancelPayload,
    Compacted,
    CompactedPayload,
    ContextWindow,
    CostUsage,
    CreateSpec,
    Deleted,
    DeletedPayload,
    Frame,
    GenericFrame,
    Hello,
    HelloPayload,
    History,
    HistoryPayload,
    InteractionCancel,
    InteractionCancelPayload,
    InteractionRequest,
    InteractionRequestPayload,
    InteractionResponse,
    InteractionResponsePayload,
    MessageUsage,
    Policy,
    PreservedElements,
    Renamed,
    RenamedPayload,
    Resume,
    Role,
    SessionError,
    SessionErrorPayload,
    TextDelta,
    TextDeltaPayload,
    TextDone,
    TextDonePayload,
    ThinkingDelta,
    ThinkingDeltaPayload,
    ThinkingDone,
    ThinkingDonePayload,
    TokenUsage,
    ToolRequest,
    ToolRequestPayload,
    ToolResult,
    ToolResultPayload,
    TurnEnd,
    TurnEndPayload,
    TurnStart,
    TurnStartPayload,
    Usage,
    UsagePayload,
    UserMessage,
    UserMessagePayload,
    Welcome,
)
from .state import allowed_types
from .view import SessionView, ViewSnapshot

__all__ = [
    "DEFAULT_BUFFER",
    "Backoff",
    "ClientClosed",
    "ClientError",
    "ClientSnapshot",
    "ConnectRefused",
    "ConnectionStatus",
    "Delivered",
    "FrameLost",
    "FrameRefused",
    "RawpClient",
    "ReconnectExhausted",
    "SavedBuffer",
    "load_snapshot",
    "run",
    "save_snapshot",
]

log = logging.getLogger("rawp.client")

T = TypeVar("T")
FrameT = TypeVar("FrameT", bound=Frame)

DEFAULT_BUFFER: Final = BufferRequest(policy="RING", capacity_bytes=256 * 1024)
"""The buffer asked for when none is given: RING over 256 KiB (fits in one 1 MiB frame)."""

_SNAPSHOT_FORMAT: Final = 1
_NORMAL_END: Final = CloseCode.NORMAL
_REFUSALS: Final[dict[int, type[HandshakeError]]] = {
    cls.close_code: cls
    for cls in (
        MalformedHello,
        BadCredential,
        Forbidden,
        NoSuchSession,
        ClientAttached,
        SessionGone,
        ProtocolVersionMismatch,
    )
}
_SETTLED_KEPT: Final = 4096  # outcomes kept for a committed() that comes after the answer
_SENT_TIMES: Final = 4096  # message id -> timestamp of recent own frames (last_sync_timestamp)
_RECEIVE_LIMIT: Final = 64 << 20  # a backlog may be the buffer capacity plus envelopes


# --- errors --------------------------------------------------------------------------------


class ClientError(RawpError):
    """Raised by the client library."""


class ClientClosed(ClientError):
    """The client was closed (or its session ended); nothing more can be sent."""


class ReconnectExhausted(ClientError):
    """The master could not be reached within :attr:`Backoff.max_attempts` attempts."""


class FrameRefused(ClientError):
    """The master refused a frame we sent: its ``session.error`` names it (notes §16.3).

    ``code`` is the error code (``turn_state``, ``rate_limited``, …), ``error`` the
    ``session.error`` frame itself.
    """

    def __init__(self, error: SessionError) -> None:
        p = error.payload
        super().__init__(f"{p.error_code}: {p.message}")
        self.code = p.error_code
        self.error = error
        self.message_id = p.ref_message_id


class FrameLost(ClientError):
    """A frame made while disconnected never reached the master: the outgoing buffer (its
    policy and byte capacity, §7.1.1) or the in-flight window shed it."""


class ConnectRefused(ClientError):
    """The WebSocket handshake was refused with an HTTP status (wrong path, origin, …)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


# --- reconnect policy ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with full jitter: attempt n waits ``uniform(0, cap_n)`` seconds.

    ``cap_n = min(maximum, initial * multiplier**n)``; ``max_attempts`` None retries forever.
    """

    initial: float = 0.25
    maximum: float = 10.0
    multiplier: float = 2.0
    max_attempts: int | None = None

    def __post_init__(self) -> None:
        if self.initial < 0 or self.maximum < 0 or self.multiplier < 1:
            raise ValueError("backoff needs initial >= 0, maximum >= 0 and multiplier >= 1")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1 (or None: forever)")

    def ceiling(self, attempt: int) -> float:
        """The most attempt ``attempt`` (0-based) may wait."""
        exponent = min(attempt, 64)  # beyond this the cap is the maximum anyway
        return min(self.maximum, self.initial * self.multiplier**exponent)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """A full-jitter delay for attempt ``attempt`` (0-based)."""
        draw = (rng or random).random()
        return self.ceiling(attempt) * draw


class ConnectionStatus(enum.Enum):
    """Where the client's connection is."""

    NEW = "new"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class Delivered:
    """One frame as :meth:`RawpClient.frames` yields it.

    ``replayed`` is True for a frame that arrived inside a ``session.history`` (§7.1.1): the
    master's backlog on (re)attach, or an agent's reattach history; ``history`` is then that
    History frame. Live frames have ``replayed`` False and no ``history``.
    """

    frame: Frame | GenericFrame
    replayed: bool = False
    history: History | None = None


# --- persistence ---------------------------------------------------------------------------


class SavedBuffer(msgspec.Struct, kw_only=True):
    """The outgoing buffer as persisted, counters included."""

    policy: Policy
    capacity_bytes: int
    frames: list[msgspec.Raw] = msgspec.field(default_factory=list)
    lost_frame_count: int = 0
    high_watermark: int = 0


class ClientSnapshot(msgspec.Struct, kw_only=True):
    """Everything a client needs to resume its session after an app restart."""

    format: int = _SNAPSHOT_FORMAT
    url: str
    session_id: str
    role: Role
    participant_id: str | None = None
    epoch: str | None = None
    attached_before: bool = False
    turn_index: int = -1
    last_sync_message_id: str | None = None
    last_sync_timestamp: _dt.datetime | None = None
    outgoing: SavedBuffer
    in_flight: list[msgspec.Raw] = msgspec.field(default_factory=list)
    deferred: list[msgspec.Raw] = msgspec.field(default_factory=list)
    view: ViewSnapshot
    saved_at: _dt.datetime


def save_snapshot(path: str | os.PathLike[str], snapshot: ClientSnapshot) -> None:
    """Write ``snapshot`` to ``path`` atomically: a temp file beside it, fsync, rename."""
    target = Path(path)
    data = msgspec.json.encode(snapshot)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable where possible
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def load_snapshot(path: str | os.PathLike[str]) -> ClientSnapshot:
    """Read a snapshot written by :func:`save_snapshot`."""
    snapshot = msgspec.json.decode(Path(path).read_bytes(), type=ClientSnapshot)
    if snapshot.format > _SNAPSHOT_FORMAT:
        raise ClientError(f"{path}: written by a newer client (format {snapshot.format}); upgrade")
    return snapshot


class _Outgoing:
    """Frames made while disconnected: a BoundedBuffer that survives a restart exactly.

    :class:`BoundedBuffer` has no restore; a restored buffer re-pushes its frames and adds
    the lost count, and this wrapper keeps the two facts re-pushing cannot: the high watermark
    and, for DROP, that every later frame is lost once one was.
    """

    def __init__(self, policy: Policy, capacity_bytes: int) -> None:
        self.buffer: BoundedBuffer[Frame] = BoundedBuffer(policy, capacity_bytes)
        self._watermark_floor = 0
        self._drop_closed = False

    def push(self, data: bytes, frame: Frame) -> bool:
        if self._drop_closed:
            self.buffer.add_lost(1)
            return False
        return self.buffer.push(data, frame)

    @property
    def items(self) -> list[BufferedItem[Frame]]:
        return self.buffer.items

    def status(self) -> BufferStatus:
        status = self.buffer.status()
        if self._watermark_floor > (status.buffer_high_watermark or 0):
            status = msgspec.structs.replace(status, buffer_high_watermark=self._watermark_floor)
        return status

    def take(self) -> tuple[list[BufferedItem[Frame]], BufferStatus]:
        """The frames held and their status; the buffer starts over."""
        status = self.status()
        items = self.buffer.drain()
        self._watermark_floor = 0
        self._drop_closed = False
        return items, status

    def saved(self) -> SavedBuffer:
        return SavedBuffer(
            policy=self.buffer.policy,
            capacity_bytes=self.buffer.capacity_bytes,
            frames=[msgspec.Raw(item.data) for item in self.buffer.items],
            lost_frame_count=self.buffer.lost_frame_count or 0,
            high_watermark=max(self.buffer.high_watermark, self._watermark_floor),
        )

    @classmethod
    def restore(cls, saved: SavedBuffer) -> _Outgoing:
        outgoing = cls(saved.policy, saved.capacity_bytes)
        for raw in saved.frames:
            frame = codec.decode(raw)
            if isinstance(frame, Frame):
                outgoing.buffer.push(bytes(raw), frame)
        outgoing.buffer.add_lost(saved.lost_frame_count)
        outgoing._watermark_floor = saved.high_watermark
        outgoing._drop_closed = saved.policy == "DROP" and saved.lost_frame_count > 0
        return outgoing


class _Commits:
    """Which of our frames the master has committed or refused (notes §16.3), sans I/O.

    ``_wire`` lists, in the order they were written to the current connection, the frames the
    master has not acknowledged yet: a live frame carries itself, a ``session.history`` the
    frames inside it. A cumulative ack settles the front of that list up to the frame it
    names; a refusal settles the frame it names. Each tracked frame has a future that
    :meth:`RawpClient.send` and :meth:`RawpClient.committed` wait on.
    """

    def __init__(self) -> None:
        self.futures: dict[str, asyncio.Future[int]] = {}
        self._wire: OrderedDict[str, list[str]] = OrderedDict()
        # How recently settled frames ended, so a late committed() still gets the answer.
        self.settled: OrderedDict[str, int | ClientError] = OrderedDict()

    def track(self, message_id: str) -> asyncio.Future[int]:
        future = self.futures.get(message_id)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            # Nobody may await it (a typed helper's frame): the refusal also reaches the
            # stream as a session.error, so an unread exception is not worth a warning.
            future.add_done_callback(_retrieve)
            self.futures[message_id] = future
        return future

    def wrote(self, wire_id: str, carried: list[str]) -> None:
        """``wire_id`` left on the socket carrying the frames ``carried``."""
        self._wire[wire_id] = carried

    def new_connection(self) -> None:
        """What was written to a dead socket is settled by the next welcome and history."""
        self._wire.clear()

    def acked(self, last_message_id: str, last_seq: int) -> str | None:
        """A cumulative ack; returns the newest frame it settled (None: it names nothing)."""
        if last_message_id not in self._wire:
            return None
        newest: str | None = None
        while self._wire:
            wire_id, carried = self._wire.popitem(last=False)
            for message_id in carried:
                self._resolve(message_id, last_seq)
                newest = message_id
            if wire_id == last_message_id:
                break
        return newest

    def received_through(self, message_id: str, seq: int, pending: list[str]) -> None:
        """The welcome says the master has ``message_id``: every earlier frame of ``pending``
        (our unsettled frames in send order) is committed too, at or before ``seq``."""
        if message_id not in pending:
            return
        for tracked in pending:
            self._resolve(tracked, seq)
            if tracked == message_id:
                return

    def refused(self, error: SessionError) -> bool:
        """A refusal naming one of ours (a live frame, a history or a frame inside one)."""
        ref = error.payload.ref_message_id
        if ref is None:
            return False
        carried = self._wire.pop(ref, None)
        targets = carried if carried is not None else [ref]
        for message_id in targets:
            self._fail(message_id, FrameRefused(error))
            for others in self._wire.values():
                if message_id in others:
                    others.remove(message_id)
        return bool(targets)

    def fail_all(self, keep: set[str], error: ClientError) -> None:
        """Fail every unsettled frame not in ``keep`` (lost, or the client ended)."""
        for message_id in [m for m in self.futures if m not in keep]:
            self._fail(message_id, error)

    def _resolve(self, message_id: str, seq: int) -> None:
        future = self.futures.pop(message_id, None)
        if future is not None and not future.done():
            future.set_result(seq)
            self._keep(message_id, seq)

    def _fail(self, message_id: str, error: ClientError) -> None:
        future = self.futures.pop(message_id, None)
        if future is not None and not future.done():
            future.set_exception(error)
            self._keep(message_id, error)

    def _keep(self, message_id: str, outcome: int | ClientError) -> None:
        self.settled[message_id] = outcome
        if len(self.settled) > _SETTLED_KEPT:
            self.settled.popitem(last=False)


def _retrieve(future: asyncio.Future[int]) -> None:
    if not future.cancelled():
        future.exception()


class _End:
    """Marks the end of the incoming stream (kept at its tail once reached)."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` in a new event loop (for command-line tools built on the client)."""
    return asyncio.run(coroutine)


# --- the client ----------------------------------------------------------------------------


class RawpClient:
    """One participant's connection to one session, kept alive across drops.

    ``role`` ``"client"`` is the agent runtime, ``"edge"`` a UI or observer. ``create`` (client
    only) creates the session if it does not exist: a :class:`CreateSpec`, a name, or True.
    ``buffer`` is the reattach buffer asked of the master and the bound of this client's own
    outgoing buffer. ``from_start`` makes the first connection ask for the whole log as its
    backlog. ``state_path`` persists the client (see :meth:`save`) and, when the file exists,
    restores it.
    """

    def __init__(
        self,
        url: str,
        session_id: str,
        *,
        role: Role,
        token: str,
        create: CreateSpec | str | bool | None = None,
        buffer: BufferRequest | None = None,
        backoff: Backoff | None = None,
        ack_every: int = 64,
        ack_interval: float = 1.0,
        from_start: bool = False,
        participant_id: str | None = None,
        view: SessionView | None = None,
        state_path: str | os.PathLike[str] | None = None,
        open_timeout: float = 10.0,
        ping_interval: float | None = 20.0,
        ping_timeout: float | None = 20.0,
        in_flight_bytes: int | None = None,
        max_queue: int | None = 100_000,
        on_status: Callable[[ConnectionStatus], None] | None = None,
        rng: random.Random | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if role not in ("client", "edge"):
            raise ValueError(f"role must be 'client' or 'edge', got {role!r}")
        if create and role != "client":
            raise ValueError("only a client (agent) may create its session")
        if ack_every < 1 or ack_interval <= 0:
            raise ValueError("ack_every must be >= 1 and ack_interval > 0")
        self.url = url
        self.session_id = session_id
        self.role: Role = role
        self.token = token
        self.create = _create_spec(create)
        self.buffer_request = buffer or DEFAULT_BUFFER
        self.backoff = backoff or Backoff()
        self.ack_every = ack_every
        self.ack_interval = ack_interval
        self.from_start = from_start
        self.open_timeout = open_timeout
        self.ping_interval = ping_interval
        self.ping_timeout = ping_timeout
        self.on_status = on_status
        self._status_callbacks: list[Callable[[ConnectionStatus], None]] = []
        self.last_connect_error: BaseException | None = None
        self.participant_id = participant_id
        self.generation = 0
        self.epoch: str | None = None
        self.welcome: Welcome | None = None
        self.view = view if view is not None else SessionView(session_id)
        self.state_path = Path(state_path) if state_path is not None else None
        self.dropped_frames = 0  # received frames dropped from a full incoming queue
        self.undecodable_frames = 0
        self._max_queue = max_queue
        self._rng = rng
        self._ssl = ssl_context  # wss:// with a private CA; None: the system's defaults
        self._attached_before = False
        self._turn_index = -1
        self._last_sync: tuple[str, _dt.datetime] | None = None
        self._max_frame_bytes: int | None = None
        self._outgoing = _Outgoing(self.buffer_request.policy, self.buffer_request.capacity_bytes)
        window = (
            in_flight_bytes if in_flight_bytes is not None else self.buffer_request.capacity_bytes
        )
        self._in_flight: BoundedBuffer[Frame] = BoundedBuffer("RING", max(window, 0))
        self._sent_times: OrderedDict[str, _dt.datetime] = OrderedDict()
        self._deferred: list[BufferedItem[Frame]] = []  # requests that must not ride a history
        self._pending_status: BufferStatus | None = None  # a history's status that never left
        self._ws: ClientConnection | None = None
        self._live = False
        self._send_lock = asyncio.Lock()
        self._incoming: deque[Frame | GenericFrame | _End] = deque()
        self._incoming_ready = asyncio.Event()
        self._status = ConnectionStatus.NEW
        self._status_changed = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None
        self._closing = False
        self._ended = False
        self._deleted = False
        self._received_since_ack = 0
        self._acked = 0
        self._commits = _Commits()
        if self.state_path is not None and self.state_path.exists():
            self._restore(load_snapshot(self.state_path))

    # --- construction from a snapshot ----------------------------------------------------

    @classmethod
    def restore(cls, path: str | os.PathLike[str], *, token: str, **options: Any) -> RawpClient:
        """A client resuming the session saved at ``path`` (its view is finalized, §7.8.2)."""
        snapshot = load_snapshot(path)
        return cls(
            snapshot.url,
            snapshot.session_id,
            role=snapshot.role,
            token=token,
            state_path=path,
            **options,
        )

    def _restore(self, snapshot: ClientSnapshot) -> None:
        if snapshot.session_id != self.session_id or snapshot.role != self.role:
            raise ClientError(
                f"{self.state_path} holds {snapshot.role} state for session "
                f"{snapshot.session_id}, not {self.role} state for {self.session_id}"
            )
        self.participant_id = snapshot.participant_id
        self.epoch = snapshot.epoch
        self._attached_before = snapshot.attached_before
        self._turn_index = snapshot.turn_index
        if snapshot.last_sync_message_id is not None and snapshot.last_sync_timestamp:
            self._last_sync = (snapshot.last_sync_message_id, snapshot.last_sync_timestamp)
        self._outgoing = _Outgoing.restore(snapshot.outgoing)
        for raw in snapshot.in_flight:
            frame = codec.decode(raw)
            if isinstance(frame, Frame):
                self._in_flight.push(bytes(raw), frame)
        for raw in snapshot.deferred:
            frame = codec.decode(raw)
            if isinstance(frame, Frame):
                self._deferred.append(BufferedItem(bytes(raw), frame))
        # §7.8.2: restoring persisted state when the connection no longer exists finalizes.
        self.view = SessionView.restore(snapshot.view, finalize_now=True)

    def snapshot(self) -> ClientSnapshot:
        """This client's state, as :meth:`save` writes it."""
        return ClientSnapshot(
            url=self.url,
            session_id=self.session_id,
            role=self.role,
            participant_id=self.participant_id,
            epoch=self.epoch,
            attached_before=self._attached_before,
            turn_index=self._turn_index,
            last_sync_message_id=self._last_sync[0] if self._last_sync else None,
            last_sync_timestamp=self._last_sync[1] if self._last_sync else None,
            outgoing=self._outgoing.saved(),
            in_flight=[msgspec.Raw(item.data) for item in self._in_flight.items],
            deferred=[msgspec.Raw(item.data) for item in self._deferred],
            view=self.view.snapshot(),
            saved_at=codec.now(),
        )

    def save(self, path: str | os.PathLike[str] | None = None) -> Path:
        """Persist this client atomically to ``path`` (default: ``state_path``)."""
        target = Path(path) if path is not None else self.state_path
        if target is None:
            raise ValueError("no path given and the client has no state_path")
        save_snapshot(target, self.snapshot())
        return target

    def _autosave(self) -> None:
        if self.state_path is not None:
            with contextlib.suppress(OSError):
                self.save()

    # --- what callers read ---------------------------------------------------------------

    @property
    def status(self) -> ConnectionStatus:
        """Where the connection is."""
        return self._status

    @property
    def connected(self) -> bool:
        """True while frames leave on a live socket."""
        return self._live

    @property
    def cursor(self) -> int:
        """The last seq received (``resume.last_seq`` of the next hello)."""
        return self.view.last_seq

    @property
    def buffered(self) -> int:
        """Frames waiting in the outgoing buffer."""
        return len(self._outgoing.buffer)

    def buffer_status(self) -> BufferStatus:
        """The §7.1.1 status the outgoing buffer would be sent with now."""
        return self._outgoing.status()

    async def wait_status(self, *statuses: ConnectionStatus, timeout: float | None = None) -> None:
        """Wait until the status is one of ``statuses`` (TimeoutError after ``timeout``)."""
        async with asyncio.timeout(timeout):
            while self._status not in statuses:
                await self._status_changed.wait()

    def _set_status(self, status: ConnectionStatus) -> None:
        if status is self._status:
            return
        self._status = status
        self._status_changed.set()
        self._status_changed = asyncio.Event()
        if self.on_status is not None:
            self.on_status(status)
        for callback in tuple(self._status_callbacks):
            callback(status)

    def add_status_callback(
        self, callback: Callable[[ConnectionStatus], None]
    ) -> Callable[[], None]:
        """Call ``callback(status)`` on every connection status change (besides
        ``on_status``); returns a function that removes it again."""
        self._status_callbacks.append(callback)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._status_callbacks.remove(callback)

        return remove

    # --- lifecycle -----------------------------------------------------------------------

    async def __aenter__(self) -> RawpClient:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def connect(
        self, *, timeout: float | None = None, max_attempts: int | None = None
    ) -> None:
        """Connect (retrying per :attr:`backoff`), say hello and wait for the welcome.

        By default a master that cannot be reached is retried as :attr:`backoff` says (for
        ever unless its ``max_attempts`` is set; the first failure is logged as a warning on
        the ``rawp.client`` logger). ``max_attempts`` and ``timeout`` (seconds, for the whole
        first connection) make this call fail fast instead; later reconnects follow
        :attr:`backoff`. Raises the :class:`~protocol.errors.HandshakeError` the master
        refused with, :class:`ConnectRefused`, or :class:`ReconnectExhausted` (also on
        ``timeout``).
        """
        if self._closing:
            raise ClientClosed("this client was closed")
        if self._runner is not None:
            return
        if max_attempts is not None and max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        try:
            async with asyncio.timeout(timeout):
                ws = await self._establish(first=True, max_attempts=max_attempts)
        except TimeoutError:
            self._set_status(ConnectionStatus.CLOSED)
            cause = f": {self.last_connect_error}" if self.last_connect_error else ""
            raise ReconnectExhausted(
                f"could not connect to {self.url} within {timeout:g} s{cause}"
            ) from self.last_connect_error
        self._runner = asyncio.get_running_loop().create_task(self._run(ws))

    async def close(self) -> None:
        """Close normally (1000), persist (with a ``state_path``) and end the iteration."""
        if self._closing:
            return
        self._closing = True
        self._live = False
        ws = self._ws
        if ws is not None:
            with contextlib.suppress(Exception):
                await ws.close()
        runner = self._runner
        if runner is not None and not runner.done():
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner
        self._autosave()
        self._end(None)

    def abort_connection(self) -> None:
        """Drop the current connection as a network failure would (no closing handshake).

        For tests and chaos drills: the client notices, finalizes its view and reconnects.
        """
        ws = self._ws
        if ws is not None:
            ws.transport.abort()

    def _end(self, error: BaseException | None) -> None:
        self._commits.fail_all(set(), ClientClosed("the client ended before the master answered"))
        if not self._ended:
            self._ended = True
            self._incoming.append(_End(error))
            self._incoming_ready.set()
        self._set_status(ConnectionStatus.CLOSED)

    async def _run(self, ws: ClientConnection) -> None:
        try:
            while True:
                await self._pump(ws)
                self._live = False
                self._ws = None
                if self._closing:
                    return
                code = ws.close_code
                if self._deleted or code == _NORMAL_END:
                    self._closing = True
                    self._autosave()
                    self._end(None)
                    return
                refusal = _refusal(code, ws.close_reason or "")
                if refusal is not None:
                    self._closing = True
                    self._autosave()
                    self._end(refusal)
                    return
                self.view.connection_lost()  # §7.8.1
                self._autosave()
                try:
                    ws = await self._establish(first=False)
                except (HandshakeError, ClientError) as exc:
                    self._closing = True
                    self._end(exc)
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug here must reach the caller, not vanish in a task
            self._closing = True
            self._end(exc)

    async def _establish(self, *, first: bool, max_attempts: int | None = None) -> ClientConnection:
        attempt = 0
        while True:
            if not first or attempt > 0:
                self._set_status(ConnectionStatus.RECONNECTING)
                await asyncio.sleep(self.backoff.delay(attempt, self._rng))
            self._set_status(ConnectionStatus.CONNECTING)
            try:
                ws = await self._open()
            except (HandshakeError, ConnectRefused) as exc:
                self.last_connect_error = exc
                self._set_status(ConnectionStatus.CLOSED)
                raise
            except (OSError, TimeoutError, ConnectionClosed, InvalidHandshake) as exc:
                self.last_connect_error = exc
                attempt += 1
                # The first failure of a series is worth a warning (a wrong port must not
                # retry in silence); the rest only at debug level, so a long outage is quiet.
                level = logging.WARNING if attempt == 1 else logging.DEBUG
                log.log(level, "could not connect to %s (attempt %d): %s", self.url, attempt, exc)
                limit = max_attempts if max_attempts is not None else self.backoff.max_attempts
                if limit is not None and attempt >= limit:
                    self._set_status(ConnectionStatus.CLOSED)
                    raise ReconnectExhausted(
                        f"could not reach {self.url} in {attempt} attempt(s): {exc}"
                    ) from exc
            else:
                if attempt > 0:
                    log.info("connected to %s after %d failed attempt(s)", self.url, attempt)
                self.last_connect_error = None
                return ws

    async def _open(self) -> ClientConnection:
        try:
            ws = await connect(
                self.url,
                subprotocols=[Subprotocol(SUBPROTOCOL)],
                open_timeout=self.open_timeout,
                ping_interval=self.ping_interval,
                ping_timeout=self.ping_timeout,
                max_size=_RECEIVE_LIMIT,
                compression=None,
                proxy=None,
                user_agent_header="rawp-client",
                **self._tls_options(),
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            if 400 <= status < 500:
                body = (
                    exc.response.body.decode(errors="replace").strip() if exc.response.body else ""
                )
                raise ConnectRefused(
                    f"{self.url} refused the WebSocket handshake: HTTP {status} {body}".strip(),
                    status,
                ) from None
            raise
        try:
            sent_resume = await self._hello(ws)
            welcome = await self._read_welcome(ws)
            self._on_welcome(welcome, sent_resume)
            if sent_resume or welcome.payload.resumed:
                # The master queues the backlog right after the welcome (notes §5): fold it
                # before our own history, in the log's order.
                first = await asyncio.wait_for(ws.recv(), self.open_timeout)
                self._handle(first)
            async with self._send_lock:
                await self._send_reattach(ws, welcome)
                self._ws = ws
                self._live = True
        except BaseException:
            ws.transport.abort()
            raise
        self._set_status(ConnectionStatus.CONNECTED)
        self._autosave()
        return ws

    def _tls_options(self) -> dict[str, Any]:
        # websockets makes its own TLS context for wss:// only when ``ssl`` is not passed.
        return {"ssl": self._ssl} if self._ssl is not None else {}

    async def _hello(self, ws: ClientConnection) -> bool:
        resume: Resume | None = None
        if self._attached_before:
            resume = Resume(last_seq=self.view.last_seq, last_message_id=self.view.last_message_id)
        elif self.from_start:
            resume = Resume(last_seq=0)
        hello = Hello(
            payload=HelloPayload(
                protocol_version=PROTOCOL_VERSION,
                role=self.role,
                token=self.token,
                participant_id=self.participant_id,
                resume=resume,
                buffer=self.buffer_request,
                create=self.create,
            ),
            **self._envelope(),
        )
        await ws.send(codec.encode(hello), text=True)
        return resume is not None

    async def _read_welcome(self, ws: ClientConnection) -> Welcome:
        try:
            message = await asyncio.wait_for(ws.recv(), self.open_timeout)
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd is not None else None
            reason = exc.rcvd.reason if exc.rcvd is not None else ""
            refusal = _refusal(code, reason)
            if refusal is not None:
                raise refusal from None
            raise
        frame = codec.decode(message)
        if not isinstance(frame, Welcome):
            raise InvalidFrame(f"expected connection.welcome, got {frame.type}")
        return frame

    def _on_welcome(self, welcome: Welcome, sent_resume: bool) -> None:
        w = welcome.payload
        self.welcome = welcome
        self.participant_id = w.participant_id
        self.generation = w.generation
        self.epoch = w.session.epoch
        self._max_frame_bytes = w.max_frame_bytes
        head = w.session.head_seq
        if not sent_resume:
            self.view.reset_cursor(head)  # the master set our cursor to its head
        elif head < self.view.last_seq:
            # Our cursor is from a log this master does not have (its backlog says truncated).
            self.view.reset_cursor(head)
        self._acked = min(self._acked, self.view.last_seq)
        self._commits.new_connection()
        received = w.received.last_message_id if w.received is not None else None
        if received:
            self._commits.received_through(received, head, self._unsettled())
        self.view.receive(welcome)
        self._push(welcome)

    def _unsettled(self) -> list[str]:
        """Our frames not yet known committed, in the order they were made."""
        items = [*self._in_flight.items, *self._outgoing.items, *self._deferred]
        return [item.value.message_id for item in items]

    # --- the reattach history (§7.1.1) ---------------------------------------------------

    async def _send_reattach(self, ws: ClientConnection, welcome: Welcome) -> None:
        received = welcome.payload.received.last_message_id if welcome.payload.received else None
        synced = self._synced_frame(received, welcome)
        if received:
            self._in_flight.discard_through(lambda frame: frame.message_id == received)
        resend = self._in_flight.items
        buffered, status = self._outgoing.take()
        if self._pending_status is not None:
            status = _merge_status(self._pending_status, status)
        for item in buffered:  # from now on they are in flight: sent, not known received
            self._in_flight.push(item.data, item.value)
        items = [*resend, *buffered]
        if self.role == "client":
            carried: set[str] = set()
            if self._attached_before or items or status.truncated:
                history, sent = self._history(items, status, synced)
                self._pending_status = history.payload.buffer_status
                carried = {item.value.message_id for item in sent}
                self._commits.wrote(history.message_id, [item.value.message_id for item in sent])
                await ws.send(codec.encode(history), text=True)
                self._pending_status = None
                for item in sent:
                    self._remember_sent(item.value)
                self.view.fold(history, "client")
            # Frames the window or the history's size limit shed never reach the master.
            keep = carried | {item.value.message_id for item in self._deferred}
            keep |= {item.value.message_id for item in self._outgoing.items}
            self._commits.fail_all(keep, FrameLost("shed while disconnected (§7.1.1 buffer)"))
            while self._deferred:
                item = self._deferred[0]
                self._commits.wrote(item.value.message_id, [item.value.message_id])
                await ws.send(item.data, text=True)
                self._deferred.pop(0)
                self._remember_sent(item.value)
                self._fold_own(item.value)
        else:
            if status.truncated:
                lost = status.lost_frame_count
                self.view.note(
                    f"{lost if lost is not None else 'some'} frame(s) sent while disconnected "
                    f"were lost ({status.policy_applied} buffer)"
                )
            keep = {item.value.message_id for item in (*items, *self._outgoing.items)}
            self._commits.fail_all(keep, FrameLost("shed while disconnected (§7.1.1 buffer)"))
            for item in items:
                self._commits.wrote(item.value.message_id, [item.value.message_id])
                await ws.send(item.data, text=True)
                self._remember_sent(item.value)
                self._fold_own(item.value)
        self._attached_before = True

    def _synced_frame(self, received: str | None, welcome: Welcome) -> tuple[str, _dt.datetime]:
        """The last frame the master is known to have from us, and its timestamp."""
        if received:
            for item in self._in_flight.items:
                if item.value.message_id == received:
                    self._last_sync = (received, item.value.timestamp)
                    return self._last_sync
            if received in self._sent_times:
                self._last_sync = (received, self._sent_times[received])
                return self._last_sync
            if self._last_sync is not None and self._last_sync[0] == received:
                return self._last_sync
            return (received, welcome.payload.session.created_at)
        return ("", welcome.payload.session.created_at)

    def _history(
        self,
        items: list[BufferedItem[Frame]],
        status: BufferStatus,
        synced: tuple[str, _dt.datetime],
    ) -> tuple[History, list[BufferedItem[Frame]]]:
        """One ``session.history`` that fits in the master's max frame size."""

        def build(kept: list[BufferedItem[Frame]], extra_lost: int) -> History:
            status_ = status
            if extra_lost:
                lost = status.lost_frame_count
                status_ = buffer_status(
                    status.policy_applied,
                    lost_frame_count=None if lost is None else lost + extra_lost,
                    buffer_high_watermark=status.buffer_high_watermark or 0,
                )
            return History(
                payload=HistoryPayload(
                    frames=[msgspec.Raw(item.data) for item in kept],
                    buffer_status=status_,
                    last_sync_timestamp=synced[1],
                    last_message_id=synced[0],
                ),
                **self._envelope(),
            )

        limit = self._max_frame_bytes
        history = build(items, 0)
        if limit is None or len(codec.encode(history)) <= limit:
            return history, items
        # Too big for one frame: shed frames the way the policy would (RING the oldest,
        # DROP the newest) and count them as lost.
        overhead = len(codec.encode(build([], 0))) + 64
        kept = list(items)
        size = sum(item.size + 1 for item in kept)
        while kept and overhead + size > limit:
            shed = kept.pop(0 if status.policy_applied != "DROP" else -1)
            size -= shed.size + 1
        return build(kept, len(items) - len(kept)), kept

    # --- receiving -----------------------------------------------------------------------

    async def _pump(self, ws: ClientConnection) -> None:
        while True:
            try:
                message = await asyncio.wait_for(ws.recv(), self.ack_interval)
            except TimeoutError:
                await self._ack(ws)
                continue
            except ConnectionClosed:
                return
            self._handle(message)
            if self._received_since_ack >= self.ack_every:
                await self._ack(ws)

    def _handle(self, message: str | bytes) -> None:
        try:
            frame = codec.decode(message)
        except ProtocolError:
            self.undecodable_frames += 1
            return
        if isinstance(frame, Ack):
            # notes §16.3: the master committed our frames up to last_message_id
            p = frame.payload
            if p.last_message_id is not None:
                newest = self._commits.acked(p.last_message_id, p.last_seq)
                if newest is not None:
                    self._in_flight.discard_through(lambda sent: sent.message_id == newest)
            return  # a connection frame: neither folded nor yielded
        if frame.seq is not None:
            if frame.seq <= self.view.last_seq:
                return  # already have it
            self._received_since_ack += 1
        elif isinstance(frame, History):
            self._received_since_ack += 1
        elif isinstance(frame, SessionError) and frame.payload.ref_message_id is not None:
            # notes §16.3: it names one of ours; earlier frames are not settled by it
            self._commits.refused(frame)
        if isinstance(frame, Deleted):
            self._deleted = True
        self.view.receive(frame)
        self._push(frame)

    async def _ack(self, ws: ClientConnection) -> None:
        cursor = self.view.last_seq
        self._received_since_ack = 0
        if cursor <= self._acked:
            return
        ack = Ack(payload=AckPayload(last_seq=cursor), **self._envelope())
        with contextlib.suppress(ConnectionClosed):
            await ws.send(codec.encode(ack), text=True)
            self._acked = cursor

    def _push(self, frame: Frame | GenericFrame) -> None:
        self._incoming.append(frame)
        if self._max_queue is not None and len(self._incoming) > self._max_queue:
            self._incoming.popleft()
            self.dropped_frames += 1
        self._incoming_ready.set()

    async def receive(self, timeout: float | None = None) -> Frame | GenericFrame | None:
        """The next frame; None once the stream ended. Raises what ended it abnormally.

        Raises TimeoutError when nothing arrives within ``timeout`` seconds.
        """
        async with asyncio.timeout(timeout):
            while not self._incoming:
                self._incoming_ready.clear()
                await self._incoming_ready.wait()
        item = self._incoming[0]
        if isinstance(item, _End):
            if item.error is not None:
                raise item.error
            return None
        self._incoming.popleft()
        return item

    async def frames(self, *, unpack_histories: bool = True) -> AsyncIterator[Delivered]:
        """Every frame delivered to this client, each as a :class:`Delivered`.

        With ``unpack_histories`` (the default) a ``session.history`` — the backlog of a
        (re)attach, or an agent's reattach history — is yielded frame by frame, each marked
        ``replayed``, so a loop that looks at ``agent.text.delta`` sees the replayed ones
        too; without it the History is yielded whole, as ``async for frame in client`` does.
        Ends like that iteration (raising what ended the stream abnormally).
        """
        while True:
            frame = await self.receive()
            if frame is None:
                return
            if unpack_histories and isinstance(frame, History):
                for inner in _unpacked(frame):
                    yield Delivered(inner, replayed=True, history=frame)
            else:
                yield Delivered(frame)

    def __aiter__(self) -> RawpClient:
        return self

    async def __anext__(self) -> Frame | GenericFrame:
        frame = await self.receive()
        if frame is None:
            raise StopAsyncIteration
        return frame

    # --- sending -------------------------------------------------------------------------

    def envelope(self) -> dict[str, Any]:
        """Envelope fields for a frame built by hand: a new ``message_id``, this session's
        id and the current time (``F.TextDelta(payload=..., **client.envelope())``)."""
        return {
            "message_id": codec.new_message_id(),
            "session_id": self.session_id,
            "timestamp": codec.now(),
        }

    _envelope = envelope

    def _remember_sent(self, frame: Frame) -> None:
        self._sent_times[frame.message_id] = frame.timestamp
        if len(self._sent_times) > _SENT_TIMES:
            self._sent_times.popitem(last=False)

    def _fold_own(self, frame: Frame) -> None:
        # The master echoes a rename to its sender (notes §15.9): that copy, with its seq, is
        # folded in log order. A delete request is not logged at all: the master's cleanup
        # frames and its own session.deleted arrive instead (notes §9, §15.8). Every other
        # frame of ours is folded as it leaves.
        if not isinstance(frame, Renamed | Deleted):
            self.view.fold(frame, self.role)

    async def send(self, frame: Frame) -> int:
        """Send ``frame`` and wait until the master committed it; returns its seq.

        notes §16.3. The seq is the one the master's ``connection.ack`` names: the frame's own
        when it was the last of ours in its delivery step (always so when each send is
        awaited), else a later one of ours; a frame carried by a reattach history gets the
        history's seq. While disconnected the frame waits in the outgoing buffer and this
        waits for the reattach. Raises :class:`FrameRefused` when the master refuses it,
        :class:`FrameLost` when the buffer sheds it, and what :meth:`post` raises.
        """
        await self.post(frame)
        return await self.committed(frame)

    async def committed(self, frame: Frame | str) -> int:
        """Wait until the master committed ``frame`` (or the frame of that message id), as
        :meth:`send` does; for frames sent with :meth:`post` or a typed helper."""
        message_id = frame if isinstance(frame, str) else frame.message_id
        future = self._commits.futures.get(message_id)
        if future is not None:
            # shielded: a caller that gives up must not cancel the answer for the others
            return await asyncio.shield(future)
        outcome = self._commits.settled.get(message_id)
        if isinstance(outcome, int):
            return outcome  # the answer came before this call
        if outcome is not None:
            raise outcome
        raise ClientError(f"frame {message_id} was not sent by this client (or long ago)")

    @property
    def in_flight(self) -> int:
        """Frames written to a socket whose commit the master has not acknowledged yet."""
        return len(self._in_flight)

    @property
    def unsettled(self) -> int:
        """Frames sent or buffered that the master has not yet committed or refused."""
        return len(self._commits.futures)

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every frame sent so far is committed; raises the first refusal."""
        async with asyncio.timeout(timeout):
            for future in list(self._commits.futures.values()):
                await asyncio.shield(future)

    async def post(self, frame: FrameT) -> FrameT:
        """Send ``frame`` now, or buffer it until the next reattach, without waiting for the
        master's answer (:meth:`committed` waits for it). Returns ``frame``.

        Raises :class:`~protocol.errors.DirectionError` for a type this role may not send,
        :class:`~protocol.errors.InvalidFrame` for a frame larger than the master accepts and
        :class:`ClientClosed` after :meth:`close` or the session's end.
        """
        if self._closing:
            raise ClientClosed("this client is closed; nothing more can be sent")
        if frame.type not in allowed_types(self.role) or frame.type.startswith("connection."):
            raise DirectionError(f"a {self.role} may not send {frame.type} (notes §4)")
        data = codec.encode(frame)
        if self._max_frame_bytes is not None and len(data) > self._max_frame_bytes:
            raise InvalidFrame(
                f"{frame.type} is {len(data)} bytes; the master accepts {self._max_frame_bytes}"
            )
        async with self._send_lock:
            # tracked under the lock: a reattach in progress (which holds it) settles only
            # what was sent before it
            self._commits.track(frame.message_id)
            ws = self._ws
            if self._live and ws is not None:
                try:
                    self._commits.wrote(frame.message_id, [frame.message_id])
                    await ws.send(data, text=True)
                except ConnectionClosed:
                    pass  # the reader will notice; this frame waits in the buffer
                else:
                    self._in_flight.push(data, frame)
                    self._remember_sent(frame)
                    self._fold_own(frame)
                    return frame
            if self.role == "client" and _is_request(frame):
                # A delete request or a fatal error starts the master's termination procedure
                # only when it arrives live (notes §9): it follows the history, never in it.
                self._deferred.append(BufferedItem(data, frame))
            else:
                self._outgoing.push(data, frame)
        return frame

    # --- typed helpers: client (agent) ---------------------------------------------------

    async def turn_start(
        self, turn_id: str | None = None, *, turn_index: int | None = None, mode: str | None = None
    ) -> TurnStart:
        """§7.5.1 ``session.turn.start``; the id (UUID v4) and index are chosen if not given."""
        if turn_index is None:
            turn_index = max(self._turn_index, self.view.state.last_turn_index) + 1
        self._turn_index = max(self._turn_index, turn_index)
        payload = TurnStartPayload(
            turn_id=turn_id or str(uuid.uuid4()), turn_index=turn_index, mode=mode
        )
        return await self.post(TurnStart(payload=payload, **self._envelope()))

    async def turn_end(
        self,
        turn_id: str,
        stop_reason: Literal[
            "end_turn", "max_tokens", "cancelled", "error", "tool_use", "awaiting_input"
        ] = "end_turn",
        *,
        tool_invocation_count: int | None = None,
    ) -> TurnEnd:
        """§7.5.2 ``session.turn.end`` (send :meth:`usage` right after it)."""
        payload = TurnEndPayload(
            turn_id=turn_id, stop_reason=stop_reason, tool_invocation_count=tool_invocation_count
        )
        return await self.post(TurnEnd(payload=payload, **self._envelope()))

    async def usage(
        self,
        *,
        input_tokens: int,
        output_tokens: int,
        cost_used: float = 0.0,
        cost_limit: float = -1,
        cost_unit: str = "USD",
        messages_used: int = 0,
        messages_limit: int = -1,
        time_to_reset: str = "PT5H",
        turn_id: str | None = None,
        cache_read_tokens: int | None = None,
        cache_write_tokens: int | None = None,
        thinking_tokens: int | None = None,
        context_window: ContextWindow | None = None,
    ) -> Usage:
        """§7.3.1 ``session.usage``."""
        payload = UsagePayload(
            token_usage=TokenUsage(
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cache_read_tokens=cache_read_tokens,
                cache_write_tokens=cache_write_tokens,
                thinking_tokens=thinking_tokens,
            ),
            cost_usage=CostUsage(limit=cost_limit, used=cost_used, unit=cost_unit),
            message_usage=MessageUsage(limit=messages_limit, used=messages_used, unit="COUNT"),
            time_to_reset=time_to_reset,
            turn_id=turn_id,
            context_window=context_window,
        )
        return await self.post(Usage(payload=payload, **self._envelope()))

    async def text_delta(self, block_id: str, delta: str) -> TextDelta:
        """A piece of streamed text."""
        payload = TextDeltaPayload(block_id=block_id, delta=delta)
        return await self.post(TextDelta(payload=payload, **self._envelope()))

    async def text_done(self, block_id: str, text: str | None = None) -> TextDone:
        """The text block is complete (``text``: the whole text, optional)."""
        payload = TextDonePayload(block_id=block_id, text=text)
        return await self.post(TextDone(payload=payload, **self._envelope()))

    async def thinking_delta(self, block_id: str, delta: str) -> ThinkingDelta:
        """A piece of streamed thinking."""
        payload = ThinkingDeltaPayload(block_id=block_id, delta=delta)
        return await self.post(ThinkingDelta(payload=payload, **self._envelope()))

    async def thinking_done(self, block_id: str) -> ThinkingDone:
        """The thinking block is complete."""
        payload = ThinkingDonePayload(block_id=block_id)
        return await self.post(ThinkingDone(payload=payload, **self._envelope()))

    async def tool_request(
        self, call_id: str, tool_name: str, input: dict[str, Any]
    ) -> ToolRequest:
        """The agent calls a tool."""
        payload = ToolRequestPayload(call_id=call_id, tool_name=tool_name, input=input)
        return await self.post(ToolRequest(payload=payload, **self._envelope()))

    async def tool_result(
        self,
        call_id: str,
        status: Literal["ok", "error", "cancelled"] = "ok",
        output: Any = None,
    ) -> ToolResult:
        """The result of one tool call."""
        payload = ToolResultPayload(call_id=call_id, status=status, output=output)
        return await self.post(ToolResult(payload=payload, **self._envelope()))

    async def interaction_request(
        self,
        interaction_id: str,
        kind: Literal["confirmation", "choice", "input"],
        prompt: str,
        options: list[Any] | None = None,
    ) -> InteractionRequest:
        """The agent waits for a person (an edge answers with an interaction response)."""
        payload = InteractionRequestPayload(
            interaction_id=interaction_id, kind=kind, prompt=prompt, options=options
        )
        return await self.post(InteractionRequest(payload=payload, **self._envelope()))

    async def interaction_cancel(
        self, interaction_id: str, reason: str | None = None
    ) -> InteractionCancel:
        """Withdraw a pending interaction (notes §16.4): the agent timed out or moved on."""
        payload = InteractionCancelPayload(interaction_id=interaction_id, reason=reason)
        return await self.post(InteractionCancel(payload=payload, **self._envelope()))

    async def agent_state(
        self, state: Literal["idle", "thinking", "tool_calling", "responding", "awaiting_input"]
    ) -> AgentState:
        """What the agent is doing."""
        payload = AgentStatePayload(state=state)
        return await self.post(AgentState(payload=payload, **self._envelope()))

    async def compacted(
        self,
        summary: str,
        previous_token_count: int,
        current_token_count: int,
        *,
        trigger: Literal["auto", "manual", "requested"] = "auto",
        preserved_elements: PreservedElements | None = None,
    ) -> Compacted:
        """§7.2.1 ``session.compacted``."""
        payload = CompactedPayload(
            summary=summary,
            previous_token_count=previous_token_count,
            current_token_count=current_token_count,
            trigger=trigger,
            preserved_elements=preserved_elements,
        )
        return await self.post(Compacted(payload=payload, **self._envelope()))

    # --- typed helpers: both roles ------------------------------------------------------

    async def rename(self, name: str) -> Renamed:
        """§7.6.1 ``session.renamed`` (``renamed_by`` is this role)."""
        payload = RenamedPayload(
            session_id=self.session_id,
            name=name,
            renamed_by=self.role,
            previous_name=self.view.name or None,
        )
        return await self.post(Renamed(payload=payload, **self._envelope()))

    async def delete(
        self,
        reason: Literal["user_request", "master_request", "timeout", "error"] = "user_request",
    ) -> Deleted:
        """§7.7.1 ``session.deleted``: asks the master to end the session (notes §9)."""
        payload = DeletedPayload(session_id=self.session_id, reason=reason, deleted_by=self.role)
        return await self.post(Deleted(payload=payload, **self._envelope()))

    async def error(self, error_code: str, message: str, *, fatal: bool = False) -> SessionError:
        """§7.4.1 ``session.error`` (``fatal`` starts the termination procedure)."""
        payload = SessionErrorPayload(error_code=error_code, message=message, fatal=fatal)
        return await self.post(SessionError(payload=payload, **self._envelope()))

    # --- typed helpers: edge ------------------------------------------------------------

    async def user_message(self, text: str) -> UserMessage:
        """User input for the agent."""
        payload = UserMessagePayload(text=text)
        return await self.post(UserMessage(payload=payload, **self._envelope()))

    async def interaction_response(self, interaction_id: str, response: Any) -> InteractionResponse:
        """Answer one pending interaction."""
        payload = InteractionResponsePayload(interaction_id=interaction_id, response=response)
        return await self.post(InteractionResponse(payload=payload, **self._envelope()))

    async def cancel(self, turn_id: str | None = None) -> Cancel:
        """Ask the agent to stop the current turn."""
        payload = CancelPayload(turn_id=turn_id)
        return await self.post(Cancel(payload=payload, **self._envelope()))


# --- helpers -------------------------------------------------------------------------------


def _unpacked(history: History) -> list[Frame | GenericFrame]:
    """The frames inside ``history``, histories inside it opened too (a backlog holds the
    agent's logged reattach histories as entries)."""
    frames: list[Frame | GenericFrame] = []
    for raw in history.payload.frames:
        try:
            inner = codec.decode(raw)
        except ProtocolError:
            continue  # what the master logged was checked; tolerate entries of older builds
        if isinstance(inner, History):
            frames.extend(_unpacked(inner))
        else:
            frames.append(inner)
    return frames


def _create_spec(create: CreateSpec | str | bool | None) -> CreateSpec | None:
    if create is None or create is False:
        return None
    if create is True:
        return CreateSpec()
    if isinstance(create, str):
        return CreateSpec(name=create)
    return create


def _is_request(frame: Frame) -> bool:
    """A frame that asks the master to act (notes §9) rather than one the log keeps."""
    if isinstance(frame, Deleted):
        return True
    return isinstance(frame, SessionError) and frame.payload.fatal


def _refusal(code: int | None, reason: str) -> HandshakeError | None:
    """The error a close code stands for when reconnecting cannot help (notes §14)."""
    if code is None:
        return None
    cls = _REFUSALS.get(code)
    if cls is None:
        return None
    return cls(reason or f"closed with {code}")


def _merge_status(earlier: BufferStatus, later: BufferStatus) -> BufferStatus:
    """The status of two buffers' worth of frames sent as one history."""
    lost_a, lost_b = earlier.lost_frame_count, later.lost_frame_count
    lost = None if lost_a is None or lost_b is None else lost_a + lost_b
    return buffer_status(
        later.policy_applied,
        lost_frame_count=lost,
        buffer_high_watermark=max(
            earlier.buffer_high_watermark or 0, later.buffer_high_watermark or 0
        ),
        truncated=earlier.truncated or later.truncated,
    )
