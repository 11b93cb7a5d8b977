"""The session state machine (notes §6): every phase × frame type × role, and each rule."""

from __future__ import annotations

import copy
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import codec
from protocol import frames as F
from protocol.errors import (
    DirectionError,
    InvalidFrame,
    NotAllowed,
    ProtocolError,
    StateViolation,
    UsageMissing,
)
from protocol.finalize import finalize, fold, replay, snapshot
from protocol.state import (
    SESSION_FRAME_TYPES,
    TABLE,
    Effect,
    Phase,
    SenderRole,
    SessionState,
    allowed_types,
    check,
    effect_of,
    stated_status,
    status,
)

from . import strategies as S

# --- helpers -----------------------------------------------------------------------------


def fold_all(stream: S.Stream, state: SessionState | None = None) -> SessionState:
    """Fold a stream that must be accepted frame by frame."""
    state = SessionState() if state is None else state
    for frame, role in stream:
        fold(state, frame, role)
    return state


def refused(state: SessionState, frame: F.Frame, role: SenderRole) -> ProtocolError:
    """Fold ``frame``, expect a refusal, and prove the state did not change."""
    before = copy.deepcopy(state)
    with pytest.raises(ProtocolError) as info:
        fold(state, frame, role)
    assert state == before
    return info.value


def code_of(state: SessionState, frame: F.Frame, role: SenderRole) -> str:
    return refused(state, frame, role).code


def state_at(phase: Phase) -> SessionState:
    """A minimal state in ``phase``."""
    turn_id = S.uuid4(1)
    streams: dict[Phase, S.Stream] = {
        Phase.IDLE: [],
        Phase.TURN_OPEN: [(S.turn_start(turn_id, 0), "client")],
        Phase.USAGE_DUE: [(S.turn_start(turn_id, 0), "client"), (S.turn_end(turn_id), "client")],
        Phase.TERMINATED: [(S.deleted(), "master")],
    }
    state = fold_all(streams[phase])
    assert state.phase is phase
    return state


def in_turn(turn_n: int = 1) -> tuple[SessionState, str]:
    """A state with turn 0 open; returns it and the turn id."""
    turn_id = S.uuid4(turn_n)
    return fold_all([(S.turn_start(turn_id, 0), "client")]), turn_id


# --- an independent oracle of notes §4 and §6 ---------------------------------------------

# notes §4 "from" column (frames.py docstrings add the master's finalization/cleanup frames).
SENDERS: dict[str, set[str]] = {
    "connection.hello": {"client", "edge"},
    "connection.welcome": {"master"},
    "connection.ack": {"client", "edge", "master"},  # master: producer acks (notes §16.3)
    "session.presence": {"master"},
    "session.history": {"client", "master"},
    "session.turn.start": {"client"},
    "session.turn.end": {"client", "master"},
    "session.usage": {"client", "master"},
    "session.compacted": {"client"},
    "session.renamed": {"client", "edge", "master"},
    "session.deleted": {"client", "edge", "master"},
    "session.error": {"client", "edge", "master"},
    "agent.state": {"client", "master"},
    "agent.text.delta": {"client"},
    "agent.text.done": {"client", "master"},
    "agent.thinking.delta": {"client"},
    "agent.thinking.done": {"client", "master"},
    "tool.invoke.request": {"client"},
    "tool.invoke.result": {"client", "master"},
    "agent.interaction.request": {"client"},
    "agent.interaction.cancel": {"client"},  # notes §16.4
    "control.interaction.response": {"edge"},
    "user.message": {"edge"},
    "control.cancel": {"edge"},
    "session.status": {"master"},  # notes §17.4
    "session.revisit.request": {"client"},  # notes §17.5
    "session.revisit.cancel": {"client"},
    "session.wake": {"master"},
}
UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$", re.I)


