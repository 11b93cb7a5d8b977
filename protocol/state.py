"""The session state machine (notes §6): one table of phase × frame type → rule.

:func:`check` looks the pair ``(state.phase, frame.type)`` up in :data:`TABLE`; a pair that is
not in the table is a protocol error. A rule first *checks* (raising a
:class:`StateViolation` and changing nothing) and then *applies* (:func:`apply`), so the
master can refuse a frame before logging it. Folding a session's frames — check, keep the
record that lets a finalization be taken back, apply — is :func:`protocol.finalize.fold`:
finalization lives in that one module, this one only holds the table.

Phases (orthogonal facts such as open blocks or pending interactions live in the state)::

    IDLE ──turn.start──▶ TURN_OPEN ──turn.end──▶ USAGE_DUE ──usage──▶ IDLE
      ▲                      │ (synthetic turn.end: no usage due)         │
      └──────────────────────┘◀──────── any other client frame: usage_missing (warning)
    any ──session.deleted──▶ TERMINATED (refuses everything after)

The same reducer folds frames on the master, in the client library and (mirrored) in the
dashboard, so every view of a session agrees with a replay of its log (notes §8 invariant 3).
"""

from __future__ import annotations

import datetime as _dt
import enum
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias

from .errors import (
    BlockStateError,
    DirectionError,
    InteractionStateError,
    InvalidFrame,
    NotAllowed,
    ProtocolError,
    StateViolation,
    ToolPairingError,
    TooManyRevisits,
    TurnStateError,
    UsageMissing,
)
from .frames import (
    UUID4_PATTERN,
    AnyFrame,
    ClientFrame,
    EdgeFrame,
    Frame,
    GenericFrame,
    History,
    MasterFrame,
    SenderRole,
)

__all__ = [
    "CONNECTION_TYPES",
    "MAX_PENDING_REVISITS",
    "SESSION_FRAME_TYPES",
    "TABLE",
    "Effect",
    "PendingRevisit",
    "Phase",
    "Rule",
    "SenderRole",
    "SessionState",
    "Status",
    "allowed_types",
    "apply",
    "check",
    "effect_of",
    "run_open",
    "stated_status",
    "status",
    "status_frame_due",
]

Status: TypeAlias = Literal["idle", "running", "requires_action", "rescheduling", "terminated"]

MAX_PENDING_REVISITS: Final = 100
"""The most revisits one session may have pending (notes §17.5): the next is refused."""


@dataclass(frozen=True, slots=True)
class PendingRevisit:
    """A revisit the client asked for and that is not woken or withdrawn yet (notes §17.5).

    ``request_id`` is the ``message_id`` of the request that set it (a later request with the
    same ``revisit_id`` replaces it): the master's wake for it is named after it.
    """

    at: _dt.datetime
    reason: str | None
    request_id: str


class Phase(enum.Enum):
    """Where the session is in its turn lifecycle."""

    # Members are singletons compared by identity: hashed by identity too, in C (Enum's own
    # __hash__ is Python code, run twice per folded frame for the TABLE lookups).
    __hash__ = object.__hash__

    IDLE = "idle"
    TURN_OPEN = "turn_open"
    USAGE_DUE = "usage_due"
    TERMINATED = "terminated"


