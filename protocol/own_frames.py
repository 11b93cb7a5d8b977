"""Our frames until the master has them, sans I/O: buffered, in flight or deferred (§7.1.1).

:class:`OwnFrames` holds the three places a frame of ours waits — the outgoing buffer (made
while disconnected), the in-flight window (written to a socket, not yet acknowledged) and the
requests that must arrive live, after the reattach history (notes §9) — plus the send times of
recent frames, which a reattach history's ``last_sync_timestamp`` names. The client core
decides when frames move; this says where they are.
"""

from __future__ import annotations

import datetime as _dt
from collections import OrderedDict
from typing import Final

import msgspec

from . import codec
from .buffers import BoundedBuffer, BufferedItem
from .frames import BufferRequest, BufferStatus, Frame, GenericFrame
from .outgoing import OutgoingBuffer, merge_status
from .snapshot import ClientSnapshot

__all__ = ["OwnFrames"]

_SENT_TIMES: Final = 4096  # message id -> timestamp of recent own frames (last_sync_timestamp)


class OwnFrames:
    """Where each frame of ours waits until the master has it (see the module docstring).

    ``in_flight_bytes`` bounds the in-flight window (RING; None: the buffer's capacity).
    """

    def __init__(self, buffer_request: BufferRequest, in_flight_bytes: int | None) -> None:
        self.outgoing = OutgoingBuffer(buffer_request.policy, buffer_request.capacity_bytes)
        window = in_flight_bytes if in_flight_bytes is not None else buffer_request.capacity_bytes
        self.in_flight: BoundedBuffer[Frame | GenericFrame] = BoundedBuffer("RING", max(window, 0))
        self.deferred: list[
            BufferedItem[Frame | GenericFrame]
        ] = []  # requests that must not ride a history
        self.pending_status: BufferStatus | None = None  # a history's status that never left
        self.last_sync: tuple[str, _dt.datetime] | None = None
        self._sent_times: OrderedDict[str, _dt.datetime] = OrderedDict()

    def restore(self, snapshot: ClientSnapshot) -> None:
        """Take over the frames (and the last synced frame) ``snapshot`` saved."""
        if snapshot.last_sync_message_id is not None and snapshot.last_sync_timestamp:
            self.last_sync = (snapshot.last_sync_message_id, snapshot.last_sync_timestamp)
        self.outgoing = OutgoingBuffer.restore(snapshot.outgoing)
        for raw in snapshot.in_flight:
            frame = codec.decode(raw)
            if isinstance(frame, Frame | GenericFrame):
                self.in_flight.push(bytes(raw), frame)
        for raw in snapshot.deferred:
            frame = codec.decode(raw)
            if isinstance(frame, Frame | GenericFrame):
                self.deferred.append(BufferedItem(bytes(raw), frame))

    def saved_in_flight(self) -> list[msgspec.Raw]:
        """The in-flight window as a snapshot keeps it."""
        return [msgspec.Raw(item.data) for item in self.in_flight.items]

    def saved_deferred(self) -> list[msgspec.Raw]:
        """The deferred requests as a snapshot keeps them."""
        return [msgspec.Raw(item.data) for item in self.deferred]

    # --- what is where -----------------------------------------------------------------

    def unsettled_ids(self) -> list[str]:
        """Our frames not yet known committed, in the order they were made."""
        items = [*self.in_flight.items, *self.outgoing.items, *self.deferred]
        return [item.value.message_id for item in items]

    def window_ids(self) -> list[str]:
        """The message ids of the in-flight window, oldest first."""
        return [item.value.message_id for item in self.in_flight.items]

    def buffered_ids(self) -> set[str]:
        """The message ids in the outgoing buffer."""
        return {item.value.message_id for item in self.outgoing.items}

    # --- frames moving -----------------------------------------------------------------

    def remember_sent(self, frame: Frame | GenericFrame) -> None:
        """``frame`` left on a socket: keep its timestamp for a later ``last_sync_timestamp``."""
        self._sent_times[frame.message_id] = frame.timestamp
        if len(self._sent_times) > _SENT_TIMES:
            self._sent_times.popitem(last=False)

    def sent_live(self, data: bytes, frame: Frame | GenericFrame) -> None:
        """``frame`` left on a live socket: in flight until the master acknowledges it."""
        self.in_flight.push(data, frame)
        self.remember_sent(frame)

    def hold(self, data: bytes, frame: Frame | GenericFrame, *, after_history: bool) -> None:
        """No live socket: keep ``frame`` for the next reattach, in the outgoing buffer or
        (``after_history``: a request that must arrive live) behind the history."""
        if after_history:
            self.deferred.append(BufferedItem(data, frame))
        else:
            self.outgoing.push(data, frame)

    def acknowledged(self, message_id: str) -> None:
        """The master committed our frames up to ``message_id``: they leave the window."""
        self.in_flight.discard_through(lambda sent: sent.message_id == message_id)

    def synced_frame(
        self, received: str | None, created_at: _dt.datetime
    ) -> tuple[str, _dt.datetime]:
        """The last frame the master is known to have from us (``received``), and its
        timestamp (the session's ``created_at`` when we cannot know it)."""
        if received:
            for item in self.in_flight.items:
                if item.value.message_id == received:
                    self.last_sync = (received, item.value.timestamp)
                    return self.last_sync
            if received in self._sent_times:
                self.last_sync = (received, self._sent_times[received])
                return self.last_sync
            if self.last_sync is not None and self.last_sync[0] == received:
                return self.last_sync
            return (received, created_at)
        return ("", created_at)

    def take_for_reattach(
        self, received: str | None
    ) -> tuple[list[BufferedItem[Frame | GenericFrame]], BufferStatus]:
        """What a reattach sends: the window after ``received`` (what the welcome says the
        master has), then the buffered frames (in flight from now on), with their status."""
        if received:
            self.in_flight.discard_through(lambda frame: frame.message_id == received)
        resend = self.in_flight.items
        buffered, status = self.outgoing.take()
        if self.pending_status is not None:
            status = merge_status(self.pending_status, status)
        for item in buffered:  # from now on they are in flight: sent, not known received
            self.in_flight.push(item.data, item.value)
        return [*resend, *buffered], status

    def take_for_resend(
        self, count: int
    ) -> tuple[list[BufferedItem[Frame | GenericFrame]], list[BufferedItem[Frame | GenericFrame]]]:
        """A re-send round (§7): the last ``count`` frames of the window, and the frames that
        waited behind them (buffered and deferred), in flight from now on."""
        resend = self.in_flight.items[len(self.in_flight) - count :] if count else []
        waited, _status = self.outgoing.take()
        deferred, self.deferred = self.deferred, []
        fresh = [*waited, *deferred]
        for item in fresh:
            self.in_flight.push(item.data, item.value)
        return resend, fresh
