"""Every error RAWP code raises, in one hierarchy.

Each protocol error knows the ``session.error`` code it is answered with (notes §14) and
whether it is fatal; each handshake error knows its WebSocket close code::

    RawpError
    ├── ProtocolError                 answered with session.error {error_code, fatal}
    │   ├── InvalidFrame              invalid_frame        (not JSON, wrong shape, bad format)
    │   ├── UnknownType               unknown_type         (and metadata.ignorable not set)
    │   ├── UnsupportedData           unsupported_data     (binary WebSocket message)
    │   ├── NotAllowed                not_allowed          (credential or session state forbids it)
    │   ├── RateLimited               rate_limited
    │   ├── Busy                      busy                 (a run is open or about to start)
    │   ├── StoreUnavailable          store_unavailable    (the frame could not be made durable)
    │   ├── VersionUnsupported        version_unsupported
    │   ├── MessageIdConflict         message_id_conflict  (the id names another frame)
    │   └── StateViolation            the session state machine refused the frame (notes §6)
    │       ├── TurnStateError        turn_state
    │       ├── BlockStateError       block_state
    │       ├── ToolPairingError      tool_pairing
    │       ├── InteractionStateError interaction_state
    │       ├── DirectionError        direction
    │       ├── InvalidRevisit        invalid_revisit      (``at`` too far in the past or future)
    │       ├── TooManyRevisits       too_many_revisits    (the session's pending revisits are full)
    │       └── UsageMissing          usage_missing        (a warning: the frame is still processed)
    ├── HandshakeError                closes the WebSocket with close_code
    │   ├── MalformedHello            4400
    │   ├── BadCredential             4401
    │   ├── Forbidden                 4403
    │   ├── NoSuchSession             4404
    │   ├── HelloTimeout              4408
    │   ├── ClientAttached            4409
    │   ├── SessionGone               4410
    │   └── ProtocolVersionMismatch   4426
    └── StoreError                    raised by store backends
        ├── StoreUnavailableError     the backend cannot be reached
        ├── SessionMissing            no such session in the store (also a KeyError)
        └── FormatVersionError        data written by a newer build (seed 004: "upgrade")
"""

from __future__ import annotations

import enum
from typing import ClassVar

__all__ = [
    "BadCredential",
    "BlockStateError",
    "Busy",
    "ClientAttached",
    "CloseCode",
    "DirectionError",
    "Forbidden",
    "FormatVersionError",
    "HandshakeError",
    "HelloTimeout",
    "InteractionStateError",
    "InvalidFrame",
    "InvalidRevisit",
    "MalformedHello",
    "MessageIdConflict",
    "NoSuchSession",
    "NotAllowed",
    "ProtocolError",
    "ProtocolVersionMismatch",
    "RateLimited",
    "RawpError",
    "SessionGone",
    "SessionMissing",
    "StateViolation",
    "StoreError",
    "StoreUnavailable",
    "StoreUnavailableError",
    "TooManyRevisits",
    "ToolPairingError",
    "TurnStateError",
    "UnknownType",
    "UnsupportedData",
    "UsageMissing",
    "VersionUnsupported",
]


class RawpError(Exception):
    """Base of every error raised by RAWP code."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ProtocolError(RawpError):
    """A frame the master refuses; answered with ``session.error``."""

    code: ClassVar[str] = "invalid_frame"
    fatal: ClassVar[bool] = False


class InvalidFrame(ProtocolError):
    """Not JSON, not an envelope, or a field of the wrong shape or format."""

    code = "invalid_frame"


class UnknownType(ProtocolError):
    """A ``type`` this implementation does not know, without ``metadata.ignorable``."""

    code = "unknown_type"


class UnsupportedData(ProtocolError):
    """A binary WebSocket message (RAWP frames are UTF-8 JSON text)."""

    code = "unsupported_data"


class NotAllowed(ProtocolError):
    """The credential or the session's state does not allow this frame."""

    code = "not_allowed"


class Busy(ProtocolError):
    """A ``user.message`` while the agent's run is open (or about to start) did not find the
    agent free within its wait (notes §17.3): not logged, nothing ends; send it again later."""

    code = "busy"


class RateLimited(ProtocolError):
    """The connection sends faster than its limits."""

    code = "rate_limited"


class StoreUnavailable(ProtocolError):
    """The frame could not be made durable; nothing was logged or relayed."""

    code = "store_unavailable"


class VersionUnsupported(ProtocolError):
    """The stored session was written in a format this build cannot read."""

    code = "version_unsupported"


class MessageIdConflict(ProtocolError):
    """The frame's ``message_id`` already names another frame of the session (sent by
    someone else, or with other content): refused, never taken for a re-send of that one."""

    code = "message_id_conflict"


class StateViolation(ProtocolError):
    """The session state machine refused the frame (notes §6)."""


