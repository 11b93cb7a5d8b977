"""Ack bookkeeping, sans I/O: which of our frames the master has committed or refused."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Final, Generic, Protocol, TypeVar

from .client_errors import ClientError, FrameRefused
from .frames import SessionError

__all__ = ["CommitLedger", "Settleable"]

_SETTLED_KEPT: Final = 4096  # outcomes kept for a committed() that comes after the answer


class Settleable(Protocol):
    """What the ledger needs of a future: an ``asyncio.Future[int]`` is one."""

    def done(self) -> bool:
        """True once settled."""
        ...

    def set_result(self, result: int, /) -> None:
        """Settle with the seq the frame was committed at."""
        ...

    def set_exception(self, exception: BaseException, /) -> None:
        """Settle with the error that refused or lost the frame."""
        ...


FutureT = TypeVar("FutureT", bound=Settleable)


class CommitLedger(Generic[FutureT]):
    """Which of our frames the master has committed or refused (notes §16.3), sans I/O.

    ``_wire`` lists, in the order they were written to the current connection, the frames the
    master has not acknowledged yet: a live frame carries itself, a ``session.history`` the
    frames inside it. A cumulative ack settles the front of that list up to the frame it
    names; a refusal settles the frame it names. Each tracked frame has a future that
    :meth:`RawpClient.send` and :meth:`RawpClient.committed` wait on, made by ``new_future``
    (the I/O adapter's event loop makes them; this class only settles them).
    """

    def __init__(self, new_future: Callable[[], FutureT]) -> None:
        self._new_future = new_future
        self.futures: dict[str, FutureT] = {}
        self._wire: OrderedDict[str, list[str]] = OrderedDict()
        # How recently settled frames ended, so a late committed() still gets the answer.
        self.settled: OrderedDict[str, int | ClientError] = OrderedDict()

    def track(self, message_id: str) -> FutureT:
        """The future of ``message_id``'s outcome (made on its first call)."""
        future = self.futures.get(message_id)
        if future is None:
            future = self._new_future()
            self.futures[message_id] = future
        return future

    def wrote(self, wire_id: str, carried: list[str]) -> None:
        """``wire_id`` left on the socket carrying the frames ``carried`` (written again: it
        now comes after everything written before, as on the wire)."""
        self._wire.pop(wire_id, None)
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
