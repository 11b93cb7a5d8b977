"""Finalization and unfinalization (RAWP §7.8, notes §8, §15.1, §15.10)."""

from __future__ import annotations

import collections
import copy
from dataclasses import dataclass

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from protocol import codec
from protocol import frames as F
from protocol.errors import DirectionError, NotAllowed, ProtocolError
from protocol.finalize import (
    CONNECTION_LOST,
    finalize,
    fold,
    fold_entry,
    fold_history,
    needs_finalization,
    plan_history,
    replay,
    snapshot,
    unfinalizes,
)
from protocol.state import Phase, SenderRole, SessionState, status

from . import strategies as S

PARTICIPANTS: dict[str, F.Sender] = {
    "client": F.Sender(role="client", participant_id="p-client"),
    "edge": F.Sender(role="edge", participant_id="p-edge"),
    "master": S.MASTER,
}
NOT_TRUNCATED = F.BufferStatus(policy_applied="RING", truncated=False, lost_frame_count=0)
TRUNCATED = F.BufferStatus(policy_applied="RING", truncated=True, lost_frame_count=2)


def fold_all(stream: S.Stream, state: SessionState | None = None) -> SessionState:
    """Fold a stream that must be accepted frame by frame."""
    state = SessionState() if state is None else state
    for frame, role in stream:
        fold(state, frame, role)
    return state


def finalize_into(state: SessionState) -> list[F.Frame]:
    """Finalize ``state`` as the master does: make the synthetic frames and fold them."""
    synthetic = finalize(state, session_id=S.SESSION_ID, sender=S.MASTER)
    for frame in synthetic:
        fold(state, frame, "master")
    return synthetic


def busy_state() -> tuple[SessionState, str]:
    """A turn with every kind of unfinished item of §7.8.1."""
    turn_id = S.uuid4(1)
    stream: S.Stream = [
        (S.turn_start(turn_id, 0), "client"),
        (S.agent_state("tool_calling"), "client"),
        (S.text_delta("t2"), "client"),
        (S.text_delta("t1"), "client"),
        (S.thinking_delta("k1"), "client"),
        (S.tool_request("c2"), "client"),
        (S.tool_request("c1"), "client"),
        (S.interaction_request("i1"), "client"),
    ]
    return fold_all(stream), turn_id


# --- finalize ------------------------------------------------------------------------------


def test_finalize_frames_in_section_7_8_1_order() -> None:
    """Blocks, then cancelled tool results, then the turn end, then agent.state idle."""
    state, _ = busy_state()
    before = copy.deepcopy(state)
    frames = finalize(state, session_id=S.SESSION_ID, sender=S.MASTER)
    assert state == before  # finalize only lists frames
    assert [f.type for f in frames] == [
        "agent.text.done",
        "agent.text.done",
        "agent.thinking.done",
        "tool.invoke.result",
        "tool.invoke.result",
        "session.turn.end",
        "agent.state",
    ]
    assert [f.payload.block_id for f in frames[:3]] == ["t1", "t2", "k1"]  # type: ignore[attr-defined]
    assert [f.payload.call_id for f in frames[3:5]] == ["c2", "c1"]  # type: ignore[attr-defined]


def test_finalize_frames_are_synthetic_from_the_master() -> None:
    """Every finalization frame is metadata.synthetic, from the master, and survives the wire."""
    state, _ = busy_state()
    frames = finalize(state, session_id=S.SESSION_ID, sender=S.MASTER)
    assert len({f.message_id for f in frames}) == len(frames)
    for frame in frames:
        assert frame.synthetic
        assert frame.sender is not None
        assert frame.sender.role == "master"
        assert frame.session_id == S.SESSION_ID
        wire = codec.decode(codec.encode(frame))
        assert isinstance(wire, F.Frame)
        assert wire.synthetic


def test_finalize_payloads() -> None:
    """Results cancelled / "Connection lost", turn end disconnected, agent.state idle."""
    state, turn_id = busy_state()
    by_type = {f.type: f for f in finalize(state, session_id=S.SESSION_ID, sender=S.MASTER)}
    result = by_type["tool.invoke.result"].payload  # type: ignore[attr-defined]
    assert (result.status, result.output) == ("cancelled", CONNECTION_LOST)
    assert CONNECTION_LOST == "Connection lost"
    end = by_type["session.turn.end"].payload  # type: ignore[attr-defined]
    assert (end.turn_id, end.stop_reason) == (turn_id, "disconnected")
    assert by_type["agent.state"].payload.state == "idle"  # type: ignore[attr-defined]