def rule_codes(state: SessionState, frame: F.Frame, role: SenderRole) -> set[str]:
    """Every notes §6 rule ``frame`` breaks in a live phase (empty: accepted)."""
    tag, p, codes = frame.type, frame.payload, set()  # type: ignore[attr-defined]
    if tag == "session.turn.start":
        if (
            state.phase is Phase.TURN_OPEN
            or not UUID4.match(p.turn_id)
            or p.turn_id in state.turn_ids
            or p.turn_index != state.last_turn_index + 1
        ):
            codes.add("turn_state")
    elif tag == "session.turn.end":
        if p.error is not None and p.stop_reason != "error":
            codes.add("invalid_frame")
        if state.phase is not Phase.TURN_OPEN or p.turn_id != state.turn_id:
            codes.add("turn_state")
        if p.stop_reason == "disconnected" and not frame.synthetic:
            codes.add("turn_state")
        if state.phase is Phase.TURN_OPEN and state.open_calls:
            codes.add("tool_pairing")
    elif tag in ("agent.text.delta", "agent.text.done"):
        if p.block_id in state.closed_blocks or p.block_id in state.open_thinking:
            codes.add("block_state")
    elif tag in ("agent.thinking.delta", "agent.thinking.done"):
        if p.block_id in state.closed_blocks or p.block_id in state.open_text:
            codes.add("block_state")
    elif tag == "tool.invoke.request":
        if p.call_id in state.call_ids:
            codes.add("tool_pairing")
    elif tag == "tool.invoke.result":
        if p.call_id not in state.open_calls:
            codes.add("tool_pairing")
    elif tag == "agent.interaction.request":
        if p.interaction_id in state.interaction_ids:
            codes.add("interaction_state")
    elif tag in ("control.interaction.response", "agent.interaction.cancel"):
        if p.interaction_id not in state.pending_interactions:
            codes.add("interaction_state")
    elif tag == "session.compacted":
        if p.current_token_count > p.previous_token_count:
            codes.add("invalid_frame")
    elif tag == "session.renamed":
        if p.renamed_by != role or p.session_id != frame.session_id:
            codes.add("invalid_frame")
    elif tag == "session.deleted":
        if p.session_id != frame.session_id:
            codes.add("invalid_frame")
    elif tag == "session.revisit.request":
        if p.revisit_id not in state.pending_revisits and len(state.pending_revisits) >= 100:
            codes.add("too_many_revisits")
    elif tag == "session.usage":
        cw = p.context_window
        if cw is not None and cw.utilization is not None and not 0 <= cw.utilization <= 1:
            codes.add("invalid_frame")
    return codes


def oracle(state: SessionState, frame: F.Frame, role: SenderRole) -> set[str]:
    """The codes any of which may refuse ``frame``; empty when it must be accepted."""
    tag = frame.type
    if role not in SENDERS[tag]:
        return {"direction"}  # direction wins over everything (notes §6)
    if tag in ("connection.hello", "connection.welcome"):
        return {"invalid_frame"}  # only valid as the first frame, handled by the connection
    if tag == "connection.ack":
        return set()  # a no-op for the session: never folded, never refused
    codes = {"invalid_frame"} if frame.synthetic and role != "master" else set()
    if state.phase is Phase.TERMINATED:
        # Only the master's own notices about the deleted session are still folded.
        if not (
            role == "master" and tag in ("session.presence", "session.error", "session.status")
        ):
            codes.add("not_allowed")
        return codes
    if tag == "session.history":
        return codes | {"invalid_frame"}  # folded by protocol.finalize, never by fold()
    return codes | rule_codes(state, frame, role)


def next_phase(state: SessionState, frame: F.Frame, role: SenderRole) -> Phase:
    tag = frame.type
    if tag.startswith("connection."):
        return state.phase
    if tag == "session.deleted":
        return Phase.TERMINATED
    if tag == "session.turn.start":
        return Phase.TURN_OPEN
    if tag == "session.turn.end":
        return Phase.IDLE if frame.synthetic or role == "master" else Phase.USAGE_DUE
    if state.phase is Phase.USAGE_DUE and role == "client":
        return Phase.IDLE
    return state.phase


# --- every phase × frame type × role -----------------------------------------------------

ALL_TYPES = sorted(F.frame_types())
ALL_CELLS = [(ph, tag, role) for ph in Phase for tag in ALL_TYPES for role in S.ROLES]


@st.composite
def state_in(draw: st.DrawFn, phase: Phase) -> SessionState:
    """A state reached by a realistic stream, sometimes finalized, in ``phase``."""
    finalized = phase is Phase.IDLE and draw(st.booleans())
    end = "turn_open" if finalized else S.PHASE_ENDS[phase]
    state = fold_all(draw(S.streams(max_steps=12, end=end)))
    if finalized:
        fold_all(
            [(f, "master") for f in finalize(state, session_id=S.SESSION_ID, sender=S.MASTER)],
            state,
        )
        if draw(st.booleans()):
            fold(state, S.user_message(), "edge")  # recorded for unfinalization
    assert state.phase is phase
    return state