@dataclass
class SessionState:
    """Everything the rules of notes §6 need to judge the next frame, and the UI totals."""

    phase: Phase = Phase.IDLE
    turn_id: str | None = None
    last_turn_index: int = -1
    turn_ids: set[str] = field(default_factory=set)
    open_text: set[str] = field(default_factory=set)
    open_thinking: set[str] = field(default_factory=set)
    closed_blocks: set[str] = field(default_factory=set)
    open_calls: dict[str, str] = field(default_factory=dict)  # call_id -> tool_name
    call_ids: set[str] = field(default_factory=set)
    pending_interactions: dict[str, str] = field(default_factory=dict)  # id -> kind
    interaction_ids: set[str] = field(default_factory=set)
    agent_state: str = "idle"
    name: str = ""
    turns_completed: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_used: float = 0.0
    cost_unit: str = ""
    compactions: int = 0
    # How the last run ended and, when it failed, why (notes §17.4): ``(code, message)``.
    stop_reason: str | None = None
    last_error: tuple[str, str] | None = None
    # The status the log last stated in a session.status (None: none yet); the master logs a
    # new one whenever status() differs from it.
    logged_status: str | None = None
    # A user.message reached the session while no turn was open, and no turn started since:
    # the run is about to start (notes §17.3; the master bounds it in time).
    run_requested: bool = False
    # Revisits the client asked for that are neither woken nor withdrawn (notes §17.5), by
    # revisit_id; while any is pending and no turn is open the status is ``rescheduling``.
    pending_revisits: dict[str, PendingRevisit] = field(default_factory=dict)
    # How many session.wake the log holds: a client's attach looks for wakes it has not
    # been given only when there are any.
    wakes: int = 0
    # §7.8.3: the state as it was just before the first synthetic frame, and the real frames
    # folded since, so unfinalization can take exactly the synthetic frames back out. When a
    # local finalization lands on top of the log's, ``before_finalization`` keeps the log's
    # record inside it.
    before_finalization: SessionState | None = None
    since_finalization: list[tuple[Frame | GenericFrame, SenderRole]] = field(default_factory=list)
    # True when this view made the synthetic frames itself (no ``seq``: never logged), as an
    # edge or client does when its own connection drops; False when they came from the log.
    # A master backlog retracts only a local finalization (the log's own is retracted by the
    # client's history entry when, and only when, the log holds one).
    finalized_locally: bool = False

    @property
    def finalized(self) -> bool:
        """True while synthetic frames are in effect (not yet taken back or made final)."""
        return self.before_finalization is not None


def status(state: SessionState) -> Status:
    """Derived status (seed 000, notes §17.5): terminated / requires_action / running /
    rescheduling (a revisit is pending) / idle, in that precedence."""
    if state.phase is Phase.TERMINATED:
        return "terminated"
    if state.pending_interactions:
        return "requires_action"
    if state.phase is Phase.TURN_OPEN:
        return "running"
    if state.pending_revisits:
        return "rescheduling"
    return "idle"


def run_open(state: SessionState) -> bool:
    """A run is open or about to start (notes §17.3): a new user.message waits for it."""
    return state.phase is Phase.TURN_OPEN or state.run_requested


def stated_status(state: SessionState) -> tuple[Status, str | None]:
    """What a ``session.status`` states now (notes §17.4): the derived status, and how the
    last run ended (None while one runs)."""
    now = status(state)
    return now, None if now == "running" else state.stop_reason


def status_frame_due(state: SessionState) -> bool:
    """The derived status differs from the last one the log stated (notes §17.4); a log
    that stated none yet is idle, as every session starts. Not between a client's turn end
    and its usage: the usage comes right after the turn end in the log (§7.5.2), the status
    after it."""
    if state.phase is Phase.USAGE_DUE:
        return False
    return status(state) != (state.logged_status or "idle")


# --- direction -----------------------------------------------------------------------------


def _tags(union: object) -> frozenset[str]:
    return frozenset(str(cls.__struct_config__.tag) for cls in union.__args__)  # type: ignore[attr-defined]


_MAY_SEND: Final[dict[SenderRole, frozenset[str]]] = {
    "client": _tags(ClientFrame),
    "edge": _tags(EdgeFrame),
    "master": _tags(MasterFrame),
}
# Frames about the connection, not the session: never folded.
CONNECTION_TYPES: Final = frozenset({"connection.hello", "connection.welcome", "connection.ack"})
SESSION_FRAME_TYPES: Final = _tags(AnyFrame) - CONNECTION_TYPES


def allowed_types(role: SenderRole) -> frozenset[str]:
    """The frame types ``role`` may send (notes §4)."""
    return _MAY_SEND[role]


# --- rules ---------------------------------------------------------------------------------

Check: TypeAlias = Callable[[SessionState, Frame, SenderRole], None]
Apply: TypeAlias = Callable[[SessionState, Frame, SenderRole], None]


class Effect(enum.Enum):
    """What a frame does beyond the session state, for the master to carry out.

    The table's rules name it (:attr:`Rule.effect`); :func:`effect_of` reads it for one
    frame. The master applies it in one place for every committed entry, whether its own
    worker committed it or another node's, and for the frames inside a client's
    ``session.history``. Whether the sender's credential may do it is the act table's
    (:mod:`protocol.acts`).
    """

    NONE = "none"
    RENAME = "rename"  # session.renamed: the session's name (header) follows the frame
    END_REQUESTED = "end_requested"  # a participant's session.deleted: end it (user_request)
    END_WITH_ERROR = "end_with_error"  # session.error {fatal: true}: end it (error)
    ENDED = "ended"  # the master's session.deleted: the session is over, nothing follows
    PRESENCE = "presence"  # session.presence: who is attached changed (the client, for one)
    HISTORY = "history"  # session.history: its frames' own effects, in order (§7.8.3)
    REVISIT = "revisit"  # session.revisit.request: the store keeps the pending wake
    REVISIT_CANCEL = "revisit_cancel"  # session.revisit.cancel: the store drops it