def test_folding_finalization_closes_everything() -> None:
    """Folded, the synthetic frames close every item, discard interactions and owe no usage."""
    state, _ = busy_state()
    assert status(state) == "requires_action"
    frames = finalize(state, session_id=S.SESSION_ID, sender=S.MASTER)
    for frame in frames:
        assert fold(state, frame, "master") == []
    assert state.phase is Phase.IDLE
    assert status(state) == "idle"
    assert not state.open_calls
    assert not state.open_text
    assert not state.open_thinking
    assert not state.pending_interactions  # discarded to unblock the UI
    assert state.agent_state == "idle"
    assert state.finalized
    assert not needs_finalization(state)
    assert finalize(state, session_id=S.SESSION_ID, sender=S.MASTER) == []  # idempotent
    # A new turn follows without usage_missing: synthetic turn ends owe no usage.
    assert fold(state, S.turn_start(S.uuid4(2), 1), "client") == []


@settings(max_examples=30, deadline=None)
@given(stream=S.streams(max_steps=30, complete=True))
def test_nothing_to_finalize(stream: S.Stream) -> None:
    """A session with nothing unfinished gets no synthetic frames."""
    for state in (SessionState(), fold_all(stream)):
        assert not needs_finalization(state)
        assert finalize(state, session_id=S.SESSION_ID, sender=S.MASTER) == []


@pytest.mark.parametrize(
    ("stream", "types"),
    [
        ([(S.agent_state("thinking"), "client")], ["agent.state"]),
        ([(S.interaction_request("i"), "client")], ["agent.state"]),
        ([(S.text_delta("t"), "client")], ["agent.text.done"]),
        (
            [(S.turn_start(S.uuid4(1), 0), "client"), (S.turn_end(S.uuid4(1)), "client")],
            [],
        ),
    ],
    ids=["agent-busy", "interaction-pending", "text-outside-turn", "usage-due"],
)
def test_finalize_only_what_is_unfinished(stream: S.Stream, types: list[str]) -> None:
    """Each unfinished item alone yields exactly its closer; usage still due yields nothing."""
    state = fold_all(stream)
    frames = finalize(state, session_id=S.SESSION_ID, sender=S.MASTER)
    assert [f.type for f in frames] == types
    assert needs_finalization(state) == bool(types)


@settings(max_examples=40, deadline=None)
@given(stream=S.streams(max_steps=30))
def test_finalization_of_any_stream(stream: S.Stream) -> None:
    """Any state finalizes into a folded, idle, nothing-open state; frames iff needed."""
    state = fold_all(stream)
    needed = needs_finalization(state)
    frames = finalize_into(state)
    assert bool(frames) == needed
    assert state.finalized == needed
    assert not needs_finalization(state)
    assert status(state) == "idle"
    assert state.phase in (Phase.IDLE, Phase.USAGE_DUE)


# --- unfinalization units -------------------------------------------------------------------


def test_history_restores_the_turn_and_replays() -> None:
    """A full history retracts the synthetic frames and replays the client's frames (§7.8.3)."""
    state, turn_id = busy_state()
    finalize_into(state)
    inner = [S.tool_result("c1"), S.tool_result("c2"), S.text_done("t1")]
    plan = plan_history(state, inner, NOT_TRUNCATED, "client")
    assert plan.unfinalized
    assert plan.accepted == inner
    assert plan.refused == []
    assert plan.state.turn_id == turn_id
    assert plan.state.phase is Phase.TURN_OPEN
    assert plan.state.pending_interactions == {"i1": "confirmation"}
    assert plan.state.open_text == {"t2"}
    assert plan.state.agent_state == "tool_calling"
    assert not plan.state.finalized
    assert state.finalized  # plan_history works on a copy


def test_refused_history_frames_are_left_out() -> None:
    """History frames the state machine refuses are listed in refused, not accepted."""
    state, _ = busy_state()
    finalize_into(state)
    good, bad = S.tool_result("c1"), S.tool_result("nope")
    plan = plan_history(state, [bad, good], NOT_TRUNCATED, "client")
    assert plan.accepted == [good]
    assert [(f, e.code) for f, e in plan.refused] == [(bad, "tool_pairing")]