@pytest.mark.parametrize(("phase", "tag", "role"), ALL_CELLS, ids=str)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_phase_type_and_role(
    phase: Phase, tag: str, role: SenderRole, data: st.DataObject
) -> None:
    """Each (phase, type, role): accepted, or refused with the oracle's code and no change."""
    state = data.draw(state_in(phase))
    frame = data.draw(S.frames_of_type(tag, state))
    expected = oracle(state, frame, role)
    before = copy.deepcopy(state)
    if expected:
        with pytest.raises(ProtocolError) as info:
            fold(state, frame, role)
        assert info.value.code in expected, (info.value, expected)
        assert state == before  # a refused frame never changes the state
        if "direction" in expected:
            assert isinstance(info.value, DirectionError)
        return
    checked = check(state, frame, role)
    assert state == before  # check alone never changes the state
    warnings = fold(state, frame, role)
    assert [w.code for w in warnings] == [w.code for w in checked]
    usage_due = before.phase is Phase.USAGE_DUE and role == "client"
    owes = usage_due and tag != "session.usage" and not tag.startswith("connection.")
    assert [w.code for w in warnings] == (["usage_missing"] if owes else [])
    assert all(isinstance(w, UsageMissing) for w in warnings)
    assert state.phase is next_phase(before, frame, role)
    if tag.startswith("connection."):
        assert state == before


def test_table_covers_every_session_frame_type() -> None:
    """TABLE has a rule for every session frame type in every phase, except session.history."""
    session_types = set(F.frame_types()) - {
        t for t in F.frame_types() if t.startswith("connection.")
    }
    assert session_types == SESSION_FRAME_TYPES
    for phase in Phase:
        tags = {tag for (ph, tag) in TABLE if ph is phase}
        assert tags == SESSION_FRAME_TYPES - {"session.history"}, phase


@pytest.mark.parametrize("role", S.ROLES)
def test_allowed_types_match_notes_section_4(role: SenderRole) -> None:
    """allowed_types(role) is the notes §4 'from' column."""
    assert allowed_types(role) == {t for t, who in SENDERS.items() if role in who}


EDGE_FORBIDDEN = [t for t in ALL_TYPES if t.startswith(("agent.", "tool.", "session.turn."))]
CLIENT_FORBIDDEN = [t for t in ALL_TYPES if t.startswith("control.")]


@pytest.mark.parametrize(
    ("role", "tag"),
    [("edge", t) for t in EDGE_FORBIDDEN] + [("client", t) for t in CLIENT_FORBIDDEN],
)
@pytest.mark.parametrize("phase", list(Phase), ids=str)
def test_direction_rule(role: SenderRole, tag: str, phase: Phase) -> None:
    """Edge agent.*/tool.*/session.turn.* and client control.* get `direction` in every phase."""
    state = state_at(phase)
    err = refused(state, S.sample(tag), role)
    assert isinstance(err, DirectionError)
    assert err.code == "direction"


# --- connection frames and session.history are not folded by fold() -----------------------


@pytest.mark.parametrize("tag", ["connection.hello", "connection.welcome"])
@pytest.mark.parametrize("phase", list(Phase), ids=str)
def test_handshake_frames_refused_mid_connection(tag: str, phase: Phase) -> None:
    """hello/welcome are only valid as a connection's first frame: invalid_frame."""
    role: SenderRole = "master" if tag == "connection.welcome" else "client"
    err = refused(state_at(phase), S.sample(tag), role)
    assert isinstance(err, InvalidFrame)


@pytest.mark.parametrize("phase", list(Phase), ids=str)
def test_ack_is_a_no_op(phase: Phase) -> None:
    """connection.ack is never refused and never changes the session (not even USAGE_DUE)."""
    state = state_at(phase)
    before = copy.deepcopy(state)
    assert fold(state, S.ack(3), "client") == []
    assert state == before


@pytest.mark.parametrize("phase", [Phase.IDLE, Phase.TURN_OPEN, Phase.USAGE_DUE], ids=str)
def test_history_is_not_folded_by_fold(phase: Phase) -> None:
    """fold() refuses session.history (it goes through protocol.finalize): invalid_frame."""
    err = refused(state_at(phase), S.sample("session.history"), "client")
    assert err.code == "invalid_frame"
    assert "fold_history" in err.message


def test_history_from_edge_is_direction() -> None:
    """An edge may not send session.history."""
    assert code_of(SessionState(), S.sample("session.history"), "edge") == "direction"


# --- turn.start ----------------------------------------------------------------------------