EffectOf: TypeAlias = Callable[[Frame, SenderRole], Effect]


def _no_effect(frame: Frame, role: SenderRole) -> Effect:
    return Effect.NONE


def _renames(frame: Frame, role: SenderRole) -> Effect:
    return Effect.RENAME


def _presence(frame: Frame, role: SenderRole) -> Effect:
    return Effect.PRESENCE


def _revisits(frame: Frame, role: SenderRole) -> Effect:
    return Effect.REVISIT


def _cancels_revisit(frame: Frame, role: SenderRole) -> Effect:
    return Effect.REVISIT_CANCEL


def _ends_when_fatal(frame: Frame, role: SenderRole) -> Effect:
    return Effect.END_WITH_ERROR if frame.payload.fatal else Effect.NONE  # type: ignore[attr-defined]


def _ends(frame: Frame, role: SenderRole) -> Effect:
    # The master's own session.deleted is the end; anyone else's is a request for it (§15.8).
    return Effect.ENDED if role == "master" else Effect.END_REQUESTED


@dataclass(frozen=True)
class Rule:
    """One cell of the table: what to check, what to change, which phase follows, and what
    the frame does beyond the state.

    ``then`` is the next phase (None keeps the current one); ``effect`` names the
    :class:`Effect` of a frame the rule accepts.
    """

    check: Check
    apply: Apply
    then: Phase | None = None
    effect: EffectOf = _no_effect


def _nothing(state: SessionState, frame: Frame, role: SenderRole) -> None:
    """No check, or no change."""


# The decoder already enforces UUID v4 on the wire; frames built in code (client library,
# tests) are not validated on construction, so the rule is checked here too.
_UUID4_RE: Final = re.compile(UUID4_PATTERN)


def _turn_start_check(state: SessionState, frame: Frame, role: SenderRole) -> None:
    p = frame.payload  # type: ignore[attr-defined]
    if not _UUID4_RE.match(p.turn_id):
        raise TurnStateError(f"turn_id must be a UUID v4, got {p.turn_id!r}")
    if p.turn_id in state.turn_ids:
        raise TurnStateError(f"turn_id {p.turn_id} was already used in this session")
    if p.turn_index != state.last_turn_index + 1:
        raise TurnStateError(
            f"turn_index must be {state.last_turn_index + 1} (previous + 1), got {p.turn_index}"
        )


def _turn_start_apply(state: SessionState, frame: Frame, role: SenderRole) -> None:
    p = frame.payload  # type: ignore[attr-defined]
    state.turn_id = p.turn_id
    state.last_turn_index = p.turn_index
    state.turn_ids.add(p.turn_id)
    state.run_requested = False


def _refuse_turn_start(state: SessionState, frame: Frame, role: SenderRole) -> None:
    raise TurnStateError(
        f"turn {state.turn_id} is still open; end it with session.turn.end before starting another"
    )


def _turn_end_check(state: SessionState, frame: Frame, role: SenderRole) -> None:
    p = frame.payload  # type: ignore[attr-defined]
    if p.error is not None and p.stop_reason != "error":
        raise InvalidFrame(f"error is only for stop_reason 'error', not {p.stop_reason!r}")
    if p.turn_id != state.turn_id:
        raise TurnStateError(f"turn_id {p.turn_id} is not the open turn ({state.turn_id})")
    if p.stop_reason == "disconnected" and not frame.synthetic:
        raise TurnStateError("stop_reason 'disconnected' is reserved for synthetic frames (§7.8.1)")
    if state.open_calls:
        calls = ", ".join(sorted(state.open_calls))
        raise ToolPairingError(f"turn cannot end while tool calls are unresolved: {calls}")


