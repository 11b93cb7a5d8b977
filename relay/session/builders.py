"""The frames the master makes for a session: envelopes, welcome, presence, errors, acks,
the end of a session, the backlog's ``session.history`` and the truncation notice.

Pure functions of their arguments: no I/O, no session object, so every part of the session
(and crash recovery) builds the same frame the same way.
"""

from __future__ import annotations

from typing import Any

from protocol import codec
from protocol.errors import ProtocolError
from protocol.frames import (
    Ack,
    AckPayload,
    BufferStatus,
    Deleted,
    DeletedPayload,
    Frame,
    History,
    HistoryPayload,
    Presence,
    PresenceChange,
    PresencePayload,
    Received,
    Sender,
    SessionError,
    SessionErrorPayload,
    SessionInfo,
    SessionStatus,
    StatusPayload,
    ToolResult,
    ToolResultPayload,
    TurnEnd,
    TurnEndPayload,
    TurnError,
    Welcome,
    WelcomePayload,
)
from protocol.state import SessionState, stated_status, status

from ..config import Settings
from ..store.base import ParticipantRecord, SessionHeader

__all__ = [
    "ack",
    "backlog_envelope",
    "ending",
    "envelope",
    "error",
    "presence",
    "presence_change",
    "status_frame",
    "truncation_notice",
    "welcome",
]


def envelope(session_id: str) -> dict[str, Any]:
    """A fresh message id, the session id and the time: the envelope of a master-made frame."""
    return {
        "message_id": codec.new_message_id(),
        "session_id": session_id,
        "timestamp": codec.now(),
    }


def presence_change(record: ParticipantRecord, state: str) -> PresenceChange:
    """The presence change ``state`` of the participant of ``record``."""
    return PresenceChange(
        participant_id=record.participant_id,
        role=record.role,
        state=state,  # type: ignore[arg-type]
    )


def presence(session_id: str, changes: list[PresenceChange]) -> Presence:
    """``session.presence`` for ``changes`` (one, or several coalesced)."""
    first = changes[0]
    return Presence(
        payload=PresencePayload(
            participant_id=first.participant_id,
            role=first.role,
            state=first.state,
            changes=changes if len(changes) > 1 else None,
        ),
        **envelope(session_id),
    )


def error(
    session_id: str,
    sender: Sender,
    cause: ProtocolError,
    *,
    lost_frame_count: int | None = None,
    ref_message_id: str | None = None,
) -> SessionError:
    """The non-logged ``session.error`` that answers one participant."""
    return SessionError(
        message_id=codec.new_message_id(),
        session_id=session_id,
        timestamp=codec.now(),
        sender=sender,
        payload=SessionErrorPayload(
            error_code=cause.code,
            message=cause.message,
            fatal=cause.fatal,
            lost_frame_count=lost_frame_count,
            ref_message_id=ref_message_id,
        ),
    )


def ack(session_id: str, sender: Sender, seq: int, message_id: str) -> Ack:
    """``connection.ack`` (notes §16.3): the sender's latest committed frame."""
    return Ack(
        message_id=codec.new_message_id(),
        session_id=session_id,
        timestamp=codec.now(),
        sender=sender,
        payload=AckPayload(last_seq=seq, last_message_id=message_id),
    )


def welcome(
    header: SessionHeader,
    state: SessionState,
    head: int,
    record: ParticipantRecord,
    resumed: bool,
    settings: Settings,
    sender: Sender,
) -> Welcome:
    """``connection.welcome`` for the participant of ``record`` (notes §5)."""
    assert record.buffer is not None
    return Welcome(
        payload=WelcomePayload(
            participant_id=record.participant_id,
            generation=record.generation,
            resumed=resumed,
            session=SessionInfo(
                session_id=header.session_id,
                name=header.name,
                status=status(state),
                head_seq=head,
                epoch=header.epoch,
                created_at=codec.parse_time(header.created_at),
            ),
            reattach_window_ms=settings.reattach_window_ms,
            heartbeat_interval_ms=int(settings.heartbeat_interval_s * 1000),
            max_frame_bytes=settings.max_frame_bytes,
            buffer=record.buffer,
            received=Received(last_message_id=record.last_received_message_id),
            presence=record.presence,
        ),
        sender=sender,
        **envelope(header.session_id),
    )


def backlog_envelope(
    session_id: str,
    sender: Sender,
    buffer_status: BufferStatus,
    last_sync_timestamp: Any,
    last_message_id: str,
) -> bytes:
    """The M→participant ``session.history`` with no frames yet, encoded (notes §7)."""
    history = History(
        payload=HistoryPayload(
            frames=[],
            buffer_status=buffer_status,
            last_sync_timestamp=last_sync_timestamp,
            last_message_id=last_message_id,
        ),
        sender=sender,
        **envelope(session_id),
    )
    return codec.encode(history)


def ending(
    session_id: str,
    state: SessionState,
    reason: str,
    deleted_by: str,
    *,
    window_ms: int | None = None,
) -> list[Frame]:
    """The §7.5.3 / §7.7 order that ends a session: open calls cancelled, the turn ended,
    ``session.deleted`` last; an expiry (``timeout``) names the window that ran out."""
    frames: list[Frame] = []
    for call in state.open_calls:
        frames.append(
            ToolResult(
                payload=ToolResultPayload(
                    call_id=call, status="cancelled", output="Session deleted"
                ),
                **envelope(session_id),
            )
        )
    if state.turn_id is not None:
        frames.append(
            TurnEnd(
                payload=TurnEndPayload(
                    turn_id=state.turn_id,
                    stop_reason="error",
                    error=TurnError(
                        code="session_ended", message="the session ended during this run"
                    ),
                ),
                **envelope(session_id),
            )
        )
    frames.append(
        SessionStatus(
            payload=StatusPayload(
                status="terminated",
                stop_reason="error" if state.turn_id is not None else state.stop_reason,  # type: ignore[arg-type]
            ),
            **envelope(session_id),
        )
    )
    frames.append(
        Deleted(
            payload=DeletedPayload(
                session_id=session_id,
                reason=reason,  # type: ignore[arg-type]
                deleted_by=deleted_by,  # type: ignore[arg-type]
                reattach_window_ms=window_ms if reason == "timeout" else None,
            ),
            **envelope(session_id),
        )
    )
    return frames


def status_frame(session_id: str, state: SessionState) -> SessionStatus:
    """``session.status`` stating the derived status now (notes §17.4); ``stop_reason`` is
    how the last run ended, absent while one runs."""
    now, stop = stated_status(state)
    return SessionStatus(
        payload=StatusPayload(status=now, stop_reason=stop),  # type: ignore[arg-type]
        **envelope(session_id),
    )


def truncation_notice(session_id: str, buffer_status: BufferStatus) -> SessionError:
    """§7.1.1 MUST: the edges are told a client's history was truncated."""
    lost = buffer_status.lost_frame_count
    return SessionError(
        payload=SessionErrorPayload(
            error_code="history_truncated",
            message=(
                "the client's history was truncated: "
                + (f"{lost} frames were lost" if lost is not None else "frames were lost")
                + f" ({buffer_status.policy_applied} buffer); this session's data is incomplete"
            ),
            fatal=False,
            lost_frame_count=lost,
        ),
        **envelope(session_id),
    )