def test_forged_master_frames_in_a_client_history_are_refused() -> None:
    """A client history cannot smuggle master frames: inner sender is ignored (notes §3)."""
    state, turn_id = busy_state()
    finalize_into(state)
    forged = S.turn_end(turn_id, "disconnected", synthetic=True, sender=S.MASTER)
    answer = S.interaction_response("i1", sender=PARTICIPANTS["edge"])
    for frame in (forged, answer):
        plan = plan_history(
            state, [S.tool_result("c1"), S.tool_result("c2"), frame], NOT_TRUNCATED, "client"
        )
        assert [f for f, _ in plan.refused] == [frame]
        assert plan.state.turn_id == turn_id


def test_master_backlog_keeps_stamped_roles() -> None:
    """A master's backlog history folds each frame as the role stamped on it."""
    turn_id = S.uuid4(1)
    inner = [
        S.turn_start(turn_id, 0, sender=PARTICIPANTS["client"]),
        S.interaction_request("i", sender=PARTICIPANTS["client"]),
        S.interaction_response("i", sender=PARTICIPANTS["edge"]),
    ]
    plan = plan_history(SessionState(), inner, NOT_TRUNCATED, "master")
    assert plan.refused == []
    assert plan.state.turn_id == turn_id


def test_history_from_an_edge_is_refused() -> None:
    """An edge may not send session.history: direction, the finalization stands."""
    state, _ = busy_state()
    finalize_into(state)
    before = copy.deepcopy(state)
    with pytest.raises(DirectionError):
        plan_history(state, [], NOT_TRUNCATED, "edge")
    with pytest.raises(DirectionError):
        fold_entry(state, S.history([]), "edge")
    assert state == before


def test_history_after_delete_is_refused() -> None:
    """A history in a terminated session is not_allowed."""
    state = fold_all([(S.deleted(), "master")])
    with pytest.raises(NotAllowed):
        plan_history(state, [S.user_message()], NOT_TRUNCATED, "client")


@pytest.mark.parametrize("why", ["truncated", "deleted"])
def test_history_that_does_not_unfinalize(why: str) -> None:
    """Truncated, or holding session.deleted: finalized state kept, frames logged not folded."""
    state, _ = busy_state()
    finalize_into(state)
    finalized = snapshot(state)
    inner = [S.tool_result("c1"), S.tool_result("c2")]
    if why == "deleted":
        inner.append(S.deleted("client", "user_request"))
    buffer_status = TRUNCATED if why == "truncated" else NOT_TRUNCATED
    assert not unfinalizes(buffer_status, inner)
    plan = plan_history(state, inner, buffer_status, "client")
    assert not plan.unfinalized
    assert plan.accepted == inner
    assert plan.refused == []
    assert plan.state == finalized  # nothing folded, phase not TERMINATED either
    # The finalization is now final: a later full history does not retract it.
    later = plan_history(plan.state, [S.tool_result("c1")], NOT_TRUNCATED, "client")
    assert [e.code for _, e in later.refused] == ["tool_pairing"]
    # The same through fold_entry (the replay path).
    entry = S.history(inner, truncated=why == "truncated")
    assert fold_entry(state, entry, "client") is state
    assert snapshot(state) == finalized
    assert not state.finalized


def test_live_client_frame_makes_finalization_final() -> None:
    """A client that comes back without a history keeps the finalized state (§7.8.3)."""
    state, _ = busy_state()
    finalize_into(state)
    fold(state, S.user_message(), "edge")
    assert state.finalized  # edge frames keep the record
    fold(state, S.turn_start(S.uuid4(2), 1), "client")
    assert not state.finalized
    plan = plan_history(state, [S.tool_result("c1")], NOT_TRUNCATED, "client")
    assert not plan.unfinalized
    assert [e.code for _, e in plan.refused] == ["tool_pairing"]


def test_unknown_client_frame_also_makes_finalization_final() -> None:
    """An ignorable unknown frame from the client also proves it came back without history."""
    state, _ = busy_state()
    finalize_into(state)
    raw = (
        b'{"type":"x.custom","message_id":"m","session_id":"s-test",'
        b'"timestamp":"2026-11-29T09:00:00Z","metadata":{"ignorable":true},"payload":{}}'
    )
    fold(state, codec.decode(raw), "client")
    assert not state.finalized