def _turn_end_apply(state: SessionState, frame: Frame, role: SenderRole) -> None:
    # Open text/thinking blocks end with the turn (notes §15.8).
    state.closed_blocks |= state.open_text | state.open_thinking
    state.open_text.clear()
    state.open_thinking.clear()
    state.turn_id = None
    state.turns_completed += 1
    p = frame.payload  # type: ignore[attr-defined]
    state.stop_reason = p.stop_reason
    state.last_error = None if p.error is None else (p.error.code, p.error.message)


def _refuse_turn_end(state: SessionState, frame: Frame, role: SenderRole) -> None:
    raise TurnStateError("no turn is open; session.turn.end must close an open turn")


def _usage_check(state: SessionState, frame: Frame, role: SenderRole) -> None:
    # Also enforced by the decoder; repeated for frames built in code (notes §6 lists it).
    window = frame.payload.context_window  # type: ignore[attr-defined]
    utilization = None if window is None else window.utilization
    if utilization is not None and not 0.0 <= utilization <= 1.0:
        raise InvalidFrame(f"context_window.utilization must be in [0, 1], got {utilization}")


def _usage_apply(state: SessionState, frame: Frame, role: SenderRole) -> None:
    if role != "client":
        # The master's session.usage carries totals (notes §4) computed from the client's
        # usage already folded here; adding it would count everything twice.
        return
    p = frame.payload  # type: ignore[attr-defined]
    state.input_tokens += p.token_usage.input_tokens
    state.output_tokens += p.token_usage.output_tokens
    state.cost_used = p.cost_usage.used
    state.cost_unit = p.cost_usage.unit


def _compacted_check(state: SessionState, frame: Frame, role: SenderRole) -> None:
    p = frame.payload  # type: ignore[attr-defined]
    if p.current_token_count > p.previous_token_count:
        raise InvalidFrame(
            f"current_token_count ({p.current_token_count}) exceeds previous_token_count "
            f"({p.previous_token_count})"
        )


def _compacted_apply(state: SessionState, frame: Frame, role: SenderRole) -> None:
    state.compactions += 1


def _renamed_check(state: SessionState, frame: Frame, role: SenderRole) -> None:
    p = frame.payload  # type: ignore[attr-defined]
    if p.renamed_by != role:
        raise InvalidFrame(f"renamed_by must be the sender's role ({role}), got {p.renamed_by}")
    if p.session_id != frame.session_id:
        raise InvalidFrame("payload.session_id must be the envelope's session_id")


def _renamed_apply(state: SessionState, frame: Frame, role: SenderRole) -> None:
    state.name = frame.payload.name  # type: ignore[attr-defined]


def _deleted_check(state: SessionState, frame: Frame, role: SenderRole) -> None:
    if frame.payload.session_id != frame.session_id:  # type: ignore[attr-defined]
        raise InvalidFrame("payload.session_id must be the envelope's session_id")


def _deleted_apply(state: SessionState, frame: Frame, role: SenderRole) -> None:
    state.open_calls.clear()
    state.pending_interactions.clear()
    state.open_text.clear()
    state.open_thinking.clear()
    state.turn_id = None
    state.agent_state = "idle"
    state.pending_revisits.clear()  # an ended session is never woken (notes §17.5)


def _agent_state_apply(state: SessionState, frame: Frame, role: SenderRole) -> None:
    state.agent_state = frame.payload.state  # type: ignore[attr-defined]
    if frame.synthetic:
        # §7.8.1: finalization discards pending interactions to unblock the UI.
        state.pending_interactions.clear()


def _delta_check(kind: Literal["text", "thinking"]) -> Check:
    def check(state: SessionState, frame: Frame, role: SenderRole) -> None:
        block = frame.payload.block_id  # type: ignore[attr-defined]
        if block in state.closed_blocks:
            raise BlockStateError(f"{kind} block {block} is already done; use a new block_id")
        other = state.open_thinking if kind == "text" else state.open_text
        if block in other:
            raise BlockStateError(f"block {block} is open as a different kind of block")

    return check


def _delta_apply(kind: Literal["text", "thinking"]) -> Apply:
    def apply(state: SessionState, frame: Frame, role: SenderRole) -> None:
        (state.open_text if kind == "text" else state.open_thinking).add(
            frame.payload.block_id  # type: ignore[attr-defined]
        )

    return apply


