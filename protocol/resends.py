"""Re-sending after ``store_unavailable``, sans I/O (docs/protocol.md §7).

When the master cannot make a frame durable it answers ``session.error {error_code:
"store_unavailable", fatal: false, ref_message_id}`` and, from then on, refuses every later
frame of the connection the same way until the first refused frame arrives again. A
:class:`Resends` remembers, for the connection, the earliest of our frames named so (the one
to go back to), and how many rounds of re-sending have found the store still unavailable;
:class:`~protocol.client_core.ClientCore` asks it which frames of its in-flight window to
write again. The policy:

* A round re-sends, after :meth:`Backoff.delay` of the rounds so far (full jitter), every
  frame of the in-flight window from the first refused one, in order, each once, then the
  frames the caller sent meanwhile (they waited in the outgoing buffer, behind the re-send).
* A refusal naming a frame before the one to go back to moves it back; a later one changes
  nothing (the round re-sends it anyway). A refusal that answers an earlier round (crossing
  the re-send in flight) at worst makes the next round re-send frames the master logged
  already: it deduplicates them by ``message_id``, so each is logged once, in order.
* A refused ``session.history``, or ``max_rounds`` rounds in a row without an
  acknowledgement, gives up on the connection: the client drops it and reattaches, and the
  reattach carries every frame not acknowledged (a history for a client), which also ends
  the master's refusal. The caller hears of it only if the reattach fails in the end (the
  client's reconnect policy) or its buffer sheds frames (``FrameLost``), as for any drop.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Final

from .frames import SessionError
from .reconnect import Backoff

__all__ = ["DEFAULT_RESEND_ROUNDS", "Resends", "is_store_refusal"]

DEFAULT_RESEND_ROUNDS: Final = 6
"""Rounds on one connection before the client reattaches instead (about 16 s at most with
the default backoff, 8 s on average)."""


def is_store_refusal(error: SessionError) -> bool:
    """A non-fatal ``store_unavailable`` naming a frame: the frame may simply be sent again."""
    p = error.payload
    return p.error_code == "store_unavailable" and not p.fatal and p.ref_message_id is not None


class Resends:
    """Which of our frames to write again after ``store_unavailable``, and when."""

    def __init__(self, backoff: Backoff, max_rounds: int | None = DEFAULT_RESEND_ROUNDS) -> None:
        if max_rounds is not None and max_rounds < 0:
            raise ValueError("max_rounds must be >= 0 (or None: never give up a connection)")
        self.backoff = backoff
        self.max_rounds = max_rounds
        self.go_back_to: str | None = None
        """The earliest refused frame not re-sent since (None: nothing to re-send)."""
        self.reattach = False
        """A refused history (or too many rounds): drop the connection and reattach."""
        self.rounds = 0
        """Rounds written since the last acknowledgement (the backoff's attempt)."""
        self.resent = 0
        """Frames written again, over the client's life (for metrics and tests)."""

    @property
    def enabled(self) -> bool:
        """False when ``max_rounds`` is 0: refusals reach the caller, nothing is re-sent."""
        return self.max_rounds != 0

    @property
    def due(self) -> bool:
        """Is a round (or a reattach) waiting? Meanwhile new frames wait behind it."""
        return self.go_back_to is not None or self.reattach

    def refused(self, message_id: str, window: Sequence[str], histories: Sequence[str]) -> bool:
        """A store refusal named ``message_id``; ``window`` is our in-flight frames in send
        order, ``histories`` the histories written on this connection. False when the frame
        is neither (not ours to re-send: the caller settles it as refused)."""
        if message_id in histories:
            self.reattach = True
            return True
        if message_id not in window:
            return False
        current = self.go_back_to
        earlier = current is None or current not in window
        if earlier or window.index(message_id) < window.index(current):
            self.go_back_to = message_id
        return True

    def delay(self, rng: random.Random | None = None) -> float:
        """How long to wait before the next round."""
        return self.backoff.delay(self.rounds, rng)

    def take(self, window: Sequence[str]) -> list[str] | None:
        """Start a round: the frames of ``window`` to write again, in order (from the one to
        go back to; the whole window if that one left it). None: reattach instead."""
        if self.reattach or (self.max_rounds is not None and self.rounds >= self.max_rounds):
            self.reattach = True
            return None
        start = self.go_back_to
        self.go_back_to = None
        if start is None:
            return []
        self.rounds += 1
        at = window.index(start) if start in window else 0
        again = list(window[at:])
        self.resent += len(again)
        return again

    def acknowledged(self) -> None:
        """The master committed something of ours: the store is back, the backoff restarts."""
        self.rounds = 0

    def new_connection(self) -> None:
        """A new connection: its reattach re-sends what the old one left (see the module).
        The rounds count on until an acknowledgement, so an outage that outlasts a reattach
        is retried ever more slowly, not in a tight loop of reattaches."""
        self.go_back_to = None
        self.reattach = False
