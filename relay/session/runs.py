"""One run at a time (notes §17.3, §17.12): a ``user.message`` waits for the agent.

A session is *busy* while a turn is open, or while a run is about to start: a
``user.message`` reached it with no turn open and the client's ``session.turn.start`` has not
followed yet — for at most :data:`RUN_WAIT_S`. A ``user.message`` that finds it busy waits up
to :data:`RUN_WAIT_S` for it to be free, then is judged like any frame, or refused ``busy``
(non-fatal, ``ref_message_id``, not logged) — never both. The decision is taken in the
session's commit path under its lock, so of two UIs the first one's message is the one
relayed. A client that steers (``accepts_input_during_turn`` in its hello) gets every message
at once.

A WebSocket edge's waiting message is held by :class:`RunGate` (the edge's later messages
wait behind it, in order; its other frames go on); an HTTP caller waits in its request.
The about-to-start clock is this node's: on several nodes, another node's frames make a
session busy by its open turn only.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol

from protocol.errors import Busy
from protocol.frames import Frame, GenericFrame
from protocol.state import Phase, SessionState, run_open

__all__ = ["RUN_WAIT_S", "Held", "RunGate", "Waiter", "busy_error"]

RUN_WAIT_S: Final = 3.0
"""How long a message waits for a run to end, and how long a run may be about to start."""

Held = tuple[Frame | GenericFrame, bytes, float]
"""A waiting message: the frame, its bytes, and the monotonic time its wait ends."""


class Waiter(Protocol):
    """A participant as the gate sees it (relay.session.participant.Participant)."""

    can_hold: bool
    held: deque[Held]
    releaser: asyncio.Task[None] | None
    fenced: bool
    steers: bool


class _Session(Protocol):
    """The session as the gate sees it (relay.session.core.SessionCore)."""

    state: SessionState
    terminated: bool
    client_id: str | None

    @property
    def participants(self) -> Mapping[str, Waiter]: ...


def busy_error() -> Busy:
    """The refusal of a message whose wait ended with the agent still busy."""
    return Busy(
        f"the agent is busy: its run did not end within {RUN_WAIT_S:g} s; send the message "
        "again when it is idle"
    )


class RunGate:
    """When a session's agent is free to take a ``user.message``, and who waits for it."""

    def __init__(self, core: _Session) -> None:
        self.core = core
        # When the current about-to-start began (None: none, or one read from the log at
        # load, which no longer holds anyone back).
        self._requested_at: float | None = None
        self._requested = core.state.run_requested
        self._changed = asyncio.Event()

    def steering(self) -> bool:
        """The attached client takes input during its turn."""
        core = self.core
        client = core.participants.get(core.client_id) if core.client_id else None
        return client is not None and client.steers

    def busy(self) -> bool:
        """A turn is open, or a run is about to start (within its bound)."""
        state = self.core.state
        if state.phase is Phase.TURN_OPEN:
            return True
        if not run_open(state):
            return False
        if not self._requested:  # folded in this very batch, not yet observed
            self._requested = True
            self._requested_at = time.monotonic()
        if self._requested_at is None:
            return False
        return time.monotonic() - self._requested_at < RUN_WAIT_S

    def observe(self) -> None:
        """After frames were folded: start or stop the about-to-start clock; wake waiters."""
        requested = self.core.state.run_requested
        if requested and not self._requested:
            self._requested_at = time.monotonic()
        elif not requested:
            self._requested_at = None
        self._requested = requested
        changed = self._changed
        self._changed = asyncio.Event()
        changed.set()

    async def wait_free(self, deadline: float) -> None:
        """Return once the session is not busy, or at ``deadline`` (monotonic)."""
        while self.busy() and not self.core.terminated:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self._requested_at is not None and self.core.state.phase is not Phase.TURN_OPEN:
                left = min(left, self._requested_at + RUN_WAIT_S - time.monotonic() + 0.001)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), max(left, 0.001))

    def hold(
        self,
        participant: Waiter,
        item: Held,
        commit: Callable[[Any, Held], Awaitable[None]],
    ) -> bool:
        """Keep an edge's message (behind its earlier ones) until the session is free or its
        wait ends, then hand it to ``commit``. False when the participant cannot wait (an
        HTTP caller: it waits in its request)."""
        if not participant.can_hold:
            return False
        participant.held.append(item)
        if participant.releaser is None:
            participant.releaser = asyncio.get_running_loop().create_task(
                self._release(participant, commit)
            )
        return True

    async def _release(
        self,
        participant: Waiter,
        commit: Callable[[Any, Held], Awaitable[None]],
    ) -> None:
        held: deque[Held] = participant.held
        try:
            while held and not self.core.terminated and not participant.fenced:
                deadline = held[0][2]
                await self.wait_free(deadline)
                if self.busy() and time.monotonic() < deadline:
                    continue  # woken early (another frame folded)
                # Judged again under the lock: relayed, refused busy, or (another message
                # came first meanwhile) held again at the head, its deadline unchanged.
                await commit(participant, held.popleft())
        finally:
            participant.releaser = None
            if self.core.terminated or participant.fenced:
                held.clear()