def _done_check(kind: Literal["text", "thinking"]) -> Check:
    def check(state: SessionState, frame: Frame, role: SenderRole) -> None:
        block = frame.payload.block_id  # type: ignore[attr-defined]
        if block in state.closed_blocks:
            raise BlockStateError(f"{kind} block {block} is already done")
        other = state.open_thinking if kind == "text" else state.open_text
        if block in other:
            raise BlockStateError(f"block {block} is open as a different kind of block")

    return check


def _done_apply(kind: Literal["text", "thinking"]) -> Apply:
    def apply(state: SessionState, frame: Frame, role: SenderRole) -> None:
        block = frame.payload.block_id  # type: ignore[attr-defined]
        (state.open_text if kind == "text" else state.open_thinking).discard(block)
        state.closed_blocks.add(block)

    return apply


def _tool_request_check(state: SessionState, frame: Frame, role: SenderRole) -> None:
    call = frame.payload.call_id  # type: ignore[attr-defined]
    if call in state.call_ids:
        raise ToolPairingError(f"call_id {call} was already used in this session")


def _tool_request_apply(state: SessionState, frame: Frame, role: SenderRole) -> None:
    p = frame.payload  # type: ignore[attr-defined]
    state.call_ids.add(p.call_id)
    state.open_calls[p.call_id] = p.tool_name


def _tool_result_check(state: SessionState, frame: Frame, role: SenderRole) -> None:
    call = frame.payload.call_id  # type: ignore[attr-defined]
    if call not in state.open_calls:
        why = "already has its result" if call in state.call_ids else "has no tool.invoke.request"
        raise ToolPairingError(f"tool.invoke.result for call_id {call}: the call {why}")


def _tool_result_apply(state: SessionState, frame: Frame, role: SenderRole) -> None:
    del state.open_calls[frame.payload.call_id]  # type: ignore[attr-defined]


def _interaction_request_check(state: SessionState, frame: Frame, role: SenderRole) -> None:
    iid = frame.payload.interaction_id  # type: ignore[attr-defined]
    if iid in state.interaction_ids:
        raise InteractionStateError(f"interaction_id {iid} was already used in this session")


def _interaction_request_apply(state: SessionState, frame: Frame, role: SenderRole) -> None:
    p = frame.payload  # type: ignore[attr-defined]
    state.interaction_ids.add(p.interaction_id)
    state.pending_interactions[p.interaction_id] = p.kind


def _interaction_response_check(state: SessionState, frame: Frame, role: SenderRole) -> None:
    iid = frame.payload.interaction_id  # type: ignore[attr-defined]
    if iid not in state.pending_interactions:
        raise InteractionStateError(f"interaction {iid} is not pending (unknown or answered)")


def _interaction_response_apply(state: SessionState, frame: Frame, role: SenderRole) -> None:
    del state.pending_interactions[frame.payload.interaction_id]  # type: ignore[attr-defined]


def _interaction_cancel_check(state: SessionState, frame: Frame, role: SenderRole) -> None:
    iid = frame.payload.interaction_id  # type: ignore[attr-defined]
    if iid not in state.pending_interactions:
        raise InteractionStateError(f"interaction {iid} is not pending (unknown or answered)")


def _interaction_cancel_apply(state: SessionState, frame: Frame, role: SenderRole) -> None:
    # notes §16.4: withdrawn like answered; a later response is refused interaction_state.
    del state.pending_interactions[frame.payload.interaction_id]  # type: ignore[attr-defined]


def _user_message_apply(state: SessionState, frame: Frame, role: SenderRole) -> None:
    if state.phase is not Phase.TURN_OPEN:
        state.run_requested = True


def _revisit_request_check(state: SessionState, frame: Frame, role: SenderRole) -> None:
    # How far ``at`` may lie from now is the master's check (it has the clock): relay side.
    rid = frame.payload.revisit_id  # type: ignore[attr-defined]
    if rid not in state.pending_revisits and len(state.pending_revisits) >= MAX_PENDING_REVISITS:
        raise TooManyRevisits(
            f"the session has {MAX_PENDING_REVISITS} revisits pending; cancel one first"
        )


def _revisit_request_apply(state: SessionState, frame: Frame, role: SenderRole) -> None:
    p = frame.payload  # type: ignore[attr-defined]
    # re-inserted: the same id again reschedules it (and moves it last)
    state.pending_revisits.pop(p.revisit_id, None)
    state.pending_revisits[p.revisit_id] = PendingRevisit(p.at, p.reason, frame.message_id)