def test_fold_history_skips_undecodable_frames() -> None:
    """fold_history skips an inner frame that does not decode, like a refused frame."""
    state, _ = busy_state()
    finalize_into(state)
    entry = S.history([b'{"type":"nope"}', codec.encode(S.tool_result("c1"))])
    after = fold_history(state, entry, "client")
    assert "c1" not in after.open_calls
    assert "c2" in after.open_calls  # retracted cancellation, still open


def test_edge_frames_meanwhile_survive_unfinalization() -> None:
    """Frames folded between finalization and history are re-applied after the retraction."""
    state, _ = busy_state()
    finalize_into(state)
    fold(state, S.renamed("while away", "edge"), "edge")
    fold(state, S.usage(1, 1), "master")
    plan = plan_history(state, [], NOT_TRUNCATED, "client")
    assert plan.state.name == "while away"
    assert plan.state.turn_id is not None


def test_replay_folds_history_entries() -> None:
    """replay() of a log with a history entry equals the live view, not a view without it."""
    turn_id = S.uuid4(1)
    log: S.Stream = [
        (S.turn_start(turn_id, 0), "client"),
        (S.tool_request("c1"), "client"),
    ]
    live = fold_all(log)
    synth = finalize_into(live)
    log += [(f, "master") for f in synth]
    entry = S.history([S.tool_result("c1", "ok")])
    live = fold_entry(live, entry, "client")
    log.append((entry, "client"))
    assert snapshot(replay(log)) == snapshot(live)
    assert live.open_calls == {}
    assert live.turn_id == turn_id


def test_backlog_keeps_the_logged_finalization() -> None:
    """An edge's backlog does not retract the master's logged synthetic frames."""
    turn_id = S.uuid4(1)
    master = fold_all([(S.turn_start(turn_id, 0), "client"), (S.tool_request("c1"), "client")])
    log: S.Stream = [(S.turn_start(turn_id, 0), "client"), (S.tool_request("c1"), "client")]
    log += [(f, "master") for f in finalize_into(master)]
    entries = stamped(log)
    edge = SessionState()
    for frame, role in entries:
        edge = fold_entry(edge, frame, role)
    assert not edge.finalized_locally
    assert finalize(edge, session_id=S.SESSION_ID, sender=S.MASTER) == []  # nothing left to do
    log.append((S.presence("attached"), "master"))
    edge = fold_entry(edge, backlog(stamped_bytes(log)[-1:]), "master")
    assert edge.open_calls == {}
    assert snapshot(edge) == snapshot(replay(stamped(log)))
    # ... and the record survives, so the client's history entry still retracts it later.
    assert edge.finalized
    entry = S.history([S.tool_result("c1")])
    log.append((entry, "client"))
    edge = fold_entry(edge, stamped(log)[-1][0], "client")
    assert edge.turn_id == turn_id
    assert snapshot(edge) == snapshot(replay(stamped(log)))


def test_backlog_retracts_a_local_finalization() -> None:
    """An edge that finalized on its own drop unfinalizes with the master's backlog (§7.8.3)."""
    turn_id = S.uuid4(1)
    log: S.Stream = [(S.turn_start(turn_id, 0), "client"), (S.tool_request("c1"), "client")]
    edge = SessionState()
    for frame, role in stamped(log):
        edge = fold_entry(edge, frame, role)
    local = finalize_into(edge)
    assert local
    assert edge.finalized_locally
    log += [(S.tool_result("c1"), "client"), (S.turn_end(turn_id), "client")]
    edge = fold_entry(edge, backlog(stamped_bytes(log)[2:]), "master")
    assert not edge.finalized
    assert edge.phase is Phase.USAGE_DUE  # the real turn end, not the synthetic one
    assert snapshot(edge) == snapshot(replay(stamped(log)))


