"""An asyncio RAWP client for agents (role ``client``) and UIs (role ``edge``).

Spec: notes §2 (transport), §3 (envelope), §5 (hello, welcome, resume), §7 (buffers and
cursors), §15.4–§15.6; RAWP 1.0.2 §7.1.1 (``session.history``) and §7.8 (finalization). This
module and its parts are the only ones of :mod:`protocol` that do I/O (asyncio, websockets),
and a thin layer: :class:`RawpClient` is :class:`~protocol.client_core.ClientCore` (every
decision, sans I/O) with its typed helpers (:mod:`protocol.client_sends`) plus a socket, a
reconnect loop and an incoming queue: :mod:`protocol.client_link` (the connection's life),
:mod:`protocol.client_connect` (opening it), :mod:`protocol.client_incoming` (the incoming
stream) and :mod:`protocol.client_status` (the status); this module is the public API. The
core builds on :mod:`protocol.commits` (ack bookkeeping), :mod:`protocol.outgoing` (the
buffer), :mod:`protocol.reconnect` (backoff, refusals), :mod:`protocol.snapshot` (persistence)
and :mod:`protocol.view` (what arrives, folded).

Use::

    async with RawpClient(url, session_id, role="client", token=key, create=True) as client:
        turn = await client.turn_start()
        await client.text_delta("b1", "Hello")
        ...
        async for frame in client:  # typed frames: the welcome, the backlog, live frames
            ...

What the client does on its own (the handshake, acks, commits, reconnects, the outgoing buffer,
persistence, its own frames) is described, and decided, in :mod:`protocol.client_core`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import ssl
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from websockets.exceptions import ConnectionClosed

from .client_errors import (
    ClientClosed,
    ClientError,
    ConnectRefused,
    FrameLost,
    FrameRefused,
    ReconnectExhausted,
)
from .client_frames import DEFAULT_BUFFER, Delivered, create_spec, unpacked
from .client_http import ContinuedSession, continue_session
from .client_link import ClientLink, WakeCallback
from .frames import BufferRequest, CreateSpec, Frame, GenericFrame, History, Role
from .outgoing import SavedBuffer
from .reconnect import Backoff, ConnectionStatus
from .resends import DEFAULT_RESEND_ROUNDS
from .snapshot import ClientSnapshot, load_snapshot, save_snapshot
from .view import SessionView

# The client's names, wherever they are defined: this module is where callers import them.
__all__ = [
    "DEFAULT_BUFFER",
    "Backoff",
    "ClientClosed",
    "ClientError",
    "ClientSnapshot",
    "ConnectRefused",
    "ConnectionStatus",
    "ContinuedSession",
    "Delivered",
    "FrameLost",
    "FrameRefused",
    "RawpClient",
    "ReconnectExhausted",
    "SavedBuffer",
    "WakeCallback",
    "continue_session",
    "load_snapshot",
    "run",
    "save_snapshot",
]

T = TypeVar("T")
FrameT = TypeVar("FrameT", bound=Frame | GenericFrame)


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` in a new event loop (for command-line tools built on the client)."""
    return asyncio.run(coroutine)


# --- the client ----------------------------------------------------------------------------


