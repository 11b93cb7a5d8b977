"""The reattach history (§7.1.1), sans I/O: one ``session.history`` that fits in a frame."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from typing import Any

import msgspec

from . import codec
from .buffers import BufferedItem, buffer_status
from .frames import BufferStatus, Frame, GenericFrame, History, HistoryPayload

__all__ = ["fitting_history"]


def fitting_history(
    items: list[BufferedItem[Frame | GenericFrame]],
    status: BufferStatus,
    synced: tuple[str, _dt.datetime],
    *,
    max_frame_bytes: int | None,
    envelope: Callable[[], dict[str, Any]],
) -> tuple[History, list[BufferedItem[Frame | GenericFrame]]]:
    """One ``session.history`` of ``items`` that fits in ``max_frame_bytes``, and the items it
    carries; ``synced`` is the last frame the master has from us (message id, timestamp)."""

    def build(kept: list[BufferedItem[Frame | GenericFrame]], extra_lost: int) -> History:
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
            **envelope(),
        )

    limit = max_frame_bytes
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