def test_edge_dropping_mid_finalization() -> None:
    """An edge dropping amid the master's synthetic frames ends equal to the log's replay."""
    # It finalizes the rest locally; the backlog takes back only its own synthetic frames, the
    # client's history entry later takes back the log's too.
    turn_id = S.uuid4(1)
    master = fold_all([(S.turn_start(turn_id, 0), "client"), (S.tool_request("c1"), "client")])
    log: S.Stream = [(S.turn_start(turn_id, 0), "client"), (S.tool_request("c1"), "client")]
    log += [(f, "master") for f in finalize_into(master)]  # result, turn end
    entries = stamped(log)
    edge = SessionState()
    for frame, role in entries[:3]:  # got the cancelled result, not the synthetic turn end
        edge = fold_entry(edge, frame, role)
    assert [f.type for f in finalize_into(edge)] == ["session.turn.end"]
    assert edge.finalized_locally
    edge = fold_entry(edge, backlog(stamped_bytes(log)[3:]), "master")
    assert snapshot(edge) == snapshot(replay(entries))
    assert edge.finalized
    assert not edge.finalized_locally
    log.append((S.history([S.tool_result("c1")]), "client"))
    edge = fold_entry(edge, stamped(log)[-1][0], "client")
    assert edge.turn_id == turn_id
    assert edge.open_calls == {}
    assert snapshot(edge) == snapshot(replay(stamped(log)))


# --- property tests over random streams and cut points (notes §8) --------------------------

Mode = str  # "history" | "truncated" | "deleted" | "live" | "gone"
MEANWHILE = st.lists(
    st.sampled_from(["user_message", "rename", "presence", "error", "cancel", "usage"]),
    max_size=3,
)


def meanwhile_frame(kind: str) -> tuple[F.Frame, SenderRole]:
    """A frame an edge or the master may send while the client is away (order-insensitive)."""
    if kind == "user_message":
        return S.user_message(), "edge"
    if kind == "rename":
        return S.renamed("renamed-while-away", "edge"), "edge"
    if kind == "presence":
        return S.presence("detached"), "master"
    if kind == "error":
        return S.session_error(), "edge"
    if kind == "cancel":
        return S.cancel(), "edge"
    return S.usage(99, 99), "master"


@dataclass
class Outcome:
    live: SessionState
    log: S.Stream  # what the master logged, in order (history entries included)
    plans_unfinalized: list[bool]


@dataclass
class Disconnect:
    cut: int
    reattach: int
    meanwhile: list[tuple[F.Frame, SenderRole]]
    mode: Mode


def run_master(stream: S.Stream, disconnects: list[Disconnect]) -> Outcome:
    """Simulate the master: fold live frames, finalize at each cut, fold the client's history."""
    state = SessionState()
    log: S.Stream = []
    unfinalized: list[bool] = []

    def live(frame: F.Frame, role: SenderRole) -> None:
        nonlocal state
        try:
            fold(state, frame, role)
        except ProtocolError:
            return  # refused: not logged
        log.append((frame, role))

    pos = 0
    for d in disconnects:
        for frame, role in stream[pos : d.cut]:
            live(frame, role)
        log += [(f, "master") for f in finalize_into(state)]
        for frame, role in d.meanwhile:
            live(frame, role)
        window = stream[d.cut : d.reattach]
        client = [f for f, r in window if r == "client"]
        edge = [(f, r) for f, r in window if r != "client"]
        if d.mode == "gone":
            pos = len(stream)  # the client never comes back
            break
        if d.mode == "live":
            for frame in client:
                live(frame, "client")
        else:
            inner = (
                [*client, S.deleted("client", "user_request")] if d.mode == "deleted" else client
            )
            truncated = d.mode == "truncated"
            status_ = TRUNCATED if truncated else NOT_TRUNCATED
            plan = plan_history(state, inner, status_, "client")
            unfinalized.append(plan.unfinalized)
            entry = S.history(plan.accepted, truncated=truncated)
            state = plan.state
            log.append((entry, "client"))
        for frame, role in edge:
            live(frame, role)  # the people answer after the reattach
        pos = d.reattach
    for frame, role in stream[pos:]:
        live(frame, role)
    return Outcome(state, log, unfinalized)


def without_disconnects(stream: S.Stream, disconnects: list[Disconnect]) -> SessionState:
    """The same frames in the same relative order, with the client never away."""
    order: S.Stream = []
    pos = 0
    for d in disconnects:
        order += stream[pos : d.cut]
        window = stream[d.cut : d.reattach]
        order += d.meanwhile
        order += [(f, r) for f, r in window if r == "client"]
        order += [(f, r) for f, r in window if r != "client"]
        pos = d.reattach
    order += stream[pos:]
    return fold_all(order)


