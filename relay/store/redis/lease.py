"""This node's lease epoch as its writes carry it: current or pinned, fenced, held for REST.

The lease epoch is the fencing token a node gets each time it registers (coordination.py). An
append or a rename carries the epoch it was accepted under, and a session recovered from a
dead node refuses the node's writes under the fenced epoch (:class:`NodeFencedError`). A write
made outside a connection (REST) is served under the lease it *arrived* under
(:meth:`Lease.pinned`), and first records the session in ``rawp:{~nodes}:writing:<N>`` with a
script that checks the node is still live under that epoch (scripts/write_hold.lua), so a
sweep that claims the node finds, and fences, every session it may still write.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any, Final

from .errors import NodeFencedError, mapped
from .keys import NODES_EPOCH, NODES_LIVE, NODES_WRITING, check_id
from .lua import Scripts

__all__ = ["Lease"]

# The lease epoch the writes of the current task carry instead of the store's current one
# (see Lease.pinned): a REST request writes under the lease it arrived under.
_PINNED_EPOCH: Final[contextvars.ContextVar[int | None]] = contextvars.ContextVar(
    "rawp_pinned_epoch", default=None
)


class Lease:
    """One node's lease epoch, what its writes carry, and what a fenced write answers."""

    def __init__(self, scripts: Scripts, node_id: str) -> None:
        self._scripts = scripts
        self.node_id = node_id
        self.epoch = 0
        """This node's lease epoch (set from the heartbeats)."""
        self.on_fenced: Callable[[], None] | None = None
        """Called when a session refuses a write under the current lease epoch."""

    def heard(self, *, registered: bool, epoch: int, new_epoch: bool) -> bool:
        """Take in this node's heartbeat answer; False when the node had been declared dead.

        A new epoch we did not ask for means we were not registered, i.e. declared dead, even
        if a retry after a lost reply found us registered again.
        """
        if not new_epoch and self.epoch and epoch != self.epoch:
            registered = False
        self.epoch = max(self.epoch, epoch)
        return registered

    def write_epoch(self) -> int:
        """The lease epoch this task's writes carry: the pinned one, else the current one."""
        pinned = _PINNED_EPOCH.get()
        return self.epoch if pinned is None else pinned

    @contextlib.contextmanager
    def pinned(self, epoch: int) -> Iterator[None]:
        """Within the block, this task's appends and renames carry ``epoch``."""
        token = _PINNED_EPOCH.set(epoch)
        try:
            yield
        finally:
            _PINNED_EPOCH.reset(token)

    def fenced(self, session_id: str, epoch: int) -> NodeFencedError:
        """The error for a write under ``epoch`` the session refused; tells the node when
        that is its current lease (news to it: it was declared dead)."""
        if epoch == self.epoch and self.on_fenced is not None:
            self.on_fenced()
        return NodeFencedError(
            f"session {session_id} fenced this node's lease {epoch}: declared dead"
        )

    async def hold_write(self, session_id: str, epoch: int) -> bool:
        """Record a REST write of this node to ``session_id`` (see the module docstring);
        False, nothing recorded, when the node is no longer live under ``epoch``."""
        check_id(session_id)
        keys: list[Any] = [NODES_LIVE, NODES_EPOCH, NODES_WRITING + self.node_id]
        with mapped():
            held = bool(
                await self._scripts.write_hold(keys=keys, args=[self.node_id, epoch, session_id])
            )
        if not held and epoch == self.epoch and self.on_fenced is not None:
            self.on_fenced()  # claimed while we did not know: declared dead
        return held

    async def write_done(self, session_id: str) -> None:
        """The REST write :meth:`hold_write` recorded has ended."""
        with mapped():
            await self._scripts.write_done(keys=[NODES_WRITING + self.node_id], args=[session_id])