class TurnStateError(StateViolation):
    """Turn open/closed/index/id rule broken."""

    code = "turn_state"


class BlockStateError(StateViolation):
    """Text or thinking delta/done rule broken."""

    code = "block_state"


class ToolPairingError(StateViolation):
    """Tool result without its request, duplicate call id, or turn end with calls unresolved."""

    code = "tool_pairing"


class InteractionStateError(StateViolation):
    """Interaction response without a pending request."""

    code = "interaction_state"


class DirectionError(StateViolation):
    """A frame the sender's role may not send."""

    code = "direction"


class InvalidRevisit(StateViolation):
    """A ``session.revisit.request`` whose ``at`` is more than 60 s in the past or more than
    366 days ahead (notes §17.5): not logged, nothing stored."""

    code = "invalid_revisit"


class TooManyRevisits(StateViolation):
    """A new revisit while the session already has the most pending (notes §17.5)."""

    code = "too_many_revisits"


class UsageMissing(StateViolation):
    """§7.5.2: the frame after a turn end was not ``session.usage``. A warning only."""

    code = "usage_missing"


class CloseCode(enum.IntEnum):
    """Every WebSocket close code RAWP uses, in one place (RAWP §5, notes §5 and §11).

    An ``IntEnum``: each member is the ``int`` that goes on the wire.
    """

    NORMAL = 1000
    """The session ended, or a peer closed normally."""
    GOING_AWAY = 1001
    """The master is shutting down or handing the session off: reattach."""
    PROTOCOL_ERROR = 1002
    """The peer broke RFC 6455 framing (reserved bits, a stray continuation, …)."""
    NO_STATUS_RECEIVED = 1005
    """Never sent: what the master's log says of a close frame that carried no code."""
    ABNORMAL_CLOSURE = 1006
    """Never sent: what the master's log says of a socket cut without a close frame."""
    INVALID_DATA = 1007
    """A text message that is not UTF-8."""
    POLICY_VIOLATION = 1008
    """Over the rate limit."""
    MESSAGE_TOO_BIG = 1009
    """A message over ``max_frame_bytes``."""
    INTERNAL_ERROR = 1011
    """A peer that did not answer the keepalive ping in time, or a bug of the master's."""
    TRY_AGAIN_LATER = 1013
    """The store could not be reached while attaching: reattach after a backoff (RFC 6455's
    registered "Try Again Later"; the connection was not attached)."""
    MALFORMED_HELLO = 4400
    BAD_CREDENTIAL = 4401
    """Unknown, expired or revoked credential (also a credential revoked while attached)."""
    FORBIDDEN = 4403
    NO_SUCH_SESSION = 4404
    HELLO_TIMEOUT = 4408
    CLIENT_ATTACHED = 4409
    """Another client is attached; also the close of a connection superseded by a takeover."""
    SUPERSEDED = 4409
    SESSION_GONE = 4410
    PROTOCOL_VERSION_MISMATCH = 4426
    SLOW_CONSUMER = 4429
    """The send queue went over its bound (notes §11)."""


class HandshakeError(RawpError):
    """The connection cannot be attached; closed with :attr:`close_code`."""

    close_code: ClassVar[int] = CloseCode.MALFORMED_HELLO


class MalformedHello(HandshakeError):
    """The first frame was not a valid ``connection.hello``."""

    close_code = CloseCode.MALFORMED_HELLO


class BadCredential(HandshakeError):
    """Unknown, expired or revoked credential."""

    close_code = CloseCode.BAD_CREDENTIAL


class Forbidden(HandshakeError):
    """The credential is valid but may not do this (role, session, workspace, origin)."""

    close_code = CloseCode.FORBIDDEN


class NoSuchSession(HandshakeError):
    """The session does not exist and the hello did not ask to create it."""

    close_code = CloseCode.NO_SUCH_SESSION


class HelloTimeout(HandshakeError):
    """No hello within the handshake timeout."""

    close_code = CloseCode.HELLO_TIMEOUT


class ClientAttached(HandshakeError):
    """Another client is attached to the session."""

    close_code = CloseCode.CLIENT_ATTACHED


class SessionGone(HandshakeError):
    """The session was deleted."""

    close_code = CloseCode.SESSION_GONE


class ProtocolVersionMismatch(HandshakeError):
    """``protocol_version`` is not 1.0.x."""

    close_code = CloseCode.PROTOCOL_VERSION_MISMATCH


class StoreError(RawpError):
    """Raised by store backends."""


class StoreUnavailableError(StoreError):
    """The backend cannot be reached; the operation did not happen."""


class SessionMissing(StoreError, KeyError):
    """The store has no such session (never created, or deleted meanwhile, e.g. by another node).

    Also a ``KeyError``, what stores raised for it before it had a name of its own.
    """


class FormatVersionError(StoreError):
    """The stored data was written by a newer build of the store format: upgrade."""
