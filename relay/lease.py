"""This node's lease, for writes made outside a connection (REST appends and renames).

A node's connections are fenced through the sessions it holds (relay/cluster.py, the
``held`` set): a sweep that declares the node dead writes the node's lease epoch into each
of those sessions, and the store refuses the node's later writes there. A REST request may
write to a session the node holds no connection of, and may have been in the middle of that
when the node was paused. :class:`WriteLease` closes that gap, three ways:

* A request is served under the lease epoch the node held when it **arrived**
  (:meth:`WriteLease.arrived`, from the HTTP middleware); its writes carry that epoch
  (:meth:`RedisStore.pinned_epoch`), not whatever lease the node holds by the time they are
  made. A node that learnt it was declared dead (a new epoch) refuses at once.
* Before writing, the session is recorded as one the node is writing to
  (:meth:`RedisStore.hold_write`), by a script that refuses once the node has been claimed
  by a sweeper or holds another epoch; the sweeper reads that record after its claim, so it
  fences the session too, and the store then refuses the write (``FENCED``).
* The node's own clock: a write is refused when the last heartbeat Redis confirmed was sent
  longer ago than most of ``--node-dead-after`` (monotonic time, which runs on while the
  process is stopped), so a node that was paused does not even try until it has heard from
  Redis again.

Each refusal is a :class:`~protocol.errors.StoreUnavailableError` (HTTP 503
``store_unavailable``): the request may be sent again, and is then served under the node's
new lease.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Final

from protocol.errors import StoreError, StoreUnavailableError

if TYPE_CHECKING:
    from .store.redis import RedisStore

__all__ = ["WriteLease"]

_FRESH_SHARE: Final = 0.75  # of dead-after: how old a confirmation a write may rely on

_ARRIVAL: Final[contextvars.ContextVar[int | None]] = contextvars.ContextVar(
    "rawp_lease_at_arrival", default=None
)


class WriteLease:
    """This node's lease as the node itself knows it, and the guard around REST writes."""

    def __init__(self, store: RedisStore, dead_after_s: float) -> None:
        self.store = store
        self.fresh_s = dead_after_s * _FRESH_SHARE
        self.confirmed_at: float | None = None
        """Monotonic time a heartbeat Redis answered was sent (None: never yet)."""

    def confirmed(self, sent_at: float) -> None:
        """A heartbeat sent at ``sent_at`` (``time.monotonic()``) was answered."""
        if self.confirmed_at is None or sent_at > self.confirmed_at:
            self.confirmed_at = sent_at

    def arrived(self) -> None:
        """A request arrived (its task and what it awaits serve it under this lease)."""
        _ARRIVAL.set(self.store.lease_epoch)

    def _refuse_unless_fresh(self, epoch: int) -> None:
        if epoch != self.store.lease_epoch:
            raise StoreUnavailableError(
                f"this node was declared dead while the request was in progress (lease "
                f"{epoch}, now {self.store.lease_epoch}); send it again"
            )
        confirmed = self.confirmed_at
        age = None if confirmed is None else time.monotonic() - confirmed
        if age is None or age > self.fresh_s:
            raise StoreUnavailableError(
                "this node has not confirmed its lease with the store for "
                f"{'ever' if age is None else f'{age:.1f} s'}; it writes nothing until it has"
            )

    @contextlib.asynccontextmanager
    async def writing(self, session_id: str) -> AsyncIterator[None]:
        """Around a REST write to ``session_id``: refused (``StoreUnavailableError``) unless this
        node's lease is current, and fenced by the sweep if the node is declared dead while
        the write is in progress."""
        arrived = _ARRIVAL.get()
        epoch = self.store.lease_epoch if arrived is None else arrived
        self._refuse_unless_fresh(epoch)
        if not await self.store.hold_write(session_id, epoch):
            raise StoreUnavailableError(
                f"this node was declared dead (lease {epoch}); send the request again"
            )
        try:
            self._refuse_unless_fresh(epoch)  # the hold may have waited out a pause
            with self.store.pinned_epoch(epoch):
                yield
        finally:
            with contextlib.suppress(StoreError):
                await self.store.write_done(session_id)