def test_turn_start_opens_a_turn() -> None:
    """A valid turn.start opens the turn: phase TURN_OPEN, status running."""
    state, turn_id = in_turn()
    assert state.phase is Phase.TURN_OPEN
    assert state.turn_id == turn_id
    assert state.last_turn_index == 0
    assert status(state) == "running"


def test_turn_start_needs_uuid4() -> None:
    """A turn_id that is not a UUID v4 (frame built in code, not decoded) is turn_state."""
    bad = S.turn_start("not-a-uuid", 0)
    assert code_of(SessionState(), bad, "client") == "turn_state"
    v1 = S.turn_start("6ba7b810-9dad-11d1-80b4-00c04fd430c8", 0)
    assert code_of(SessionState(), v1, "client") == "turn_state"


def test_turn_start_reused_id() -> None:
    """A turn_id already used in the session is turn_state."""
    turn_id = S.uuid4(1)
    state = fold_all(
        [
            (S.turn_start(turn_id, 0), "client"),
            (S.turn_end(turn_id), "client"),
            (S.usage(), "client"),
        ]
    )
    assert code_of(state, S.turn_start(turn_id, 1), "client") == "turn_state"


@pytest.mark.parametrize("index", [1, 2, 7])
def test_first_turn_index_is_zero(index: int) -> None:
    """The first turn_index is 0."""
    assert code_of(SessionState(), S.turn_start(S.uuid4(1), index), "client") == "turn_state"


@pytest.mark.parametrize("index", [0, 2, 3])
def test_turn_index_is_previous_plus_one(index: int) -> None:
    """turn_index must be previous + 1."""
    a = S.uuid4(1)
    state = fold_all(
        [(S.turn_start(a, 0), "client"), (S.turn_end(a), "client"), (S.usage(), "client")]
    )
    assert code_of(state, S.turn_start(S.uuid4(2), index), "client") == "turn_state"
    fold(state, S.turn_start(S.uuid4(2), 1), "client")
    assert state.last_turn_index == 1


def test_turn_start_while_turn_open() -> None:
    """A turn.start while a turn is open is turn_state."""
    state, _ = in_turn()
    assert code_of(state, S.turn_start(S.uuid4(2), 1), "client") == "turn_state"


# --- turn.end ------------------------------------------------------------------------------


def test_turn_end_closes_the_open_turn() -> None:
    """turn.end with the open turn's id closes it and makes usage due."""
    state, turn_id = in_turn()
    assert fold(state, S.turn_end(turn_id), "client") == []
    assert state.turn_id is None
    assert state.phase is Phase.USAGE_DUE
    assert state.turns_completed == 1
    assert status(state) == "idle"


def test_turn_end_other_id() -> None:
    """turn.end naming another turn is turn_state."""
    state, _ = in_turn()
    assert code_of(state, S.turn_end(S.uuid4(7)), "client") == "turn_state"


@pytest.mark.parametrize("phase", [Phase.IDLE, Phase.USAGE_DUE], ids=str)
def test_turn_end_without_open_turn(phase: Phase) -> None:
    """turn.end with no turn open is turn_state."""
    assert code_of(state_at(phase), S.turn_end(S.uuid4(1)), "client") == "turn_state"


@pytest.mark.parametrize("role", ["client", "master"])
def test_disconnected_only_on_synthetic(role: SenderRole) -> None:
    """stop_reason disconnected on a non-synthetic turn.end is turn_state."""
    state, turn_id = in_turn()
    assert code_of(state, S.turn_end(turn_id, "disconnected"), role) == "turn_state"


def test_synthetic_frames_only_from_master() -> None:
    """A participant may not send metadata.synthetic frames: invalid_frame."""
    state, turn_id = in_turn()
    frame = S.turn_end(turn_id, "disconnected", synthetic=True)
    assert code_of(state, frame, "client") == "invalid_frame"
    assert fold(state, frame, "master") == []
    assert state.phase is Phase.IDLE  # a synthetic turn end owes no usage


def test_turn_end_with_unresolved_tool_call() -> None:
    """turn.end while a tool call of the turn is unresolved is tool_pairing."""
    state, turn_id = in_turn()
    fold(state, S.tool_request("c1"), "client")
    assert code_of(state, S.turn_end(turn_id), "client") == "tool_pairing"
    fold(state, S.tool_result("c1"), "client")
    fold(state, S.turn_end(turn_id), "client")


