"""SessionView: transcript blocks on the shared state machine; §7.8 finalization in the view."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import frames as F
from protocol.finalize import CONNECTION_LOST, replay, snapshot
from protocol.state import SenderRole
from protocol.view import (
    CompactionBlock,
    InteractionBlock,
    NoticeBlock,
    RunError,
    SessionView,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    TurnBlock,
    UsageBlock,
    UserMessageBlock,
)

from . import strategies as S

SENDERS: dict[SenderRole, F.Sender] = {
    "client": F.Sender(role="client", participant_id="p-client"),
    "edge": F.Sender(role="edge", participant_id="p-edge"),
    "master": S.MASTER,
}
COMPLETE = F.BufferStatus(policy_applied="RING", truncated=False, lost_frame_count=0)
TRUNCATED = F.BufferStatus(policy_applied="RING", truncated=True, lost_frame_count=4)


class Log:
    """A session log in the making: frames get dense seqs and sender stamps."""

    def __init__(self) -> None:
        self.entries: list[tuple[F.Frame, SenderRole]] = []
        self._seqs: Iterator[int] = itertools.count(1)

    def add(self, frame: F.Frame, role: SenderRole) -> F.Frame:
        stamped = msgspec.structs.replace(frame, seq=next(self._seqs), sender=SENDERS[role])
        self.entries.append((stamped, role))
        return stamped

    def add_all(self, stream: S.Stream) -> list[F.Frame]:
        return [self.add(frame, role) for frame, role in stream]


def backlog(frames: list[F.Frame], status: F.BufferStatus = COMPLETE) -> F.History:
    """The master's reattach backlog: a history without a seq, sent by the master."""
    history = S.history(list(frames), sender=S.MASTER)
    return msgspec.structs.replace(
        history, payload=msgspec.structs.replace(history.payload, buffer_status=status)
    )


def fed(entries: list[tuple[F.Frame, SenderRole]]) -> SessionView:
    """A view that received ``entries`` live."""
    view = SessionView(S.SESSION_ID)
    for frame, _ in entries:
        view.receive(frame)
    return view


def busy_turn(log: Log) -> str:
    """A turn left with every §7.8.1 unfinished item; returns its id."""
    turn = S.uuid4(77)
    log.add_all(
        [
            (S.turn_start(turn, 0), "client"),
            (S.agent_state("thinking"), "client"),
            (S.thinking_delta("k1", "hmm"), "client"),
            (S.text_delta("t1", "Hel"), "client"),
            (S.text_delta("t1", "lo"), "client"),
            (S.tool_request("c1", "grep"), "client"),
            (S.interaction_request("i1"), "client"),
        ]
    )
    return turn


# --- rendering -----------------------------------------------------------------------------


def test_a_turn_renders_as_paired_blocks_with_totals() -> None:
    """Deltas accumulate, results pair with their calls, answers with their questions."""
    turn = S.uuid4(1)
    log = Log()
    log.add_all(
        [
            (S.user_message("find the bug"), "edge"),
            (S.turn_start(turn, 0), "client"),
            (S.thinking_delta("k1", "Let me "), "client"),
            (S.thinking_delta("k1", "look."), "client"),
            (S.thinking_done("k1"), "client"),
            (S.tool_request("c1", "grep"), "client"),
            (S.interaction_request("i1"), "client"),
            (S.interaction_response("i1", "yes"), "edge"),
            (S.tool_result("c1", "ok", "line 3"), "client"),
            (S.text_delta("t1", "Found "), "client"),
            (S.text_delta("t1", "it."), "client"),
            (S.text_done("t1"), "client"),
            (S.turn_end(turn), "client"),
            (S.usage(120, 30), "client"),
            (S.compacted(900, 100), "client"),
        ]
    )
    view = fed(log.entries)
    kinds = [type(b) for b in view.blocks]
    assert kinds == [
        UserMessageBlock,
        TurnBlock,
        ThinkingBlock,
        ToolCallBlock,
        InteractionBlock,
        TextBlock,
        UsageBlock,
        CompactionBlock,
    ]
    _, turn_b, thinking, call, ask, text, usage, _ = view.blocks
    assert isinstance(turn_b, TurnBlock)
    assert turn_b.ended
    assert turn_b.stop_reason == "end_turn"
    assert isinstance(thinking, ThinkingBlock)
    assert thinking.text == "Let me look."
    assert thinking.done
    assert isinstance(call, ToolCallBlock)
    assert (call.status, call.output) == ("ok", "line 3")
    assert isinstance(ask, InteractionBlock)
    assert (ask.status, ask.response) == ("answered", "yes")
    assert isinstance(text, TextBlock)
    assert text.text == "Found it."
    assert not text.synthetic
    assert isinstance(usage, UsageBlock)
    assert usage.input_tokens == 120
    assert all(b.turn_id == turn for b in view.blocks[1:7])
    assert (view.totals.input_tokens, view.totals.output_tokens) == (120, 30)
    assert (view.totals.turns, view.totals.tool_calls, view.totals.compactions) == (1, 1, 1)
    assert view.status == "idle"
    assert view.skipped == 0


