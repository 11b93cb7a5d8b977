"""The append queue of the redis store: group commit, writer batch numbers, fencing answers.

Appends go through a per-session group commit: while one batch is in flight, later appends
queue and go together in the next script call (scripts/append.lua). Automatic retries after a
lost reply are exactly-once: the append script remembers the last answer of each writer (one
:class:`Appender`, i.e. one store instance) with its batch number, and a late copy of an older
batch is refused, so a batch is applied at most once and never after a later batch of the same
writer. Fencing: a session recovered from a dead node records that node's lease epoch
(``f:<node>``), and the append script refuses the node's entries accepted under that epoch or
an older one (:class:`NodeFencedError`).
"""

from __future__ import annotations

import asyncio
import secrets
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from protocol.errors import SessionMissing, StoreError, StoreUnavailableError

from ..base import AppendResult, NewEntry, append_behind_failed, newer_format
from .errors import NodeFencedError, mapped
from .framing import LAYOUT_VERSION, encode, pack_batch
from .keys import SessionKeys, check_id

__all__ = ["Appender"]

_MAX_BATCH_ENTRIES: Final = 1024  # per script call: bounds how long one call holds Redis
_MAX_BATCH_BYTES: Final = 4 << 20


@dataclass(slots=True)
class _Pending:
    entries: Sequence[NewEntry]
    future: asyncio.Future[list[AppendResult]]
    after: asyncio.Future[list[AppendResult]] | None = None  # see Store.append_nowait
    epoch: int = 0  # the node's lease epoch when the entries were accepted (fencing)
    size: int = field(init=False)  # bytes of the entries, for the batch bound

    def __post_init__(self) -> None:
        self.size = sum(len(e.head) + len(e.tail) for e in self.entries)

    def orphaned(self) -> bool:
        """The append it was folded on top of failed: it must not be applied."""
        after = self.after
        return (
            after is not None
            and after.done()
            and (after.cancelled() or after.exception() is not None)
        )


@dataclass(slots=True)
class _Queue:
    """Appends of one session waiting for the next script call (group commit)."""

    items: deque[_Pending] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None


class Appender:
    """One writer's appends: queued per session, merged into script calls, answered.

    ``script`` is the registered append script; ``fenced(session_id, epoch)`` is the error
    for a batch the session refused under lease ``epoch`` (this node was declared dead).
    """

    def __init__(
        self,
        script: Any,
        *,
        node_id: str,
        retention: int | None,
        fenced: Callable[[str, int], NodeFencedError],
    ) -> None:
        self.node_id = node_id
        self.retention = retention
        self._script = script
        self._fenced = fenced
        self._node_packed = encode(node_id)
        # One writer per store instance: its batch numbers only grow (see scripts/append.lua).
        self.writer = f"{node_id}:{secrets.token_hex(6)}"
        self.batch_no = 0
        """The number of this writer's last script call."""
        self.batches = 0
        """Append script calls made (group commit makes this smaller than the append calls)."""
        self._queues: dict[str, _Queue] = {}
        self._closed = False

    async def close(self) -> None:
        """Take no more appends; finish the queued ones."""
        self._closed = True
        tasks = [q.task for q in self._queues.values() if q.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def append_nowait(
        self,
        session_id: str,
        entries: Sequence[NewEntry],
        *,
        after: asyncio.Future[list[AppendResult]] | None = None,
        epoch: int = 0,
    ) -> asyncio.Future[list[AppendResult]]:
        """Queue the append at once behind the session's others (see Store.append_nowait):
        the drain sends it the moment the call before is answered, or fails it if that
        failed. ``epoch``: the lease epoch the entries were accepted under."""
        check_id(session_id)
        future: asyncio.Future[list[AppendResult]] = asyncio.get_running_loop().create_future()
        if self._closed:
            future.set_exception(StoreUnavailableError("the redis store is closed"))
            return future
        pending = _Pending(entries, future, after, epoch)
        queue = self._queues.get(session_id)
        if queue is None:
            queue = self._queues[session_id] = _Queue()
            queue.items.append(pending)
            # the drain runs as its own task so a caller's cancellation never aborts a batch
            # that carries other callers' entries
            queue.task = asyncio.create_task(self._drain(session_id, queue))
        else:
            queue.items.append(pending)
        return future

    async def _drain(self, session_id: str, queue: _Queue) -> None:
        """Run the queued appends, one script call per batch, until the queue is empty."""
        try:
            while queue.items:
                first = queue.items.popleft()
                if first.orphaned():
                    self._orphan(first)
                    continue
                batch = [first]
                count, size = len(first.entries), first.size
                while queue.items:
                    nxt = queue.items[0]
                    if nxt.orphaned() or nxt.epoch != first.epoch:
                        break  # failed on its own turn / goes with its own lease epoch
                    if (
                        count + len(nxt.entries) > _MAX_BATCH_ENTRIES
                        or size + nxt.size > _MAX_BATCH_BYTES
                    ):
                        break
                    batch.append(queue.items.popleft())
                    count += len(nxt.entries)
                    size += nxt.size
                try:
                    results = await self.append_batch(
                        session_id, [e for p in batch for e in p.entries], first.epoch
                    )
                except asyncio.CancelledError:
                    for p in batch:  # the script may or may not have run: say so
                        if not p.future.done():
                            p.future.set_exception(
                                StoreUnavailableError("append interrupted; outcome unknown")
                            )
                    raise
                except Exception as exc:
                    for p in batch:
                        if not p.future.done():
                            p.future.set_exception(exc)
                    continue
                offset = 0
                for p in batch:
                    n = len(p.entries)
                    if not p.future.done():
                        p.future.set_result(results[offset : offset + n])
                    offset += n
        finally:
            if self._queues.get(session_id) is queue:
                del self._queues[session_id]
            for p in queue.items:  # only when the drain itself was cancelled
                if not p.future.done():
                    p.future.set_exception(StoreUnavailableError("the redis store is closed"))

    @staticmethod
    def _orphan(pending: _Pending) -> None:
        if not pending.future.done():
            pending.future.set_exception(append_behind_failed())

    async def append_batch(
        self, session_id: str, entries: Sequence[NewEntry], epoch: int
    ) -> list[AppendResult]:
        """One script call for ``entries`` as the writer's next batch (no queue)."""
        k = SessionKeys.of(session_id)
        batch = pack_batch(entries)
        self.batch_no += 1
        args: list[bytes | str | int] = [
            self.retention or 0,
            k.pub,
            self._node_packed,
            self.writer,
            self.batch_no,
            LAYOUT_VERSION,
            batch,
            self.node_id,
            epoch,
        ]
        self.batches += 1
        try:
            with mapped():
                reply = await self._script(keys=[k.hdr, k.log, k.ids, k.rcv], args=args)
        except StoreError as exc:
            text = str(exc)
            if "NOSESSION" in text:
                raise SessionMissing(session_id) from None
            if "FORMAT " in text:
                version = int(text.rsplit("FORMAT ", 1)[1].split()[0])
                raise newer_format(session_id, version, LAYOUT_VERSION) from None
            if "FENCED" in text:
                raise self._fenced(session_id, epoch) from None
            if "STALE" in text:
                raise StoreUnavailableError("append superseded by a later batch") from None
            raise
        return [
            AppendResult(seq=-r, duplicate=True) if r < 0 else AppendResult(seq=r) for r in reply
        ]
