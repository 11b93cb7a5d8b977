"""Finalization and unfinalization (RAWP §7.8, notes §8, §15.1, §15.10) as pure functions.

* :func:`finalize` lists the synthetic frames that close a session's unfinished state when
  its client's connection is lost (§7.8.1), each with ``metadata.synthetic: true``. Folding
  them (with :func:`protocol.state.fold`) records the state they replaced.
* :func:`fold_history` folds a ``session.history``: when it is not truncated and holds no
  ``session.deleted``, the synthetic frames are taken back out (the state from just before
  them is restored and the real frames folded since are re-applied) and the history's frames
  are replayed in order (§7.8.3). Otherwise the finalized state is kept.

The master, the client library and the dashboard all use these, so every view agrees.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from . import codec
from .errors import ProtocolError
from .frames import (
    AgentState,
    AgentStatePayload,
    BufferStatus,
    Deleted,
    Frame,
    GenericFrame,
    History,
    Sender,
    TextDone,
    TextDonePayload,
    ThinkingDone,
    ThinkingDonePayload,
    ToolResult,
    ToolResultPayload,
    TurnEnd,
    TurnEndPayload,
)
from .state import SenderRole, SessionState, fold, snapshot

__all__ = [
    "CONNECTION_LOST",
    "HistoryPlan",
    "finalize",
    "fold_entry",
    "fold_history",
    "needs_finalization",
    "plan_history",
    "unfinalizes",
]

CONNECTION_LOST = "Connection lost"


def needs_finalization(state: SessionState) -> bool:
    """True when the state has anything §7.8.1 would close."""
    return bool(
        state.open_text
        or state.open_thinking
        or state.open_calls
        or state.turn_id is not None
        or state.pending_interactions
        or state.agent_state != "idle"
    )


def finalize(state: SessionState, *, session_id: str, sender: Sender) -> list[Frame]:
    """The synthetic frames that finalize ``state`` (§7.8.1), in the table's order.

    Text blocks, thinking blocks, tool calls (``cancelled``, "Connection lost"), the open turn
    (``disconnected``), then ``agent.state idle``, which also discards pending interactions.
    Returns an empty list when nothing is unfinished. ``state`` is not changed.
    """
    frames: list[Frame] = []

    def envelope() -> dict[str, object]:
        return {
            "message_id": codec.new_message_id(),
            "session_id": session_id,
            "timestamp": codec.now(),
            "sender": sender,
            "metadata": codec.SYNTHETIC,
        }

    for block in sorted(state.open_text):
        frames.append(TextDone(payload=TextDonePayload(block_id=block), **envelope()))  # type: ignore[arg-type]
    for block in sorted(state.open_thinking):
        frames.append(ThinkingDone(payload=ThinkingDonePayload(block_id=block), **envelope()))  # type: ignore[arg-type]
    for call in state.open_calls:
        payload = ToolResultPayload(call_id=call, status="cancelled", output=CONNECTION_LOST)
        frames.append(ToolResult(payload=payload, **envelope()))  # type: ignore[arg-type]
    if state.turn_id is not None:
        payload_end = TurnEndPayload(turn_id=state.turn_id, stop_reason="disconnected")
        frames.append(TurnEnd(payload=payload_end, **envelope()))  # type: ignore[arg-type]
    if state.agent_state != "idle" or state.pending_interactions:
        frames.append(AgentState(payload=AgentStatePayload(state="idle"), **envelope()))  # type: ignore[arg-type]
    return frames


def unfinalizes(buffer_status: BufferStatus, frames: Iterable[Frame | GenericFrame]) -> bool:
    """§7.8.3: a history undoes finalization unless truncated or it holds a session.deleted."""
    if buffer_status.truncated:
        return False
    return not any(isinstance(f, Deleted) for f in frames)


@dataclass
class HistoryPlan:
    """What folding one history would do, computed on a copy.

    ``state`` is the state after the history; ``accepted`` the frames that go into the log
    entry; ``refused`` the frames the state machine refused, with the reason.
    """

    state: SessionState
    accepted: list[Frame | GenericFrame] = field(default_factory=list)
    refused: list[tuple[Frame | GenericFrame, ProtocolError]] = field(default_factory=list)
    unfinalized: bool = False


def plan_history(
    state: SessionState,
    frames: Sequence[Frame | GenericFrame],
    buffer_status: BufferStatus,
    role: SenderRole,
) -> HistoryPlan:
    """Fold a history's ``frames`` (sent by ``role``) into a copy of ``state``.

    Not truncated, no ``session.deleted`` inside: the synthetic frames are taken back out and
    every frame is folded in order; a frame the state machine refuses is left out of
    ``accepted``. Truncated: the frames are accepted as they are but not folded, and the
    finalized state stays final (notes §15.10).
    """
    if not unfinalizes(buffer_status, frames):
        kept = snapshot(state)
        return HistoryPlan(state=kept, accepted=list(frames))
    was_finalized = state.finalized
    work = _unfinalized_copy(state)
    plan = HistoryPlan(state=work, unfinalized=was_finalized)
    for frame in frames:
        frame_role = _role_of(frame, role)
        try:
            fold_entry(work, frame, frame_role)
        except ProtocolError as exc:
            plan.refused.append((frame, exc))
            continue
        plan.accepted.append(frame)
    return plan


def fold_history(state: SessionState, history: History, role: SenderRole) -> SessionState:
    """Fold a logged ``session.history`` entry; returns the new state (replay path)."""
    frames = [codec.decode(raw) for raw in history.payload.frames]
    return plan_history(state, frames, history.payload.buffer_status, role).state


def fold_entry(state: SessionState, frame: Frame | GenericFrame, role: SenderRole) -> SessionState:
    """Fold any frame, histories included. Returns the state to use from now on.

    Most frames change ``state`` in place and return it; a history returns a new object.
    """
    if isinstance(frame, History):
        new = fold_history(state, frame, role)
        state.__dict__.update(new.__dict__)
        return state
    fold(state, frame, role)
    return state


def _unfinalized_copy(state: SessionState) -> SessionState:
    if state.before_finalization is None:
        return snapshot(state)
    restored = snapshot(state.before_finalization)
    for frame, frame_role in state.since_finalization:
        try:
            fold_entry(restored, frame, frame_role)
        except ProtocolError:
            continue
    return restored


def _role_of(frame: Frame | GenericFrame, default: SenderRole) -> SenderRole:
    return frame.sender.role if frame.sender is not None else default