def test_turn_end_closes_open_blocks() -> None:
    """Open text/thinking blocks end with the turn (notes §15.8); their ids cannot be reused."""
    state, turn_id = in_turn()
    fold_all([(S.text_delta("t"), "client"), (S.thinking_delta("k"), "client")], state)
    fold(state, S.turn_end(turn_id), "client")
    assert not state.open_text
    assert not state.open_thinking
    assert code_of(state, S.text_delta("t"), "client") == "block_state"


def test_master_cleanup_turn_end_owes_no_usage() -> None:
    """The master's termination cleanup turn.end (error, not synthetic) leaves the phase IDLE."""
    state, turn_id = in_turn()
    fold(state, S.turn_end(turn_id, "error"), "master")
    assert state.phase is Phase.IDLE


# --- usage after turn end --------------------------------------------------------------------


def test_usage_right_after_turn_end() -> None:
    """session.usage right after the client's turn.end: no warning, phase back to IDLE."""
    state, turn_id = in_turn()
    fold(state, S.turn_end(turn_id), "client")
    assert fold(state, S.usage(3, 4), "client") == []
    assert state.phase is Phase.IDLE
    assert (state.input_tokens, state.output_tokens) == (3, 4)


@pytest.mark.parametrize(
    "make", [lambda: S.text_delta("x"), lambda: S.turn_start(S.uuid4(2), 1), S.session_error]
)
def test_usage_missing_warning(make: object) -> None:
    """A non-usage client frame right after turn.end warns usage_missing and is still processed."""
    state, turn_id = in_turn()
    fold(state, S.turn_end(turn_id), "client")
    frame = make()  # type: ignore[operator]
    warnings = fold(state, frame, "client")
    assert [w.code for w in warnings] == ["usage_missing"]
    assert isinstance(warnings[0], StateViolation)
    assert state.phase in (Phase.IDLE, Phase.TURN_OPEN)  # processed, no longer owed
    assert fold(state, S.usage(), "client") == []  # a later usage is just usage


def test_usage_missing_not_raised_for_refused_frame() -> None:
    """A refused client frame after turn.end is not 'the next accepted frame': usage still due."""
    state, turn_id = in_turn()
    fold(state, S.turn_end(turn_id), "client")
    refused(state, S.tool_result("nope"), "client")
    assert state.phase is Phase.USAGE_DUE


def test_edge_and_master_frames_do_not_consume_usage_due() -> None:
    """Edge frames and the master's usage totals between turn.end and usage change nothing due."""
    state, turn_id = in_turn()
    fold(state, S.turn_end(turn_id), "client")
    assert fold(state, S.user_message(), "edge") == []
    assert fold(state, S.usage(100, 100), "master") == []
    assert state.phase is Phase.USAGE_DUE
    assert fold(state, S.usage(1, 1), "client") == []
    assert status(state) == "idle"
    assert state.phase.value == "idle"  # (not `is`: mypy keeps the narrowing from above)


def test_master_usage_totals_are_not_added() -> None:
    """The master's session.usage carries totals: it must not be added to the client's counts."""
    state = fold_all([(S.usage(5, 6), "client"), (S.usage(5, 6), "master")])
    assert (state.input_tokens, state.output_tokens) == (5, 6)


def test_synthetic_turn_end_needs_no_usage() -> None:
    """After a synthetic turn end the client's next frame gets no usage_missing."""
    state, turn_id = in_turn()
    fold(state, S.turn_end(turn_id, "disconnected", synthetic=True), "master")
    assert fold(state, S.turn_start(S.uuid4(2), 1), "client") == []


@pytest.mark.parametrize("utilization", [-0.1, 1.5])
def test_usage_utilization_range(utilization: float) -> None:
    """context_window.utilization outside [0, 1] is invalid_frame, also for frames built in code."""
    assert code_of(SessionState(), S.usage(utilization=utilization), "client") == "invalid_frame"
    with pytest.raises(InvalidFrame):
        codec.decode(codec.encode(S.usage(utilization=utilization)))


# --- text and thinking blocks ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["text", "thinking"])
def test_block_lifecycle(kind: str) -> None:
    """Deltas open a new block and append to an open one; done closes it; no delta after done."""
    delta = S.text_delta if kind == "text" else S.thinking_delta
    done = S.text_done if kind == "text" else S.thinking_done
    state, _ = in_turn()
    fold_all([(delta("b"), "client"), (delta("b"), "client")], state)
    assert "b" in (state.open_text if kind == "text" else state.open_thinking)
    fold(state, done("b"), "client")
    assert "b" in state.closed_blocks
    assert code_of(state, delta("b"), "client") == "block_state"
    assert code_of(state, done("b"), "client") == "block_state"