def _revisit_done_apply(state: SessionState, frame: Frame, role: SenderRole) -> None:
    # A cancel of an unknown or woken id changes nothing (logged all the same); a wake
    # ends the revisit it names.
    state.pending_revisits.pop(frame.payload.revisit_id, None)  # type: ignore[attr-defined]
    if role == "master":
        state.wakes += 1


def _status_apply(state: SessionState, frame: Frame, role: SenderRole) -> None:
    state.logged_status = frame.payload.status  # type: ignore[attr-defined]


def _refuse_terminated(state: SessionState, frame: Frame, role: SenderRole) -> None:
    raise NotAllowed("the session was deleted; no further frames are accepted")


def _master_notice_only(state: SessionState, frame: Frame, role: SenderRole) -> None:
    # After delete only the master's own presence/error notices about the session are folded
    # (they change nothing); participants are refused like for every other frame.
    if role != "master":
        _refuse_terminated(state, frame, role)


# Frames that are valid in every live phase and do not move the phase.
_ANYTIME: Final[dict[str, Rule]] = {
    "session.usage": Rule(_usage_check, _usage_apply),
    "session.compacted": Rule(_compacted_check, _compacted_apply),
    "session.renamed": Rule(_renamed_check, _renamed_apply, effect=_renames),
    "session.error": Rule(_nothing, _nothing, effect=_ends_when_fatal),
    "session.presence": Rule(_nothing, _nothing, effect=_presence),
    "session.deleted": Rule(_deleted_check, _deleted_apply, Phase.TERMINATED, effect=_ends),
    "agent.state": Rule(_nothing, _agent_state_apply),
    "agent.text.delta": Rule(_delta_check("text"), _delta_apply("text")),
    "agent.text.done": Rule(_done_check("text"), _done_apply("text")),
    "agent.thinking.delta": Rule(_delta_check("thinking"), _delta_apply("thinking")),
    "agent.thinking.done": Rule(_done_check("thinking"), _done_apply("thinking")),
    "tool.invoke.request": Rule(_tool_request_check, _tool_request_apply),
    "tool.invoke.result": Rule(_tool_result_check, _tool_result_apply),
    "agent.interaction.request": Rule(_interaction_request_check, _interaction_request_apply),
    "agent.interaction.cancel": Rule(_interaction_cancel_check, _interaction_cancel_apply),
    "control.interaction.response": Rule(_interaction_response_check, _interaction_response_apply),
    "user.message": Rule(_nothing, _user_message_apply),
    "control.cancel": Rule(_nothing, _nothing),
    "session.status": Rule(_nothing, _status_apply),
    "session.revisit.request": Rule(
        _revisit_request_check, _revisit_request_apply, effect=_revisits
    ),
    "session.revisit.cancel": Rule(_nothing, _revisit_done_apply, effect=_cancels_revisit),
    "session.wake": Rule(_nothing, _revisit_done_apply),
}

_TURN_START: Final = Rule(_turn_start_check, _turn_start_apply, Phase.TURN_OPEN)
# ``then`` of a turn end depends on the frame (synthetic or not); see _next_phase.
_TURN_END: Final = Rule(_turn_end_check, _turn_end_apply, Phase.USAGE_DUE)
_REFUSED: Final = Rule(_refuse_terminated, _nothing)


def _build_table() -> dict[tuple[Phase, str], Rule]:
    table: dict[tuple[Phase, str], Rule] = {}
    for phase in (Phase.IDLE, Phase.TURN_OPEN, Phase.USAGE_DUE):
        for tag, rule in _ANYTIME.items():
            table[phase, tag] = rule
    # USAGE_DUE → IDLE on the client's next frame (usage or not) is decided in _next_phase:
    # the master's usage totals or an edge's frame must not pay the client's debt.
    table[Phase.IDLE, "session.turn.start"] = _TURN_START
    table[Phase.USAGE_DUE, "session.turn.start"] = _TURN_START
    table[Phase.TURN_OPEN, "session.turn.start"] = Rule(_refuse_turn_start, _nothing)
    table[Phase.TURN_OPEN, "session.turn.end"] = _TURN_END
    table[Phase.IDLE, "session.turn.end"] = Rule(_refuse_turn_end, _nothing)
    table[Phase.USAGE_DUE, "session.turn.end"] = Rule(_refuse_turn_end, _nothing)
    for tag in SESSION_FRAME_TYPES - {"session.history"}:
        table[Phase.TERMINATED, tag] = _REFUSED
    # The master's presence and error notices about a deleted session are still folded (they
    # change nothing). A second session.deleted is refused: the session ended once.
    table[Phase.TERMINATED, "session.presence"] = Rule(_master_notice_only, _nothing)
    table[Phase.TERMINATED, "session.error"] = Rule(_master_notice_only, _nothing)
    table[Phase.TERMINATED, "session.status"] = Rule(_master_notice_only, _nothing)
    return table