def test_refused_frames_are_skipped_and_counted_never_raised() -> None:
    """A frame the state machine refuses leaves the view as it was."""
    log = Log()
    log.add_all([(S.turn_end(S.uuid4(5)), "client"), (S.tool_result("nope"), "client")])
    view = fed(log.entries)
    assert view.skipped == 2
    assert view.blocks == []
    assert "turn_state" in view.skipped_reasons[0]
    assert "tool_pairing" in view.skipped_reasons[1]


def test_a_log_entry_is_folded_once() -> None:
    """The same seq delivered twice (live and again in a backlog) is folded once."""
    log = Log()
    (delta,) = log.add_all([(S.text_delta("t1", "x"), "client")])
    view = fed(log.entries)
    view.receive(delta)
    view.receive(backlog([delta]))
    assert isinstance(view.blocks[0], TextBlock)
    assert view.blocks[0].text == "x"


# --- §7.8 ----------------------------------------------------------------------------------


def test_connection_lost_finalizes_locally_with_synthetic_blocks() -> None:
    """§7.8.1: text committed, thinking ended, call cancelled, turn ended, UI unblocked."""
    log = Log()
    busy_turn(log)
    view = fed(log.entries)
    assert view.status == "requires_action"
    synthetic = view.connection_lost()
    assert synthetic
    assert all(f.synthetic and f.seq is None for f in synthetic)
    assert view.finalized_locally
    assert view.status == "idle"
    assert view.agent_state == "idle"
    by_kind = {type(b): b for b in view.blocks}
    turn = by_kind[TurnBlock]
    assert isinstance(turn, TurnBlock)
    assert turn.stop_reason == "disconnected"
    assert turn.synthetic
    text = by_kind[TextBlock]
    assert isinstance(text, TextBlock)
    assert text.text == "Hello"
    assert text.done
    assert text.synthetic
    call = by_kind[ToolCallBlock]
    assert isinstance(call, ToolCallBlock)
    assert (call.status, call.output, call.synthetic) == ("cancelled", CONNECTION_LOST, True)
    ask = by_kind[InteractionBlock]
    assert isinstance(ask, InteractionBlock)
    assert ask.status == "discarded"
    assert ask.synthetic
    assert view.connection_lost() == []  # once


def test_backlog_unfinalizes_and_replays() -> None:
    """§7.8.3: the locally synthetic blocks vanish and the backlog continues the turn."""
    log = Log()
    turn = busy_turn(log)
    view = fed(log.entries)
    view.connection_lost()
    missed = log.add_all(
        [
            (S.interaction_response("i1", "yes"), "edge"),
            (S.tool_result("c1", "ok", "found"), "client"),
            (S.text_delta("t1", "!"), "client"),
            (S.text_done("t1"), "client"),
            (S.turn_end(turn), "client"),
            (S.usage(), "client"),
        ]
    )
    view.receive(backlog(missed))
    whole = fed(log.entries)
    assert not view.finalized_locally
    assert view.blocks == whole.blocks
    assert snapshot(view.state) == snapshot(whole.state)
    assert not any(getattr(b, "synthetic", False) for b in view.blocks)