class RawpClient(ClientLink):
    """One participant's connection to one session, kept alive across drops.

    ``role`` ``"client"`` is the agent runtime, ``"edge"`` a UI or observer. ``create`` (client
    only) creates the session if it does not exist: a :class:`CreateSpec`, a name, or True.
    ``buffer`` is the reattach buffer asked of the master and the bound of this client's own
    outgoing buffer. ``from_start`` makes the first connection ask for the whole log as its
    backlog. ``state_path`` persists the client (see :meth:`save`) and, when the file exists,
    restores it. ``resend_rounds`` bounds the re-sending after ``store_unavailable`` on one
    connection before the client reattaches instead (None: never; 0: no re-sending, the
    refusals reach the caller; see :mod:`protocol.resends`). ``presence=False`` asks for no
    ``session.presence`` frames (a viewer that shows no roster: docs/protocol.md §5 item 12);
    ``view.presence`` then says so and ``view.participants`` stays empty.
    ``accepts_input_during_turn=True`` (a client that steers) gets every ``user.message`` at
    once, even during its turn; otherwise the master holds one that arrives while the agent
    runs for up to 3 s and then refuses it ``busy`` (an edge's post raises
    :class:`FrameRefused` with ``error.error_code == "busy"``; notes §17.3).
    ``on_wake`` is called with each ``session.wake`` (notes §17.5: a revisit asked for with
    :meth:`revisit` came due), live or in the backlog of a reattach, once each; it may be a
    coroutine function (run as a task, so it can start a turn).
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
        resend_rounds: int | None = DEFAULT_RESEND_ROUNDS,
        presence: bool = True,
        accepts_input_during_turn: bool = False,
        on_wake: WakeCallback | None = None,
    ) -> None:
        if role not in ("client", "edge"):
            raise ValueError(f"role must be 'client' or 'edge', got {role!r}")
        if create and role != "client":
            raise ValueError("only a client (agent) may create its session")
        if ack_every < 1 or ack_interval <= 0:
            raise ValueError("ack_every must be >= 1 and ack_interval > 0")
        super().__init__(
            url,
            session_id,
            role=role,
            token=token,
            create=create_spec(create),
            buffer_request=buffer or DEFAULT_BUFFER,
            backoff=backoff,
            ack_every=ack_every,
            ack_interval=ack_interval,
            from_start=from_start,
            participant_id=participant_id,
            view=view,
            state_path=Path(state_path) if state_path is not None else None,
            open_timeout=open_timeout,
            ping_interval=ping_interval,
            ping_timeout=ping_timeout,
            in_flight_bytes=in_flight_bytes,
            max_queue=max_queue,
            on_status=on_status,
            rng=rng,
            ssl_context=ssl_context,
            resend_rounds=resend_rounds,
            presence=presence,
            accepts_input_during_turn=accepts_input_during_turn,
            on_wake=on_wake,
        )
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

    def save(self, path: str | os.PathLike[str] | None = None) -> Path:
        """Persist this client atomically to ``path`` (default: ``state_path``)."""
        target = Path(path) if path is not None else self.state_path
        if target is None:
            raise ValueError("no path given and the client has no state_path")
        save_snapshot(target, self.snapshot())
        return target

    # --- what callers read ---------------------------------------------------------------

    @property
    def status(self) -> ConnectionStatus:
        """Where the connection is."""
        return self._status.status

    @property
    def connected(self) -> bool:
        """True while frames leave on a live socket."""
        return self._live

    async def wait_status(self, *statuses: ConnectionStatus, timeout: float | None = None) -> None:
        """Wait until the status is one of ``statuses`` (TimeoutError after ``timeout``)."""
        await self._status.wait(statuses, timeout)

    def add_status_callback(
        self, callback: Callable[[ConnectionStatus], None]
    ) -> Callable[[], None]:
        """Call ``callback(status)`` on every connection status change (besides
        ``on_status``); returns a function that removes it again."""
        return self._status.add_callback(callback)

    def add_wake_callback(self, callback: WakeCallback) -> Callable[[], None]:
        """Call ``callback(wake)`` with each ``session.wake`` (besides ``on_wake``); returns
        a function that removes it again."""
        self._wake_callbacks.append(callback)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._wake_callbacks.remove(callback)

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
        self._stop_resending()
        self._autosave()
        self._end(None)

    def abort_connection(self) -> None:
        """Drop the current connection as a network failure would (no closing handshake).

        For tests and chaos drills: the client notices, finalizes its view and reconnects.
        """
        ws = self._ws
        if ws is not None:
            ws.transport.abort()

    # --- receiving -----------------------------------------------------------------------

    async def receive(self, timeout: float | None = None) -> Frame | GenericFrame | None:
        """The next frame; None once the stream ended. Raises what ended it abnormally.

        Raises TimeoutError when nothing arrives within ``timeout`` seconds.
        """
        return await self._incoming.next(timeout)

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
                for inner in unpacked(frame):
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

    async def send(self, frame: Frame | GenericFrame) -> int:
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

    async def committed(self, frame: Frame | GenericFrame | str) -> int:
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
        data = self._encode_outgoing(frame)
        async with self._send_lock:
            # tracked under the lock: a reattach in progress (which holds it) settles only
            # what was sent before it
            self._commits.track(frame.message_id)
            ws = self._ws
            # behind frames waiting to be re-sent (§7), a frame waits too (in order)
            if self._live and ws is not None and not self.resend_due:
                try:
                    self._commits.wrote(frame.message_id, [frame.message_id])
                    await ws.send(data, text=True)
                except ConnectionClosed:
                    pass  # the reader will notice; this frame waits in the buffer
                else:
                    self._sent_live(data, frame)
                    return frame
            self._hold(data, frame)
        return frame
