"""When and how the client reconnects, sans I/O: the backoff, the status, the final closes.

A close code in :data:`REFUSALS` ends the client (reconnecting cannot help, notes §14); a
normal close (:attr:`~protocol.errors.CloseCode.NORMAL`) or the session's deletion ends it
cleanly; anything else is a drop, retried after :meth:`Backoff.delay`.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass
from typing import Final

from .errors import (
    BadCredential,
    ClientAttached,
    Forbidden,
    HandshakeError,
    MalformedHello,
    NoSuchSession,
    ProtocolVersionMismatch,
    SessionGone,
)

__all__ = ["REFUSALS", "Backoff", "ConnectionStatus", "refusal"]

REFUSALS: Final[dict[int, type[HandshakeError]]] = {
    cls.close_code: cls
    for cls in (
        MalformedHello,
        BadCredential,
        Forbidden,
        NoSuchSession,
        ClientAttached,
        SessionGone,
        ProtocolVersionMismatch,
    )
}
"""The close codes that end the client with the handshake error they stand for."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with full jitter: attempt n waits ``uniform(0, cap_n)`` seconds.

    ``cap_n = min(maximum, initial * multiplier**n)``; ``max_attempts`` None retries forever.
    """

    initial: float = 0.25
    maximum: float = 10.0
    multiplier: float = 2.0
    max_attempts: int | None = None

    def __post_init__(self) -> None:
        if self.initial < 0 or self.maximum < 0 or self.multiplier < 1:
            raise ValueError("backoff needs initial >= 0, maximum >= 0 and multiplier >= 1")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1 (or None: forever)")

    def ceiling(self, attempt: int) -> float:
        """The most attempt ``attempt`` (0-based) may wait."""
        exponent = min(attempt, 64)  # beyond this the cap is the maximum anyway
        return min(self.maximum, self.initial * self.multiplier**exponent)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """A full-jitter delay for attempt ``attempt`` (0-based)."""
        draw = (rng or random).random()
        return self.ceiling(attempt) * draw


class ConnectionStatus(enum.Enum):
    """Where the client's connection is."""

    NEW = "new"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"
    CLOSED = "closed"


def refusal(code: int | None, reason: str) -> HandshakeError | None:
    """The error a close code stands for when reconnecting cannot help (notes §14)."""
    if code is None:
        return None
    cls = REFUSALS.get(code)
    if cls is None:
        return None
    return cls(reason or f"closed with {code}")
