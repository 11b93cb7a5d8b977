"""Reattach buffers: RING, DROP and NONE over a byte capacity (RAWP §7.1.1, notes §7, §15.4).

One implementation serves both ends of a reattach:

* the master runs a participant's backlog (every frame it missed, oldest first) through
  :func:`select_backlog` to choose what goes into the ``session.history`` it sends;
* the client library keeps its outgoing frames in a :class:`BoundedBuffer` while it is
  disconnected, drops what ``connection.welcome``'s ``received.last_message_id`` says the master
  already has (:meth:`BoundedBuffer.discard_through`) and sends the rest as its own history.

A frame's size is ``len`` of its encoded envelope bytes. The policies (notes §7, §15.4):

* ``RING`` keeps the longest run of the *newest* frames that fits: each push evicts the oldest
  frames until the new one fits. A frame larger than the capacity evicts everything and is
  itself lost (keeping older frames would leave a gap before the newest).
* ``DROP`` keeps the longest run of the *oldest* frames that fits: once one frame does not fit,
  that frame and every later one are lost, so there is never a gap inside what is kept.
* ``NONE`` keeps nothing: every frame offered is lost.

``lost_frame_count`` is exact: frames offered and not kept, plus what the caller reports as
already lost (:meth:`BoundedBuffer.add_lost`, e.g. frames the store trimmed from the log).
When the count cannot be known (the log's epoch changed), :meth:`BoundedBuffer.mark_truncated`
makes the status ``truncated`` with the count omitted. ``buffer_high_watermark`` is the most
bytes the buffer held at any moment (never above the capacity; 0 for ``NONE``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Final, Generic, TypeVar, get_args

from .frames import BufferStatus, Policy

__all__ = [
    "POLICIES",
    "Backlog",
    "BoundedBuffer",
    "BufferedItem",
    "Policy",
    "buffer_status",
    "select_backlog",
]

T = TypeVar("T")

POLICIES: Final[tuple[Policy, ...]] = get_args(Policy)
"""The §7.1.1 ``policy_applied`` values: ``RING``, ``DROP``, ``NONE``."""


@dataclass(frozen=True, slots=True)
class BufferedItem(Generic[T]):
    """One buffered frame: its encoded envelope and what the caller wants to keep beside it.

    ``value`` is the caller's payload object (a seq, a message id, the decoded frame, …); the
    buffer never looks inside it. The frame's size is ``len(data)``.
    """

    data: bytes
    value: T

    @property
    def size(self) -> int:
        """Bytes this frame takes in the buffer (the encoded envelope's length)."""
        return len(self.data)


def buffer_status(
    policy: Policy,
    *,
    lost_frame_count: int | None,
    buffer_high_watermark: int,
    truncated: bool | None = None,
) -> BufferStatus:
    """The §7.1.1 ``buffer_status`` object (notes §15.4).

    ``lost_frame_count`` is sent whenever it is known, 0 included; ``None`` means the count is
    unknown (the epoch changed), which always makes the status ``truncated``. ``truncated``
    defaults to "some frame was lost"; passing True forces it.
    """
    if lost_frame_count is not None and lost_frame_count < 0:
        raise ValueError(f"lost_frame_count must be >= 0, got {lost_frame_count}")
    if buffer_high_watermark < 0:
        raise ValueError(f"buffer_high_watermark must be >= 0, got {buffer_high_watermark}")
    lost_or_unknown = lost_frame_count is None or lost_frame_count > 0
    return BufferStatus(
        policy_applied=policy,
        truncated=bool(truncated) or lost_or_unknown,
        lost_frame_count=lost_frame_count,
        buffer_high_watermark=buffer_high_watermark,
    )


class BoundedBuffer(Generic[T]):
    """An incremental RING / DROP / NONE buffer bounded by bytes (notes §7, §15.4).

    Frames are pushed oldest first. The buffer keeps its frames in order, counts the ones it
    could not keep and remembers the most bytes it ever held.
    """

    __slots__ = (
        "_capacity",
        "_closed",
        "_extra_lost",
        "_high_watermark",
        "_items",
        "_lost",
        "_policy",
        "_size",
        "_unknown_loss",
    )

    def __init__(self, policy: Policy, capacity_bytes: int) -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        if capacity_bytes < 0:
            raise ValueError(f"capacity_bytes must be >= 0, got {capacity_bytes}")
        self._policy: Policy = policy
        self._capacity = capacity_bytes
        self._items: deque[BufferedItem[T]] = deque()
        self._size = 0
        self._high_watermark = 0
        self._lost = 0  # frames offered and not kept (evicted, refused or oversized)
        self._extra_lost = 0  # frames the caller reports as lost before they reached us
        self._closed = False  # DROP: a frame did not fit, so every later one is lost too
        self._unknown_loss = False

    # --- the policy --------------------------------------------------------------------

    def push(self, data: bytes, value: T) -> bool:
        """Offer the next (newest) frame. Returns True when the buffer kept it.

        RING evicts the oldest frames until ``data`` fits (all of them, and ``data`` too, when
        it is larger than the capacity); DROP refuses ``data`` and every later frame once one
        does not fit; NONE refuses everything.
        """
        size = len(data)
        if self._policy == "NONE":
            self._lost += 1
            return False
        if self._policy == "DROP":
            if self._closed or self._size + size > self._capacity:
                self._closed = True
                self._lost += 1
                return False
        elif size > self._capacity:  # RING, and the frame can never fit
            self._lost += len(self._items) + 1
            self._items.clear()
            self._size = 0
            return False
        else:  # RING: make room
            while self._size + size > self._capacity:
                self._size -= self._items.popleft().size
                self._lost += 1
        self._items.append(BufferedItem(data, value))
        self._size += size
        if self._size > self._high_watermark:
            self._high_watermark = self._size
        return True

    def push_all(self, items: Iterable[BufferedItem[T]]) -> None:
        """Push every item in order (oldest first)."""
        for item in items:
            self.push(item.data, item.value)

    def add_lost(self, count: int) -> None:
        """Count ``count`` more frames as lost before they reached the buffer (store trim)."""
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        self._extra_lost += count

    def mark_truncated(self) -> None:
        """Data was lost in a way that cannot be counted (the log's epoch changed).

        From now on :attr:`truncated` is True and :attr:`lost_frame_count` is None.
        """
        self._unknown_loss = True

    def discard_through(self, predicate: Callable[[T], bool]) -> int:
        """Drop the frames the other side already has; returns how many were dropped.

        Finds the newest held frame whose value satisfies ``predicate`` (e.g. its message id is
        ``welcome.received.last_message_id``) and drops it and every older held frame. Frames
        are sent in order, so the other side also has every frame a RING eviction took before
        that one: those stop counting as lost. When no held frame matches, nothing changes.
        The high watermark is history and stays.

        One inexact case: if the matching frame was itself evicted by RING, every held frame is
        newer than it (nothing to drop), but the evicted frames all stay counted as lost although
        the other side has some of them; the count is then an upper bound.
        """
        match = -1
        for index in range(len(self._items) - 1, -1, -1):
            if predicate(self._items[index].value):
                match = index
                break
        if match < 0:
            return 0
        for _ in range(match + 1):
            self._size -= self._items.popleft().size
        if self._policy == "RING":
            # Everything RING lost is older than every frame it holds, hence older than the match.
            self._lost = 0
        return match + 1

    def drain(self) -> list[BufferedItem[T]]:
        """Return the frames held (oldest first) and reset the buffer to new.

        For the client library once its history was sent: counters and watermark start over.
        """
        items = list(self._items)
        self._items.clear()
        self._size = 0
        self._high_watermark = 0
        self._lost = 0
        self._extra_lost = 0
        self._closed = False
        self._unknown_loss = False
        return items

    # --- what it holds and the §7.1.1 status -------------------------------------------

    @property
    def policy(self) -> Policy:
        """The policy applied (``policy_applied`` of the status)."""
        return self._policy

    @property
    def capacity_bytes(self) -> int:
        """The byte capacity."""
        return self._capacity

    @property
    def size_bytes(self) -> int:
        """Bytes currently held."""
        return self._size

    @property
    def items(self) -> list[BufferedItem[T]]:
        """The frames held, oldest first (a copy)."""
        return list(self._items)

    @property
    def high_watermark(self) -> int:
        """The most bytes held at any moment (≤ capacity; 0 for NONE)."""
        return self._high_watermark

    @property
    def lost_frame_count(self) -> int | None:
        """Frames offered and not kept plus those added by :meth:`add_lost`; None if unknown."""
        if self._unknown_loss:
            return None
        return self._lost + self._extra_lost

    @property
    def truncated(self) -> bool:
        """True when any frame was lost (or the loss is uncountable)."""
        return self._unknown_loss or self._lost + self._extra_lost > 0

    def kept_bytes(self) -> list[bytes]:
        """The encoded frames held, oldest first."""
        return [item.data for item in self._items]

    def status(self, *, extra_lost: int = 0, unknown_loss: bool = False) -> BufferStatus:
        """The §7.1.1 ``buffer_status`` for what the buffer holds now.

        ``extra_lost`` and ``unknown_loss`` apply :meth:`add_lost` / :meth:`mark_truncated` to
        this status only, without changing the buffer.
        """
        if extra_lost < 0:
            raise ValueError(f"extra_lost must be >= 0, got {extra_lost}")
        lost = self.lost_frame_count
        return buffer_status(
            self._policy,
            lost_frame_count=None if unknown_loss or lost is None else lost + extra_lost,
            buffer_high_watermark=self._high_watermark,
        )

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[BufferedItem[T]]:
        return iter(list(self._items))

    def __repr__(self) -> str:
        return (
            f"BoundedBuffer({self._policy!r}, {self._capacity}, frames={len(self._items)}, "
            f"size={self._size}, lost={self.lost_frame_count}, peak={self._high_watermark})"
        )


@dataclass(frozen=True, slots=True)
class Backlog(Generic[T]):
    """What :func:`select_backlog` chose: the frames to send and their §7.1.1 status."""

    items: list[BufferedItem[T]]
    status: BufferStatus


def select_backlog(
    items: Iterable[BufferedItem[T]],
    policy: Policy,
    capacity_bytes: int,
    *,
    already_lost: int = 0,
    count_unknown: bool = False,
) -> Backlog[T]:
    """Bound a participant's backlog (oldest first) by its buffer policy (notes §7, §15.4).

    ``already_lost`` adds frames lost before the backlog was read (trimmed from the log);
    ``count_unknown`` (the epoch changed) makes the status truncated without a count.
    """
    buffer: BoundedBuffer[T] = BoundedBuffer(policy, capacity_bytes)
    buffer.push_all(items)
    buffer.add_lost(already_lost)
    if count_unknown:
        buffer.mark_truncated()
    return Backlog(items=buffer.items, status=buffer.status())