def test_truncated_backlog_keeps_the_finalization_and_shows_what_it_holds() -> None:
    """§7.8.3 exception: truncated: finalized state kept, a notice says data was lost."""
    log = Log()
    turn = busy_turn(log)
    view = fed(log.entries)
    view.connection_lost()
    missed = log.add_all([(S.tool_result("c1"), "client"), (S.turn_end(turn), "client")])
    tail = log.add_all([(S.user_message("still there?"), "edge")])
    view.receive(backlog(tail, TRUNCATED))
    assert not view.finalized_locally
    assert view.state.finalized is False
    turn_b = next(b for b in view.blocks if isinstance(b, TurnBlock))
    assert turn_b.stop_reason == "disconnected"
    assert turn_b.synthetic
    assert isinstance(view.blocks[-1], UserMessageBlock)
    assert [n.kind for n in view.notices][-1] == "backlog_truncated"
    assert missed  # the frames the truncation lost never reach the view


def test_backlog_holding_a_deletion_keeps_the_finalization() -> None:
    """§7.8.3 exception: a session.deleted inside: the session ended, nothing is undone."""
    log = Log()
    busy_turn(log)
    view = fed(log.entries)
    view.connection_lost()
    view.receive(backlog(log.add_all([(S.deleted(), "master")])))
    assert view.status == "terminated"
    call = next(b for b in view.blocks if isinstance(b, ToolCallBlock))
    assert call.synthetic
    assert call.status == "cancelled"
    assert isinstance(view.blocks[-1], NoticeBlock)
    assert view.blocks[-1].notice == "deleted"


def test_the_logs_own_finalization_survives_an_edge_reattach() -> None:
    """A backlog retracts only the view's own synthetic frames, never the master's."""
    log = Log()
    busy_turn(log)
    master_final = _master_finalization(log)
    view = fed(log.entries)
    view.connection_lost()  # nothing left to finalize: the log already did
    view.receive(backlog([]))
    whole = fed(log.entries)
    assert view.blocks == whole.blocks
    assert snapshot(view.state) == snapshot(whole.state)
    assert master_final
    assert view.state.finalized
    assert not view.finalized_locally


def test_client_history_entry_retracts_the_masters_synthetic_blocks() -> None:
    """Notes §15.1: the history entry is the record of the unfinalization, blocks included."""
    log = Log()
    turn = busy_turn(log)
    _master_finalization(log)
    inner = [S.text_delta("t1", "!"), S.tool_result("c1"), S.text_done("t1"), S.turn_end(turn)]
    log.add(S.history(inner), "client")
    log.add(S.usage(), "client")
    view = fed(log.entries)
    text = next(b for b in view.blocks if isinstance(b, TextBlock))
    assert text.text == "Hello!"
    assert not text.synthetic
    turn_b = next(b for b in view.blocks if isinstance(b, TurnBlock))
    assert turn_b.stop_reason == "end_turn"
    assert not turn_b.synthetic
    notice = next(b for b in view.blocks if isinstance(b, NoticeBlock))
    assert notice.notice == "history"
    assert not notice.truncated
    assert snapshot(view.state) == snapshot(replay(log.entries))


def _master_finalization(log: Log) -> list[F.Frame]:
    from protocol.finalize import finalize

    state = replay(log.entries)
    return log.add_all(
        [(frame, "master") for frame in finalize(state, session_id=S.SESSION_ID, sender=S.MASTER)]
    )


# --- properties ----------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(stream=S.streams(max_steps=40))
def test_the_view_folds_with_the_shared_state_machine(stream: S.Stream) -> None:
    """The view's state is the state machine's replay of the same frames (notes §8 inv. 3)."""
    log = Log()
    log.add_all(stream)
    view = fed(log.entries)
    assert snapshot(view.state) == snapshot(replay(log.entries))
    assert view.skipped == 0


@settings(max_examples=150, deadline=None)
@given(stream=S.streams(max_steps=40), data=st.data())
def test_drop_then_backlog_equals_no_drop(stream: S.Stream, data: st.DataObject) -> None:
    """Finalize at a random cut, unfinalize with the backlog: same view as without the drop."""
    log = Log()
    entries = log.add_all(stream)
    cut = data.draw(st.integers(0, len(entries)))
    view = fed(log.entries[:cut])
    view.connection_lost()
    view.receive(backlog(entries[cut:]))
    whole = fed(log.entries)
    assert view.blocks == whole.blocks
    assert snapshot(view.state) == snapshot(whole.state)