def test_block_kinds_do_not_mix() -> None:
    """A block open as text cannot take thinking deltas or dones, and vice versa."""
    state, _ = in_turn()
    fold_all([(S.text_delta("t"), "client"), (S.thinking_delta("k"), "client")], state)
    assert code_of(state, S.thinking_delta("t"), "client") == "block_state"
    assert code_of(state, S.thinking_done("t"), "client") == "block_state"
    assert code_of(state, S.text_delta("k"), "client") == "block_state"
    assert code_of(state, S.text_done("k"), "client") == "block_state"


def test_done_without_deltas_is_a_whole_block() -> None:
    """A text.done for a new block_id (non-streamed text) is accepted and closes that id."""
    state, _ = in_turn()
    fold(state, S.text_done("whole"), "client")
    assert code_of(state, S.text_delta("whole"), "client") == "block_state"


# --- tool calls ----------------------------------------------------------------------------------


def test_tool_call_pairing() -> None:
    """A result pairs with exactly one open request; call_id is unique in the session."""
    state, _ = in_turn()
    fold(state, S.tool_request("c1"), "client")
    assert code_of(state, S.tool_request("c1"), "client") == "tool_pairing"
    assert code_of(state, S.tool_result("c2"), "client") == "tool_pairing"
    fold(state, S.tool_result("c1"), "client")
    assert not state.open_calls
    err = refused(state, S.tool_result("c1"), "client")
    assert err.code == "tool_pairing"
    assert "already has its result" in err.message
    assert code_of(state, S.tool_request("c1"), "client") == "tool_pairing"


# --- interactions -------------------------------------------------------------------------------


def test_interaction_round_trip() -> None:
    """A response from an edge answers one pending request; status requires_action meanwhile."""
    state, _ = in_turn()
    fold(state, S.interaction_request("i1"), "client")
    assert status(state) == "requires_action"
    fold(state, S.interaction_response("i1"), "edge")
    assert status(state) == "running"
    assert code_of(state, S.interaction_response("i1"), "edge") == "interaction_state"


def test_interaction_errors() -> None:
    """Unknown responses and reused interaction ids are interaction_state."""
    state, _ = in_turn()
    assert code_of(state, S.interaction_response("nope"), "edge") == "interaction_state"
    fold(state, S.interaction_request("i1"), "client")
    assert code_of(state, S.interaction_request("i1"), "client") == "interaction_state"


def test_withdrawal_ends_a_pending_interaction() -> None:
    """agent.interaction.cancel (notes §16.4): requires_action only while another is pending;
    a later response, or a second withdrawal, is interaction_state; the id stays used."""
    state, _ = in_turn()
    fold(state, S.interaction_request("i1"), "client")
    fold(state, S.interaction_request("i2"), "client")
    fold(state, S.interaction_cancel("i1"), "client")
    assert status(state) == "requires_action"
    fold(state, S.interaction_cancel("i2", None), "client")
    assert status(state) == "running"
    assert code_of(state, S.interaction_response("i1"), "edge") == "interaction_state"
    assert code_of(state, S.interaction_cancel("i1"), "client") == "interaction_state"
    assert code_of(state, S.interaction_request("i1"), "client") == "interaction_state"
    assert code_of(state, S.interaction_cancel("i9"), "edge") == "direction"


@pytest.mark.parametrize("role", ["client", "master"])
def test_interaction_response_only_from_edge(role: SenderRole) -> None:
    """control.interaction.response from a client or the master is direction."""
    state, _ = in_turn()
    fold(state, S.interaction_request("i1"), "client")
    assert code_of(state, S.interaction_response("i1"), role) == "direction"


# --- compacted, renamed, deleted ---------------------------------------------------------------


def test_compacted_current_at_most_previous() -> None:
    """session.compacted needs current_token_count <= previous_token_count."""
    state = SessionState()
    assert code_of(state, S.compacted(10, 11), "client") == "invalid_frame"
    fold(state, S.compacted(10, 10), "client")
    assert state.compactions == 1


@pytest.mark.parametrize("role", S.ROLES)
def test_renamed_by_is_the_sender_role(role: SenderRole) -> None:
    """renamed_by must equal the sender's role; a matching rename sets the name."""
    state = SessionState()
    for other in S.ROLES:
        if other != role:
            assert code_of(state, S.renamed("x", other), role) == "invalid_frame"
    fold(state, S.renamed("new name", role), role)
    assert state.name == "new name"