TABLE: Final[dict[tuple[Phase, str], Rule]] = _build_table()
"""phase × frame type → rule. ``session.history`` is folded by :mod:`protocol.finalize`."""


# --- entry points --------------------------------------------------------------------------


def check(
    state: SessionState, frame: Frame | GenericFrame, role: SenderRole
) -> list[StateViolation]:
    """Check ``frame`` from ``role`` against ``state`` without changing it.

    Raises the :class:`ProtocolError` that refuses the frame. Returns warnings that do not
    refuse it (``usage_missing``). Precedence: ``direction`` first, then connection frames
    (``connection.ack`` is accepted and never changes the session — the connection layer
    handles it, it is not logged; ``hello``/``welcome`` are ``invalid_frame`` after the
    handshake), then synthetic frames from a participant, then ``not_allowed`` once the
    session is terminated, then the phase's rule. ``session.history`` is refused here: it is
    checked and folded by :func:`protocol.finalize.plan_history`.
    """
    if isinstance(frame, GenericFrame):
        if state.phase is Phase.TERMINATED:
            _refuse_terminated(state, frame, role)  # type: ignore[arg-type]
        return []
    tag = frame.type
    if tag not in _MAY_SEND[role]:
        raise DirectionError(f"a {role} may not send {tag} (notes §4)")
    if tag in CONNECTION_TYPES:
        if tag == "connection.ack":
            return []
        raise InvalidFrame(f"{tag} is only valid as the first frame of a connection")
    if frame.synthetic and role != "master":
        raise InvalidFrame("metadata.synthetic frames are made by the master only (§7.8.1)")
    rule = TABLE.get((state.phase, tag))
    if rule is None:
        if state.phase is Phase.TERMINATED:
            _refuse_terminated(state, frame, role)
        if tag == "session.history":
            raise InvalidFrame(
                "session.history is folded with protocol.finalize.fold_history, not fold()"
            )
        raise ProtocolError(f"{tag} is not valid in phase {state.phase.value}")
    rule.check(state, frame, role)
    if state.phase is Phase.USAGE_DUE and role == "client" and tag != "session.usage":
        return [
            UsageMissing(
                f"session.usage must follow session.turn.end immediately (§7.5.2); got {tag}"
            )
        ]
    return []


def effect_of(frame: Frame | GenericFrame, role: SenderRole) -> Effect:
    """The :class:`Effect` the table names for ``frame`` from ``role`` (a frame of any phase:
    effects do not depend on it). Unknown types and connection frames have none; a history is
    :attr:`Effect.HISTORY`: what it does is what its frames do (each has its own effect)."""
    if isinstance(frame, GenericFrame):
        return Effect.NONE
    if isinstance(frame, History):
        return Effect.HISTORY
    rule = _ANYTIME.get(frame.type)
    return Effect.NONE if rule is None else rule.effect(frame, role)


def apply(state: SessionState, frame: Frame | GenericFrame, role: SenderRole) -> None:
    """Apply ``frame`` from ``role``, which :func:`check` accepted, to ``state`` (in place).

    The table alone: the record that lets finalization be taken back, histories and replays
    are :mod:`protocol.finalize`'s (:func:`protocol.finalize.fold` checks, records, applies).
    """
    if isinstance(frame, GenericFrame) or frame.type in CONNECTION_TYPES:
        return
    rule = TABLE[state.phase, frame.type]
    rule.apply(state, frame, role)
    state.phase = _next_phase(state, frame, role, rule)


def _next_phase(state: SessionState, frame: Frame, role: SenderRole, rule: Rule) -> Phase:
    if rule is _TURN_END and (frame.synthetic or role == "master"):
        return Phase.IDLE
    if rule.then is not None:
        return rule.then
    if state.phase is Phase.USAGE_DUE and role == "client":
        return Phase.IDLE
    return state.phase