@settings(max_examples=100, deadline=None)
@given(stream=S.streams(max_steps=40), data=st.data())
def test_snapshot_restores_the_same_view(stream: S.Stream, data: st.DataObject) -> None:
    """A persisted view restores to the same blocks and state; restore finalizes (§7.8.2)."""
    log = Log()
    entries = log.add_all(stream)
    cut = data.draw(st.integers(0, len(entries)))
    view = fed(log.entries[:cut])
    if data.draw(st.booleans()):
        view.connection_lost()  # saved while finalized: the restore redoes it
    saved = msgspec.json.decode(msgspec.json.encode(view.snapshot()), type=type(view.snapshot()))
    restored = SessionView.restore(saved, finalize_now=False)
    plain = fed(log.entries[:cut])
    assert restored.blocks == plain.blocks
    assert snapshot(restored.state) == snapshot(plain.state)
    assert restored.last_seq == plain.last_seq
    finalized = SessionView.restore(saved)
    plain.connection_lost()
    assert finalized.blocks == plain.blocks
    assert snapshot(finalized.state) == snapshot(plain.state)
    finalized.receive(backlog(entries[cut:]))
    assert finalized.blocks == fed(log.entries).blocks


def test_own_frames_fold_once_even_when_resent_in_a_history() -> None:
    """A frame sent live and again inside the client's history is folded once."""
    view = SessionView(S.SESSION_ID)
    turn = S.uuid4(3)
    start, delta = S.turn_start(turn, 0), S.text_delta("t1", "a")
    for frame in (start, delta):
        assert view.fold(frame, "client")
    more = S.text_delta("t1", "b")
    assert view.fold(S.history([delta, more]), "client")
    text = next(b for b in view.blocks if isinstance(b, TextBlock))
    assert text.text == "ab"
    assert view.skipped == 0


def test_a_withdrawn_question_is_marked_with_its_reason() -> None:
    """The view marks a withdrawn interaction (notes §16.4); an answered one stays answered."""
    view = SessionView.replay(
        S.SESSION_ID,
        [
            (S.turn_start(S.uuid4(5), 0), "client"),
            (S.interaction_request("i1"), "client"),
            (S.interaction_request("i2"), "client"),
            (S.interaction_response("i2", "yes"), "edge"),
            (S.interaction_cancel("i1", "timed out"), "client"),
            (S.interaction_cancel("i2"), "client"),  # refused by the state machine: skipped
        ],
    )
    asks = {b.interaction_id: b for b in view.blocks if isinstance(b, InteractionBlock)}
    assert asks["i1"].status == "withdrawn"
    assert asks["i1"].withdraw_reason == "timed out"
    assert asks["i2"].status == "answered"
    assert view.status == "running"


def test_a_failed_run_is_the_views_last_error_and_its_turns_error() -> None:
    """A turn ending in error: its block carries the error, the view's last_error and
    stop_reason say so; the next run that ends well clears last_error, not the old turn's."""
    log = Log()
    view = SessionView(S.SESSION_ID)
    first, second = S.uuid4(1), S.uuid4(2)
    frames = [
        (S.turn_start(first, 0), "client"),
        (S.turn_end(first, "error"), "client"),
        (S.usage(), "client"),
    ]
    for frame, role in frames:
        view.receive(log.add(frame, role))  # type: ignore[arg-type]
    failure = RunError(code="model_overloaded", message="overloaded: retry\nlater")
    assert (view.stop_reason, view.last_error) == ("error", failure)
    [turn] = [b for b in view.blocks if isinstance(b, TurnBlock)]
    assert turn.error == failure
    for frame, role in [(S.turn_start(second, 1), "client"), (S.turn_end(second), "client")]:
        view.receive(log.add(frame, role))  # type: ignore[arg-type]
    assert (view.stop_reason, view.last_error) == ("end_turn", None)
    assert [b.error for b in view.blocks if isinstance(b, TurnBlock)] == [failure, None]