def test_renamed_and_deleted_session_id_must_match() -> None:
    """payload.session_id of renamed/deleted must be the envelope's session."""
    state = SessionState()
    assert code_of(state, S.renamed("x", "edge", "s-other"), "edge") == "invalid_frame"
    assert code_of(state, S.deleted(session_id="s-other"), "master") == "invalid_frame"


@pytest.mark.parametrize("phase", [Phase.IDLE, Phase.TURN_OPEN, Phase.USAGE_DUE], ids=str)
def test_deleted_terminates(phase: Phase) -> None:
    """session.deleted moves any live phase to TERMINATED and clears what was open."""
    state = state_at(phase)
    fold_all([(S.interaction_request("i"), "client"), (S.deleted(), "master")], state)
    assert state.phase is Phase.TERMINATED
    assert status(state) == "terminated"
    assert not state.pending_interactions
    assert state.turn_id is None


@pytest.mark.parametrize("tag", sorted(SESSION_FRAME_TYPES))
@pytest.mark.parametrize("role", S.ROLES)
def test_terminated_refuses_everything(tag: str, role: SenderRole) -> None:
    """After delete every session frame a role may send is not_allowed (master notices aside)."""
    if tag not in allowed_types(role):
        return  # direction, covered by test_every_phase_type_and_role
    state = state_at(Phase.TERMINATED)
    frame = S.sample(tag)
    if tag == "session.renamed":
        frame = S.renamed("n", role)
    if role == "master" and tag in ("session.presence", "session.error", "session.status"):
        before = copy.deepcopy(state)
        assert fold(state, frame, role) == []
        assert state == before
        return
    err = refused(state, frame, role)
    assert isinstance(err, NotAllowed)


def test_terminated_refuses_unknown_ignorable_frames() -> None:
    """An ignorable unknown frame is relayed while live but not_allowed after delete."""
    raw = (
        b'{"type":"x.custom","message_id":"m","session_id":"s-test",'
        b'"timestamp":"2026-11-29T09:00:00Z","metadata":{"ignorable":true},"payload":{}}'
    )
    generic = codec.decode(raw)
    assert isinstance(generic, F.GenericFrame)
    state = SessionState()
    assert fold(state, generic, "edge") == []
    assert state == SessionState()
    state = state_at(Phase.TERMINATED)
    with pytest.raises(NotAllowed):
        fold(state, generic, "client")


# --- derived status -------------------------------------------------------------------------------


def test_status_derivation() -> None:
    """idle -> running (turn open) -> requires_action (interaction pending) -> ... -> terminated."""
    state = SessionState()
    assert status(state) == "idle"
    turn_id = S.uuid4(1)
    fold(state, S.turn_start(turn_id, 0), "client")
    assert status(state) == "running"
    fold(state, S.interaction_request("i"), "client")
    assert status(state) == "requires_action"
    fold(state, S.interaction_response("i"), "edge")
    fold(state, S.turn_end(turn_id, "awaiting_input"), "client")
    assert status(state) == "idle"
    fold(state, S.interaction_request("j"), "client")
    assert status(state) == "requires_action"  # pending outside a turn still needs a person
    fold(state, S.usage(), "client")
    fold(state, S.deleted(), "master")
    assert status(state) == "terminated"


def test_a_status_frame_states_how_the_last_run_ended_except_while_one_runs() -> None:
    """stated_status: the derived status, with the last run's stop_reason unless running."""
    state = SessionState()
    assert stated_status(state) == ("idle", None)
    turn_id = S.uuid4(1)
    fold(state, S.turn_start(turn_id, 0), "client")
    fold(state, S.turn_end(turn_id, "max_tokens"), "client")
    fold(state, S.usage(), "client")
    assert stated_status(state) == ("idle", "max_tokens")
    fold(state, S.turn_start(S.uuid4(2), 1), "client")
    assert stated_status(state) == ("running", None)
    fold(state, S.interaction_request("i"), "client")
    assert stated_status(state) == ("requires_action", "max_tokens")


# --- check, snapshot, replay ----------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(stream=S.streams(max_steps=40))
def test_generated_streams_are_accepted(stream: S.Stream) -> None:
    """Every frame of a generated stream is accepted, with no usage_missing warning."""
    state = SessionState()
    for frame, role in stream:
        assert fold(state, S.roundtrip(frame), role) == []