def stamped_bytes(log: S.Stream) -> list[bytes]:
    """The log as delivered: each entry's bytes with the master's seq and sender."""
    return [
        codec.stamp(codec.encode(frame), frame, seq, PARTICIPANTS[role])
        for seq, (frame, role) in enumerate(log, start=1)
    ]


def stamped(log: S.Stream) -> list[tuple[F.Frame | F.GenericFrame, SenderRole]]:
    """The log as a new edge reads it: stamped bytes (seq, sender) decoded again."""
    out: list[tuple[F.Frame | F.GenericFrame, SenderRole]] = []
    for raw in stamped_bytes(log):
        decoded = codec.decode(raw)
        assert decoded.sender is not None
        out.append((decoded, decoded.sender.role))
    return out


def backlog(raws: list[bytes]) -> F.History:
    """A master → edge session.history carrying already stamped log entries."""
    return S.history(raws, sender=S.MASTER)


def effective_tool_results(log: S.Stream) -> tuple[list[str], collections.Counter[str]]:
    """The tool requests in the log, and per call the results that took effect (§7.8.3).

    A synthetic result counts unless a later history that unfinalizes retracts it before the
    client sends anything live; the frames of a history that does not unfinalize never count.
    """
    requests: list[str] = []
    results: collections.Counter[str] = collections.Counter()
    retractable: list[str] = []

    def real(frame: F.Frame | F.GenericFrame) -> None:
        if isinstance(frame, F.ToolRequest):
            requests.append(frame.payload.call_id)
        elif isinstance(frame, F.ToolResult):
            results[frame.payload.call_id] += 1

    for frame, role in log:
        if isinstance(frame, F.History):
            inner = [codec.decode(raw) for raw in frame.payload.frames]
            if unfinalizes(frame.payload.buffer_status, inner):
                for call in retractable:
                    results[call] -= 1
                for f in inner:
                    real(f)
            retractable = []
        elif frame.synthetic and isinstance(frame, F.ToolResult):
            results[frame.payload.call_id] += 1
            retractable.append(frame.payload.call_id)
        else:
            if role == "client":
                retractable = []  # the client came back live: the finalization is final
            real(frame)
    return requests, results


@st.composite
def scenarios(
    draw: st.DrawFn, modes: tuple[Mode, ...], max_disconnects: int = 2
) -> tuple[S.Stream, list[Disconnect]]:
    """A complete realistic stream and up to ``max_disconnects`` disconnect windows in it."""
    stream = draw(S.streams(max_steps=35, complete=draw(st.booleans())))
    # Cuts where a tool call is open are the interesting ones (cancelled results to retract):
    # draw them half of the time.
    busy, state = [], SessionState()
    for i, (frame, role) in enumerate(stream, start=1):
        fold(state, frame, role)
        if state.open_calls:
            busy.append(i)
    anywhere = st.integers(0, len(stream))
    point = st.one_of(anywhere, st.sampled_from(busy)) if busy else anywhere
    points = sorted(draw(st.lists(point, min_size=2, max_size=2 * max_disconnects)))
    if len(points) % 2:
        points.pop()
    disconnects = [
        Disconnect(
            cut=points[i],
            reattach=points[i + 1],
            meanwhile=[meanwhile_frame(k) for k in draw(MEANWHILE)],
            mode=draw(st.sampled_from(modes)),
        )
        for i in range(0, len(points), 2)
    ]
    return stream, disconnects


PROPERTY = settings(max_examples=60, deadline=None)


@PROPERTY
@given(scenario=scenarios(modes=("history",)))
def test_invariant_2_unfinalization_restores_the_view(
    scenario: tuple[S.Stream, list[Disconnect]],
) -> None:
    """After unfinalization the view equals the view without the disconnect (notes §8 (2))."""
    stream, disconnects = scenario
    outcome = run_master(stream, disconnects)
    expected = without_disconnects(stream, disconnects)
    event(f"synthetic frames retracted: {sum(outcome.plans_unfinalized)}")
    assert snapshot(outcome.live) == snapshot(expected)
    assert not outcome.live.finalized
    # Every frame made it into the log (nothing refused on the way).
    logged = sum(
        len(f.payload.frames) if isinstance(f, F.History) else 1
        for f, r in outcome.log
        if not f.synthetic
    )
    assert logged == len(stream) + sum(len(d.meanwhile) for d in disconnects)


