"""The errors the client library raises, beside the protocol's own (:mod:`protocol.errors`)::

RawpError
└── ClientError
    ├── ClientClosed          closed, or the session ended: nothing more can be sent
    ├── ReconnectExhausted    the master could not be reached within the backoff's attempts
    ├── FrameRefused          the master answered one of our frames with a session.error
    ├── FrameLost             the outgoing buffer or the in-flight window shed a frame
    └── ConnectRefused        the WebSocket handshake was refused with an HTTP status
"""

from __future__ import annotations

from .errors import RawpError
from .frames import SessionError

__all__ = [
    "ClientClosed",
    "ClientError",
    "ConnectRefused",
    "FrameLost",
    "FrameRefused",
    "ReconnectExhausted",
]


class ClientError(RawpError):
    """Raised by the client library."""


class ClientClosed(ClientError):
    """The client was closed (or its session ended); nothing more can be sent."""


class ReconnectExhausted(ClientError):
    """The master could not be reached within :attr:`Backoff.max_attempts` attempts."""


class FrameRefused(ClientError):
    """The master refused a frame we sent: its ``session.error`` names it (notes §16.3).

    ``code`` is the error code (``turn_state``, ``rate_limited``, …), ``error`` the
    ``session.error`` frame itself.
    """

    def __init__(self, error: SessionError) -> None:
        p = error.payload
        super().__init__(f"{p.error_code}: {p.message}")
        self.code = p.error_code
        self.error = error
        self.message_id = p.ref_message_id


class FrameLost(ClientError):
    """A frame made while disconnected never reached the master: the outgoing buffer (its
    policy and byte capacity, §7.1.1) or the in-flight window shed it."""


class ConnectRefused(ClientError):
    """The WebSocket handshake was refused with an HTTP status (wrong path, origin, …)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status
