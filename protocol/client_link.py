"""The life of the client's connection (part of the asyncio adapter, under RawpClient).

:class:`ClientLink` is the client core (:class:`~protocol.client_core.ClientCore` with its
typed helpers) plus one websockets connection at a time: dialling with the backoff, the hello
and welcome, the backlog and the reattach writes, the reader loop with its acks and the §7
re-send rounds, and reconnecting after a drop until a refusal, a normal end or ``close``.
:class:`~protocol.client.RawpClient` is this plus the public API callers use.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import random
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from . import codec
from .client_connect import dial, open_socket, read_welcome
from .client_errors import ClientClosed, ClientError
from .client_frames import wakes_in
from .client_incoming import Incoming
from .client_sends import TypedSends
from .client_status import StatusWatch
from .errors import HandshakeError
from .frames import BufferRequest, CreateSpec, Frame, GenericFrame, Role, Wake
from .reconnect import Backoff, ConnectionStatus, refusal
from .snapshot import save_snapshot
from .view import SessionView

__all__ = ["ClientLink", "WakeCallback"]

log = logging.getLogger("rawp.client")


def _new_commit_future() -> asyncio.Future[int]:
    """A future for the commit ledger, on the running loop."""
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    # Nobody may await it (a typed helper's frame): the refusal also reaches the stream as a
    # session.error, so an unread exception is not worth a warning.
    future.add_done_callback(_retrieve)
    return future


WakeCallback = Callable[[Wake], object]
"""What ``on_wake`` is: called with each ``session.wake``; may return an awaitable."""


async def _awaited(result: Awaitable[object]) -> None:
    try:
        await result
    except Exception:
        log.exception("an on_wake callback failed")


def _retrieve(future: asyncio.Future[int]) -> None:
    if not future.cancelled():
        future.exception()


class ClientLink(TypedSends[asyncio.Future[int]]):
    """The client core over one websockets connection at a time (see the module docstring);
    :class:`~protocol.client.RawpClient` checks the arguments and hands them on."""

    def __init__(
        self,
        url: str,
        session_id: str,
        *,
        role: Role,
        token: str,
        create: CreateSpec | None,
        buffer_request: BufferRequest,
        backoff: Backoff | None,
        ack_every: int,
        ack_interval: float,
        from_start: bool,
        participant_id: str | None,
        view: SessionView | None,
        state_path: Path | None,
        open_timeout: float,
        ping_interval: float | None,
        ping_timeout: float | None,
        in_flight_bytes: int | None,
        max_queue: int | None,
        on_status: Callable[[ConnectionStatus], None] | None,
        rng: random.Random | None,
        ssl_context: ssl.SSLContext | None,
        resend_rounds: int | None,
        presence: bool = True,
        accepts_input_during_turn: bool = False,
        on_wake: WakeCallback | None = None,
    ) -> None:
        super().__init__(
            url,
            session_id,
            role=role,
            buffer_request=buffer_request,
            in_flight_bytes=in_flight_bytes,
            participant_id=participant_id,
            view=view,
            state_path=state_path,
            new_future=_new_commit_future,
            backoff=backoff,
            resend_rounds=resend_rounds,
            presence=presence,
            accepts_input_during_turn=accepts_input_during_turn,
        )
        self.token = token
        self.create = create
        self.backoff = backoff or Backoff()
        self.ack_every = ack_every
        self.ack_interval = ack_interval
        self.from_start = from_start
        self.open_timeout = open_timeout
        self.ping_interval = ping_interval
        self.ping_timeout = ping_timeout
        self.on_status = on_status
        self.on_wake = on_wake
        self._wake_callbacks: list[WakeCallback] = []
        self._woken: set[str] = set()  # message ids of the wakes told: each is told once
        self._wake_tasks: set[asyncio.Task[None]] = set()
        self.last_connect_error: BaseException | None = None
        self.dropped_frames = 0  # received frames dropped from a full incoming queue
        self._rng = rng
        self._ssl = ssl_context  # wss:// with a private CA; None: the system's defaults
        self._ws: ClientConnection | None = None
        self._live = False
        self._send_lock = asyncio.Lock()
        self._incoming = Incoming(max_queue)
        self._status = StatusWatch()
        self._runner: asyncio.Task[None] | None = None
        self._resender: asyncio.Task[None] | None = None  # §7 re-send rounds (one at a time)
        self._closing = False

    def _autosave(self) -> None:
        if self.state_path is not None:
            with contextlib.suppress(OSError):
                save_snapshot(self.state_path, self.snapshot())

    def _set_status(self, status: ConnectionStatus) -> None:
        self._status.set(status, self.on_status)

    def _end(self, error: BaseException | None) -> None:
        self._commits.fail_all(set(), ClientClosed("the client ended before the master answered"))
        self._incoming.end(error)
        self._set_status(ConnectionStatus.CLOSED)

    async def _run(self, ws: ClientConnection) -> None:
        try:
            while True:
                await self._pump(ws)
                self._live = False
                self._ws = None
                self._stop_resending()  # the reattach carries what waited to be re-sent
                if self._closing:
                    return
                code = ws.close_code
                if self._drop_ends_session(code):
                    self._closing = True
                    self._autosave()
                    self._end(None)
                    return
                refused = refusal(code, ws.close_reason or "")
                if refused is not None:
                    self._closing = True
                    self._autosave()
                    self._end(refused)
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
        return await dial(
            self._open,
            url=self.url,
            backoff=self.backoff,
            first=first,
            max_attempts=max_attempts,
            rng=self._rng,
            set_status=self._set_status,
            record_error=self._record_connect_error,
        )

    def _record_connect_error(self, error: BaseException | None) -> None:
        self.last_connect_error = error

    async def _open(self) -> ClientConnection:
        ws = await open_socket(
            self.url,
            open_timeout=self.open_timeout,
            ping_interval=self.ping_interval,
            ping_timeout=self.ping_timeout,
            ssl_context=self._ssl,
        )
        try:
            sent_resume = await self._hello(ws)
            welcome = await read_welcome(ws, self.open_timeout)
            self._welcomed(welcome, sent_resume)
            self._push(welcome)
            if sent_resume or welcome.payload.resumed:
                # The master queues the backlog right after the welcome (notes §5): fold it
                # before our own history, in the log's order.
                first = await asyncio.wait_for(ws.recv(), self.open_timeout)
                self._handle(first)
            async with self._send_lock:
                for data in self._reattach_writes(welcome):
                    await ws.send(data, text=True)
                self._ws = ws
                self._live = True
        except BaseException:
            ws.transport.abort()
            raise
        self._set_status(ConnectionStatus.CONNECTED)
        self._autosave()
        return ws

    async def _hello(self, ws: ClientConnection) -> bool:
        hello, resumes = self._hello_frame(
            token=self.token, create=self.create, from_start=self.from_start
        )
        await ws.send(codec.encode(hello), text=True)
        return resumes

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
            if self.resend_due and self._resender is None:
                self._resender = asyncio.get_running_loop().create_task(self._resend(ws))
            if self._ack_due(self.ack_every):
                await self._ack(ws)

    def _handle(self, message: str | bytes) -> None:
        frame = self._received(message)
        if frame is not None:
            self._push(frame)
            self._tell_wakes(frame)

    def _tell_wakes(self, frame: Frame | GenericFrame) -> None:
        """Call ``on_wake`` and the wake callbacks for each new ``session.wake`` (notes
        §17.5), live or in a backlog, once each. A callback that fails is logged; one that
        returns an awaitable is run as a task, so it may send (start a turn)."""
        for wake in wakes_in(frame):
            if wake.message_id in self._woken:
                continue
            self._woken.add(wake.message_id)
            for callback in (self.on_wake, *self._wake_callbacks):
                if callback is None:
                    continue
                try:
                    result = callback(wake)
                except Exception:
                    log.exception("an on_wake callback failed")
                    continue
                if inspect.isawaitable(result):
                    task = asyncio.get_running_loop().create_task(_awaited(result))
                    self._wake_tasks.add(task)
                    task.add_done_callback(self._wake_tasks.discard)

    async def _resend(self, ws: ClientConnection) -> None:
        """§7: after ``store_unavailable``, write our frames again from the first refused
        one, in order, with backoff (protocol/resends.py); give up on the connection (drop
        it, so the reattach carries them) when the core says so."""
        try:
            while self.resend_due and self._ws is ws:
                await asyncio.sleep(self._resend_delay(self._rng))
                async with self._send_lock:
                    if self._ws is not ws or not self._live:
                        return
                    writes = self._resend_writes()
                    if writes is None:
                        log.info("the store stays unavailable: reattaching to re-send")
                        ws.transport.abort()
                        return
                    for data in writes:
                        await ws.send(data, text=True)
        except ConnectionClosed:
            pass  # the reader notices; the reattach carries the rest
        finally:
            if self._resender is asyncio.current_task():
                self._resender = None

    def _stop_resending(self) -> None:
        resender, self._resender = self._resender, None
        if resender is not None and not resender.done():
            resender.cancel()

    async def _ack(self, ws: ClientConnection) -> None:
        due = self._ack_frame()
        if due is None:
            return
        data, cursor = due
        with contextlib.suppress(ConnectionClosed):
            await ws.send(data, text=True)
            self._acked = cursor

    def _push(self, frame: Frame | GenericFrame) -> None:
        self.dropped_frames += self._incoming.push(frame)