@PROPERTY
@given(scenario=scenarios(modes=("history", "truncated", "deleted", "live", "gone")))
def test_invariant_3_replay_equals_live(scenario: tuple[S.Stream, list[Disconnect]]) -> None:
    """A view that folded everything live equals a replay of the log from seq 1 (notes §8 (3))."""
    stream, disconnects = scenario
    outcome = run_master(stream, disconnects)
    log = stamped(outcome.log)
    replayed = replay(log)
    assert snapshot(replayed) == snapshot(outcome.live)
    assert replayed.finalized == outcome.live.finalized
    # An edge connected throughout folds each entry as it arrives, histories included.
    edge = SessionState()
    for frame, role in log:
        edge = fold_entry(edge, frame, role)
    assert snapshot(edge) == snapshot(outcome.live)


@PROPERTY
@given(
    scenario=scenarios(modes=("history", "truncated", "deleted", "live", "gone")),
    data=st.data(),
)
def test_invariant_3_for_an_edge_that_drops_and_reattaches(
    scenario: tuple[S.Stream, list[Disconnect]], data: st.DataObject
) -> None:
    """An edge that drops (finalizing locally) and folds its backlog ends equal to the replay."""
    stream, disconnects = scenario
    log = run_master(stream, disconnects).log
    raws = stamped_bytes(log)
    entries = stamped(log)
    drop = data.draw(st.integers(0, len(log)), label="drop")
    back = data.draw(st.integers(drop, len(log)), label="back")
    edge = SessionState()
    for frame, role in entries[:drop]:
        edge = fold_entry(edge, frame, role)
    local = finalize(edge, session_id=S.SESSION_ID, sender=S.MASTER)  # §7.8.1 on its own drop
    event(f"edge finalized locally: {bool(local)}, log finalization in effect: {edge.finalized}")
    for frame in local:
        fold(edge, frame, "master")
    edge = fold_entry(edge, backlog(raws[drop:back]), "master")
    for frame, role in entries[back:]:
        edge = fold_entry(edge, frame, role)
    assert snapshot(edge) == snapshot(replay(entries))


@PROPERTY
@given(scenario=scenarios(modes=("history", "truncated", "deleted", "live", "gone")))
def test_invariant_4_one_effective_result_per_request(
    scenario: tuple[S.Stream, list[Disconnect]],
) -> None:
    """Every tool request in the log has exactly one effective result (notes §8 (4))."""
    stream, disconnects = scenario
    outcome = run_master(stream, disconnects)
    requests, results = effective_tool_results(outcome.log)
    cancelled = sum(1 for f, _ in outcome.log if f.synthetic and isinstance(f, F.ToolResult))
    event(f"synthetic cancelled results: {min(cancelled, 2)}+")
    assert len(requests) == len(set(requests))
    assert set(results) <= set(requests)
    for call in requests:
        expected = 0 if call in outcome.live.open_calls else 1
        assert results[call] == expected, call


@PROPERTY
@given(scenario=scenarios(modes=("truncated", "deleted"), max_disconnects=1))
def test_unusable_history_keeps_the_finalized_state(
    scenario: tuple[S.Stream, list[Disconnect]],
) -> None:
    """A truncated history, or one holding session.deleted, leaves the finalized view as it was."""
    stream, disconnects = scenario
    (d,) = disconnects
    state = fold_all(stream[: d.cut])
    finalize_into(state)
    fold_all(d.meanwhile, state)
    finalized = snapshot(state)
    client = [f for f, r in stream[d.cut : d.reattach] if r == "client"]
    inner = [*client, S.deleted("client", "user_request")] if d.mode == "deleted" else client
    entry = S.history(inner, truncated=d.mode == "truncated")
    plan = plan_history(state, inner, entry.payload.buffer_status, "client")
    assert not plan.unfinalized
    assert plan.accepted == inner
    assert snapshot(plan.state) == finalized
    assert snapshot(fold_entry(state, entry, "client")) == finalized
    assert not state.finalized
