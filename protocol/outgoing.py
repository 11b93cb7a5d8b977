"""The client's outgoing buffer: frames made while disconnected, kept across a restart (§7.1.1)."""

from __future__ import annotations

import msgspec

from . import codec
from .buffers import BoundedBuffer, BufferedItem, buffer_status
from .frames import BufferStatus, Frame, GenericFrame, Policy

__all__ = ["OutgoingBuffer", "SavedBuffer", "merge_status"]


class SavedBuffer(msgspec.Struct, kw_only=True):
    """The outgoing buffer as persisted, counters included."""

    policy: Policy
    capacity_bytes: int
    frames: list[msgspec.Raw] = msgspec.field(default_factory=list)
    lost_frame_count: int = 0
    high_watermark: int = 0


class OutgoingBuffer:
    """Frames made while disconnected: a BoundedBuffer that survives a restart exactly.

    :class:`BoundedBuffer` has no restore; a restored buffer re-pushes its frames and adds
    the lost count, and this wrapper keeps the two facts re-pushing cannot: the high watermark
    and, for DROP, that every later frame is lost once one was.
    """

    def __init__(self, policy: Policy, capacity_bytes: int) -> None:
        self.buffer: BoundedBuffer[Frame | GenericFrame] = BoundedBuffer(policy, capacity_bytes)
        self._watermark_floor = 0
        self._drop_closed = False

    def push(self, data: bytes, frame: Frame | GenericFrame) -> bool:
        if self._drop_closed:
            self.buffer.add_lost(1)
            return False
        return self.buffer.push(data, frame)

    @property
    def items(self) -> list[BufferedItem[Frame | GenericFrame]]:
        return self.buffer.items

    def status(self) -> BufferStatus:
        status = self.buffer.status()
        if self._watermark_floor > (status.buffer_high_watermark or 0):
            status = msgspec.structs.replace(status, buffer_high_watermark=self._watermark_floor)
        return status

    def take(self) -> tuple[list[BufferedItem[Frame | GenericFrame]], BufferStatus]:
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
    def restore(cls, saved: SavedBuffer) -> OutgoingBuffer:
        outgoing = cls(saved.policy, saved.capacity_bytes)
        for raw in saved.frames:
            frame = codec.decode(raw)
            if isinstance(frame, Frame | GenericFrame):
                outgoing.buffer.push(bytes(raw), frame)
        outgoing.buffer.add_lost(saved.lost_frame_count)
        outgoing._watermark_floor = saved.high_watermark
        outgoing._drop_closed = saved.policy == "DROP" and saved.lost_frame_count > 0
        return outgoing


def merge_status(earlier: BufferStatus, later: BufferStatus) -> BufferStatus:
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