@settings(max_examples=30, deadline=None)
@given(stream=S.streams(max_steps=40), data=st.data())
def test_check_is_pure_and_agrees_with_fold(stream: S.Stream, data: st.DataObject) -> None:
    """check() never changes the state and returns the same warnings fold() does."""
    state = fold_all(stream)
    tag = data.draw(st.sampled_from(ALL_TYPES))
    role = data.draw(st.sampled_from(S.ROLES))
    frame = data.draw(S.frames_of_type(tag, state))
    before = copy.deepcopy(state)
    try:
        warnings = check(state, frame, role)
    except ProtocolError as exc:
        assert state == before
        with pytest.raises(type(exc)):
            fold(state, frame, role)
        return
    assert state == before
    assert [w.code for w in fold(state, frame, role)] == [w.code for w in warnings]


def test_snapshot_is_a_deep_copy_without_the_record() -> None:
    """snapshot() copies deeply and drops the unfinalization record, leaving the state intact."""
    state, _ = in_turn()
    fold(state, S.tool_request("c"), "client")
    fold_all(
        [(f, "master") for f in finalize(state, session_id=S.SESSION_ID, sender=S.MASTER)], state
    )
    assert state.finalized
    copy_ = snapshot(state)
    assert not copy_.finalized
    assert copy_.since_finalization == []
    assert state.finalized
    copy_.call_ids.add("other")
    assert "other" not in state.call_ids


@settings(max_examples=30, deadline=None)
@given(stream=S.streams(max_steps=40), junk=st.lists(st.sampled_from(ALL_TYPES), max_size=5))
def test_replay_skips_refused_frames(stream: S.Stream, junk: list[str]) -> None:
    """replay() of a stream with refused frames mixed in equals the fold of the accepted ones."""
    mixed: S.Stream = list(stream)
    for i, tag in enumerate(junk):
        # Sample frames sent as an edge: mostly refused (direction, unknown ids), some not.
        mixed.insert(min(i * 3, len(mixed)), (S.sample(tag), "edge"))
    live = SessionState()
    accepted: S.Stream = []
    for frame, role in mixed:
        try:
            fold(live, frame, role)
        except ProtocolError:
            continue
        accepted.append((frame, role))
    assert snapshot(replay(mixed)) == snapshot(live) == snapshot(replay(accepted))


# --- effects (what a frame does beyond the state) --------------------------------------------

EXPECTED_EFFECTS: dict[str, Effect] = {
    "session.renamed": Effect.RENAME,
    "session.presence": Effect.PRESENCE,
}


@pytest.mark.parametrize("tag", sorted(SESSION_FRAME_TYPES - {"session.history"}))
@pytest.mark.parametrize("role", ["client", "edge", "master"])
def test_each_frame_type_has_the_effect_the_table_names(tag: str, role: SenderRole) -> None:
    """Renames rename, presence changes presence; frames without an effect have none."""
    expected = EXPECTED_EFFECTS.get(tag, Effect.NONE)
    if tag == "session.deleted":
        expected = Effect.ENDED if role == "master" else Effect.END_REQUESTED
    if tag == "session.error":
        expected = Effect.NONE  # the sample is not fatal
    assert effect_of(S.sample(tag), role) is expected


@pytest.mark.parametrize("role", ["client", "edge", "master"])
def test_only_a_fatal_error_ends_the_session(role: SenderRole) -> None:
    """session.error names END_WITH_ERROR when fatal, and no effect when not."""
    assert effect_of(S.session_error(fatal=True), role) is Effect.END_WITH_ERROR
    assert effect_of(S.session_error(fatal=False), role) is Effect.NONE


def test_every_rule_of_the_table_names_an_effect_of_its_own_type() -> None:
    """The effect of a type is the same in every phase that accepts it (the table names it)."""
    for (phase, tag), rule in TABLE.items():
        if phase is Phase.TERMINATED or tag == "session.history":
            continue
        assert rule.effect(S.sample(tag), "edge") is effect_of(S.sample(tag), "edge"), (phase, tag)


def test_a_history_is_named_history_and_unknown_types_have_no_effect() -> None:
    """A history's effect is HISTORY (its frames'); an ignorable unknown type does nothing."""
    assert effect_of(S.history([S.renamed("n", "client")]), "client") is Effect.HISTORY
    unknown = codec.decode(
        b'{"type":"x.custom","message_id":"m","session_id":"s-test",'
        b'"timestamp":"2026-11-29T09:00:00Z","metadata":{"ignorable":true},"payload":{}}'
    )
    assert effect_of(unknown, "client") is Effect.NONE
