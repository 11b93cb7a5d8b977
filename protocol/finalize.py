"""Finalization and unfinalization (RAWP §7.8, notes §8, §15.1, §15.10) as pure functions.

* :func:`finalize` lists the synthetic frames that close a session's unfinished state when
  its client's connection is lost (§7.8.1), each with ``metadata.synthetic: true``. Folding
  them (with :func:`fold`) records the state they replaced.
* :func:`fold` is how every frame of a session changes its state: the table's check
  (:func:`protocol.state.check`), then the record of what a later history may retract
  (the state before the first synthetic frame and the real frames folded since), then the
  table's apply. :func:`make_final` drops the record (the finalization can no longer be
  taken back); :func:`snapshot` copies a state without it; :func:`replay` folds a log.
* :func:`fold_history` folds a ``session.history``: when it is not truncated and holds no
  ``session.deleted``, the synthetic frames are taken back out (the state from just before
  them is restored and the real frames folded since are re-applied) and the history's frames
  are replayed in order (§7.8.3). Otherwise the finalized state is kept.
* Whose synthetic frames a history takes out depends on who sent it: a client's history (a
  log entry, notes §15.1) takes out the finalization in effect; the master's backlog to a
  reattaching edge or client takes out only the finalization that view made itself when its
  own connection dropped (synthetic frames without a ``seq``), never the log's own, which
  stays until the client's history entry inside the backlog retracts it. Inner ``sender``
  fields are trusted only in the master's backlog (notes §3: ignored on input).

The master, the client library and the dashboard all use these, so every view agrees.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from . import codec
from .errors import DirectionError, NotAllowed, ProtocolError, StateViolation
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
from .state import CONNECTION_TYPES, Phase, SenderRole, SessionState, allowed_types, apply, check

__all__ = [
    "CONNECTION_LOST",
    "HistoryPlan",
    "finalize",
    "fold",
    "fold_entry",
    "fold_history",
    "make_final",
    "needs_finalization",
    "plan_history",
    "replay",
    "snapshot",
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

    Raises :class:`DirectionError` when ``role`` may not send a history and
    :class:`NotAllowed` once the session is terminated; ``state`` is never changed.
    """
    if "session.history" not in allowed_types(role):
        # Without this an edge could retract the master's finalization with an empty history.
        raise DirectionError(f"a {role} may not send session.history (notes §4)")
    if state.phase is Phase.TERMINATED:
        raise NotAllowed("the session has ended; no further frames are accepted")
    # A participant's history decides the finalization in effect (§7.8.3); the master's
    # backlog decides only one this view made itself — the log's own synthetic frames stay
    # (record included) until the client's history entry inside the backlog retracts them.
    ours = state.finalized and (role != "master" or state.finalized_locally)
    if not unfinalizes(buffer_status, frames):
        # The finalized state is kept and becomes final (its record is dropped).
        kept = snapshot(state) if ours else copy.deepcopy(state)
        return HistoryPlan(state=kept, accepted=list(frames))
    work = _unfinalized_copy(state, role) if ours else copy.deepcopy(state)
    plan = HistoryPlan(state=work, unfinalized=ours)
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
    """Fold a logged ``session.history`` entry; returns the new state (replay path).

    An element that does not decode is skipped like a frame the state machine refuses, so a
    replay agrees with a live fold that never saw it.
    """
    frames: list[Frame | GenericFrame] = []
    for raw in history.payload.frames:
        try:
            frames.append(codec.decode(raw))
        except ProtocolError:
            continue
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


def _unfinalized_copy(state: SessionState, role: SenderRole) -> SessionState:
    """A copy of ``state`` with the synthetic frames a history from ``role`` undoes taken out."""
    before = state.before_finalization
    assert before is not None
    if not before.finalized:
        restored = snapshot(before)
    elif role == "master":
        restored = copy.deepcopy(before)  # the log's own finalization, nested inside ours, stays
    else:
        restored = _unfinalized_copy(before, role)  # a client's history undoes both
    for frame, frame_role in state.since_finalization:
        try:
            fold_entry(restored, frame, frame_role)
        except ProtocolError:
            continue
    return restored


def _role_of(frame: Frame | GenericFrame, default: SenderRole) -> SenderRole:
    # ``sender`` is set by the master on delivery and ignored on input (notes §3): only the
    # master's backlog carries stamped frames. A participant's history speaks for that
    # participant alone, else a client could pass a forged synthetic frame off as the master's.
    if default == "master" and frame.sender is not None:
        return frame.sender.role
    return default


# --- the unfinalization record (§7.8.3) ----------------------------------------------------


def fold(
    state: SessionState, frame: Frame | GenericFrame, role: SenderRole
) -> list[StateViolation]:
    """Check, record, then apply ``frame`` from ``role`` to ``state`` (in place).

    Returns the warnings of :func:`protocol.state.check` (``usage_missing``); raises the
    :class:`ProtocolError` that refuses the frame, changing nothing. ``session.history``
    frames are folded with :func:`fold_entry` / :func:`fold_history`.
    """
    warnings = check(state, frame, role)
    if isinstance(frame, GenericFrame):
        if role == "client" and state.before_finalization is not None:
            # Any live client frame (known type or not) means it came back without a history.
            _record(state, frame, role)
        return warnings
    if frame.type in CONNECTION_TYPES:
        return warnings
    _record(state, frame, role)
    apply(state, frame, role)
    if isinstance(frame, Deleted):
        make_final(state)  # nothing can retract a finalization of a deleted session
    return warnings


def _record(state: SessionState, frame: Frame | GenericFrame, role: SenderRole) -> None:
    if frame.synthetic:
        local = frame.seq is None
        if state.before_finalization is None:
            state.before_finalization = snapshot(state)
            state.finalized_locally = local
        elif local and not state.finalized_locally:
            # This view finalizes on top of the log's finalization (it dropped in the middle of
            # the master's synthetic frames): nest the records, the log's inside ours, so the
            # backlog takes back exactly ours and the client's history both.
            state.before_finalization = copy.deepcopy(state)
            state.since_finalization = []
            state.finalized_locally = True
        return
    if state.before_finalization is None:
        return
    if role == "client":
        # The client came back without (or before) a history: finalization stands (§7.8.3).
        make_final(state)
    else:
        state.since_finalization.append((frame, role))


def make_final(state: SessionState) -> None:
    """Drop the unfinalization record: the finalization in effect can no longer be taken back."""
    state.before_finalization = None
    state.since_finalization = []
    state.finalized_locally = False


def snapshot(state: SessionState) -> SessionState:
    """A deep copy of ``state`` without its own unfinalization record."""
    saved = state.before_finalization, state.since_finalization, state.finalized_locally
    make_final(state)
    try:
        return copy.deepcopy(state)
    finally:
        state.before_finalization, state.since_finalization, state.finalized_locally = saved


def replay(frames: Sequence[tuple[Frame | GenericFrame, SenderRole]]) -> SessionState:
    """Fold ``frames`` into a fresh state, skipping the ones the state machine refuses.

    ``session.history`` entries are folded with :func:`fold_entry`, so a replay of a session
    log reproduces the live view (notes §8 invariant 3, §15.1).
    """
    state = SessionState()
    for frame, role in frames:
        try:
            state = fold_entry(state, frame, role)
        except ProtocolError:
            continue
    return state
