"""Every row of docs/ag-ui.md's mapping table, both ways where it applies (protocol.agui).

Egress: RAWP frames (as logged, with seq and sender role) → AG-UI events, built with
``ag-ui-protocol``'s models. Ingest: AG-UI events → the RAWP frames the bridge sends.
The real-package runs (``@ag-ui/client`` in Node, the bridge against a master) are in
tests/interop/.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from ag_ui.core import (
    CustomEvent,
    Interrupt,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.core.events import BaseEvent

from protocol import codec
from protocol.agui import (
    AguiEgress,
    AguiIngest,
    RawpOp,
    decode_event,
    encode_sse,
    input_user_messages,
    parse_event_id,
)
from protocol.frames import Frame, GenericFrame

SID = "s-agui"
TURN = "6f1c2b0e-4d3a-4b8e-9c1d-2a3b4c5d6e7f"


def frame(
    frame_type: str, payload: dict[str, Any], *, synthetic: bool = False
) -> Frame | GenericFrame:
    """A RAWP frame as the log holds it."""
    envelope: dict[str, Any] = {
        "type": frame_type,
        "message_id": str(uuid.uuid4()),
        "session_id": SID,
        "timestamp": "2026-12-01T09:00:00.250Z",
        "payload": payload,
    }
    if synthetic:
        envelope["metadata"] = {"synthetic": True}
    return codec.decode(codec.encode_json(envelope))


USAGE = {
    "token_usage": {"input_tokens": 3, "output_tokens": 4, "thinking_tokens": 1},
    "cost_usage": {"limit": -1, "used": 0.01, "unit": "USD"},
    "message_usage": {"limit": -1, "used": 1, "unit": "COUNT"},
    "time_to_reset": "PT5H",
}


def start() -> Frame | GenericFrame:
    return frame("session.turn.start", {"turn_id": TURN, "turn_index": 0})


def end(stop_reason: str = "end_turn", *, synthetic: bool = False) -> Frame | GenericFrame:
    return frame(
        "session.turn.end", {"turn_id": TURN, "stop_reason": stop_reason}, synthetic=synthetic
    )


def egress(*frames: tuple[Frame | GenericFrame, str]) -> tuple[AguiEgress, list[BaseEvent]]:
    """Feed (frame, sender role) pairs in log order; the events made."""
    mapper = AguiEgress(SID)
    events: list[BaseEvent] = []
    for seq, (f, role) in enumerate(frames, start=1):
        events += [e.event for e in mapper.feed(f, seq, role)]
    return mapper, events


def types(events: list[BaseEvent]) -> list[str]:
    return [e.type.value for e in events]


def ingest(*events: BaseEvent, mapper: AguiIngest | None = None) -> tuple[AguiIngest, list[RawpOp]]:
    """Feed AG-UI events; the RAWP ops made (and the end of the stream)."""
    mapper = mapper or AguiIngest(TURN)
    ops: list[RawpOp] = []
    for event in events:
        ops += mapper.feed(event)
    ops += mapper.end_of_stream()
    return mapper, ops


def kinds(ops: list[RawpOp]) -> list[str]:
    return [op.kind for op in ops]


RUN = RunStartedEvent(thread_id="t", run_id="r")
DONE = RunFinishedEvent(thread_id="t", run_id="r")
C, E, M = "client", "edge", "master"


# --- row 1: turn start <-> RUN_STARTED ----------------------------------------------------


def test_row_turn_start_egress() -> None:
    """turn.start → RUN_STARTED: threadId the session, runId the turn, input the user messages."""
    user = frame("user.message", {"text": "hi"})
    _, events = egress((user, E), (start(), C))
    assert types(events) == ["RUN_STARTED"]
    started = events[0]
    assert isinstance(started, RunStartedEvent)
    assert (started.thread_id, started.run_id) == (SID, TURN)
    assert started.input is not None
    assert [(m.id, m.content) for m in started.input.messages] == [(user.message_id, "hi")]
    assert started.timestamp == 1796115600250


def test_row_turn_start_ingest() -> None:
    """RUN_STARTED → turn.start (a UUID v4 turn id chosen by the bridge)."""
    _, ops = ingest(RUN, DONE)
    assert ops[0] == RawpOp("turn_start", {"turn_id": TURN})


# --- row 2: turn end + usage <-> RUN_FINISHED ----------------------------------------------


def test_row_turn_end_and_usage_egress() -> None:
    """turn.end + usage → CUSTOM session.usage, then RUN_FINISHED success carrying the tokens."""
    _, events = egress((start(), C), (end(), C), (frame("session.usage", USAGE), C))
    assert types(events) == ["RUN_STARTED", "CUSTOM", "RUN_FINISHED"]
    custom, finished = events[1], events[2]
    assert isinstance(custom, CustomEvent)
    assert custom.name == "session.usage"
    assert custom.value["cost_usage"]["used"] == 0.01
    assert isinstance(finished, RunFinishedEvent)
    assert finished.usage == [TokenUsage(input_tokens=3, output_tokens=4, reasoning_tokens=1)]
    assert finished.outcome is not None
    assert finished.outcome.type == "success"


def test_row_turn_end_and_usage_ingest() -> None:
    """RUN_FINISHED (with usage) → turn.end end_turn, then session.usage with those tokens."""
    finished = RunFinishedEvent(
        thread_id="t", run_id="r", usage=[TokenUsage(input_tokens=5, output_tokens=6)]
    )
    _, ops = ingest(RUN, finished)
    assert kinds(ops) == ["turn_start", "turn_end", "usage"]
    assert ops[1].args["stop_reason"] == "end_turn"
    assert (ops[2].args["input_tokens"], ops[2].args["output_tokens"]) == (5, 6)


def test_usage_missing_does_not_hold_the_run_forever() -> None:
    """No usage after turn.end: the next entry (or flush) ends the run, usage left out."""
    mapper, events = egress((start(), C), (end(), C))
    assert mapper.holding
    assert types([e.event for e in mapper.flush(3)]) == ["RUN_FINISHED"]
    assert types(events) == ["RUN_STARTED"]


# --- rows 3, 4: cancelled, error ----------------------------------------------------------


def test_row_cancelled_egress() -> None:
    """turn.end cancelled → RUN_FINISHED with the cancelled outcome."""
    _, events = egress((start(), C), (end("cancelled"), C), (frame("session.usage", USAGE), C))
    assert isinstance(events[-1], RunFinishedEvent)
    assert events[-1].outcome == RunFinishedCancelledOutcome()


def test_row_cancelled_ingest() -> None:
    """RUN_FINISHED with the cancelled outcome → turn.end cancelled."""
    _, ops = ingest(
        RUN, RunFinishedEvent(thread_id="t", run_id="r", outcome=RunFinishedCancelledOutcome())
    )
    assert ops[-2].args["stop_reason"] == "cancelled"


def test_row_error_egress() -> None:
    """turn.end error → RUN_ERROR (code the stop reason), usage included."""
    _, events = egress((start(), C), (end("error"), C), (frame("session.usage", USAGE), C))
    assert types(events) == ["RUN_STARTED", "CUSTOM", "RUN_ERROR"]
    assert isinstance(events[-1], RunErrorEvent)
    assert events[-1].code == "error"


def test_row_error_ingest() -> None:
    """RUN_ERROR → session.error agui_run_error, turn.end error, usage."""
    _, ops = ingest(RUN, RunErrorEvent(message="boom"))
    assert kinds(ops) == ["turn_start", "error", "turn_end", "usage"]
    assert ops[1].args == {"error_code": "agui_run_error", "message": "boom"}


# --- row 5: text ----------------------------------------------------------------------------


def test_row_text_egress() -> None:
    """text.delta/done → TEXT_MESSAGE_START/CONTENT/END, messageId = block_id."""
    _, events = egress(
        (start(), C),
        (frame("agent.text.delta", {"block_id": "b1", "delta": "Hel"}), C),
        (frame("agent.text.delta", {"block_id": "b1", "delta": ""}), C),
        (frame("agent.text.done", {"block_id": "b1", "text": "Hello"}), C),
    )
    assert types(events)[1:] == [
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
    ]
    assert [getattr(e, "delta", None) for e in events[2:4]] == ["Hel", "lo"]
    assert all(getattr(e, "message_id", "b1") == "b1" for e in events[1:])


def test_row_text_ingest() -> None:
    """TEXT_MESSAGE_START/CONTENT/END → text.delta per content, text.done at the end."""
    _, ops = ingest(
        RUN,
        TextMessageStartEvent(message_id="m1"),
        TextMessageContentEvent(message_id="m1", delta="a"),
        TextMessageEndEvent(message_id="m1"),
        DONE,
    )
    assert ops[1:3] == [
        RawpOp("text_delta", {"block_id": "m1", "delta": "a"}),
        RawpOp("text_done", {"block_id": "m1"}),
    ]


# --- row 6: thinking ------------------------------------------------------------------------


def test_row_thinking_egress() -> None:
    """thinking.delta/done → REASONING_START, REASONING_MESSAGE_START/CONTENT/END, REASONING_END."""
    _, events = egress(
        (start(), C),
        (frame("agent.thinking.delta", {"block_id": "t1", "delta": "hm"}), C),
        (frame("agent.thinking.done", {"block_id": "t1"}), C),
    )
    assert types(events)[1:] == [
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
    ]


def test_row_thinking_ingest() -> None:
    """REASONING_MESSAGE_* → thinking.delta/done; the REASONING_START/END span itself adds none."""
    _, ops = ingest(
        RUN,
        ReasoningStartEvent(message_id="r"),
        ReasoningMessageStartEvent(message_id="t1", role="reasoning"),
        ReasoningMessageContentEvent(message_id="t1", delta="hm"),
        ReasoningMessageEndEvent(message_id="t1"),
        ReasoningEndEvent(message_id="r"),
        DONE,
    )
    assert ops[1:3] == [
        RawpOp("thinking_delta", {"block_id": "t1", "delta": "hm"}),
        RawpOp("thinking_done", {"block_id": "t1"}),
    ]


# --- rows 7, 8: tool calls and results ----------------------------------------------------


def test_row_tool_call_egress() -> None:
    """tool.invoke.request → TOOL_CALL_START/ARGS/END; result → TOOL_CALL_RESULT (string)."""
    _, events = egress(
        (start(), C),
        (frame("tool.invoke.request", {"call_id": "c1", "tool_name": "t", "input": {"a": 1}}), C),
        (frame("tool.invoke.result", {"call_id": "c1", "status": "error", "output": {"e": 2}}), C),
    )
    assert types(events)[1:] == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "CUSTOM",
    ]
    assert json.loads(getattr(events[2], "delta", "")) == {"a": 1}
    result = events[4]
    assert isinstance(result, ToolCallResultEvent)
    assert result.content == '{"e":2}'
    status = events[5]
    assert isinstance(status, CustomEvent)
    assert status.value == {"call_id": "c1", "status": "error"}


def test_row_tool_call_ingest() -> None:
    """TOOL_CALL_START/ARGS/END → tool.invoke.request (args parsed); RESULT → result ok."""
    _, ops = ingest(
        RUN,
        ToolCallStartEvent(tool_call_id="c1", tool_call_name="t"),
        ToolCallArgsEvent(tool_call_id="c1", delta='{"a"'),
        ToolCallArgsEvent(tool_call_id="c1", delta=":1}"),
        ToolCallEndEvent(tool_call_id="c1"),
        ToolCallResultEvent(message_id="r1", tool_call_id="c1", content="fine"),
        DONE,
    )
    assert ops[1:3] == [
        RawpOp("tool_request", {"call_id": "c1", "tool_name": "t", "input": {"a": 1}}),
        RawpOp("tool_result", {"call_id": "c1", "status": "ok", "output": "fine"}),
    ]


def test_client_side_tool_without_result_is_cancelled() -> None:
    """A call the run left without a result (a frontend tool) gets a cancelled result."""
    _, ops = ingest(
        RUN,
        ToolCallStartEvent(tool_call_id="c1", tool_call_name="t"),
        ToolCallEndEvent(tool_call_id="c1"),
        DONE,
    )
    assert kinds(ops) == ["turn_start", "tool_request", "tool_result", "turn_end", "usage"]
    assert ops[2].args["status"] == "cancelled"
    assert ops[1].args["input"] == {}


# --- rows 9, 10: interactions <-> interrupts ----------------------------------------------


def _ask() -> Frame | GenericFrame:
    return frame(
        "agent.interaction.request",
        {"interaction_id": "i1", "kind": "choice", "prompt": "Which?", "options": ["a", "b"]},
    )


def test_row_interaction_egress() -> None:
    """interaction.request → open messages closed, RUN_FINISHED interrupt; the answer resumes."""
    text = frame("agent.text.delta", {"block_id": "b1", "delta": "x"})
    answer = frame("control.interaction.response", {"interaction_id": "i1", "response": "b"})
    more = frame("agent.text.delta", {"block_id": "b1", "delta": "y"})
    _, events = egress((start(), C), (text, C), (_ask(), C), (answer, E), (more, C))
    assert types(events) == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
    ]
    finished = events[4]
    assert isinstance(finished, RunFinishedEvent)
    assert finished.outcome == RunFinishedInterruptOutcome(
        interrupts=[
            Interrupt(id="i1", reason="choice", message="Which?", metadata={"options": ["a", "b"]})
        ]
    )
    resumed = events[5]
    assert isinstance(resumed, RunStartedEvent)
    assert resumed.run_id == f"{TURN}.1"
    assert resumed.input is not None
    assert resumed.input.resume is not None
    assert resumed.input.resume[0].payload == "b"


def test_row_interaction_ingest() -> None:
    """RUN_FINISHED interrupt → interaction.request per interrupt; the turn stays open."""
    interrupt = Interrupt(id="i1", reason="confirmation", message="Sure?")
    mapper, ops = ingest(
        RUN,
        RunFinishedEvent(
            thread_id="t", run_id="r", outcome=RunFinishedInterruptOutcome(interrupts=[interrupt])
        ),
    )
    assert ops[1] == RawpOp(
        "interaction_request",
        {"interaction_id": "i1", "kind": "confirmation", "prompt": "Sure?", "options": None},
    )
    assert not mapper.turn_ended
    mapper.begin_run()
    _, more = ingest(RUN, DONE, mapper=mapper)
    assert kinds(more) == ["turn_end", "usage"]  # the same turn continues: no second start


def test_row_interaction_response_input() -> None:
    """A RunAgentInput resume entry becomes the control.interaction.response (see interop)."""
    run = RunAgentInput.model_validate(
        {
            "threadId": "x",
            "runId": "y",
            "messages": [],
            "resume": [{"interruptId": "i1", "status": "resolved", "payload": {"ok": True}}],
        }
    )
    assert run.resume is not None
    assert (run.resume[0].interrupt_id, run.resume[0].payload) == ("i1", {"ok": True})


# --- row 11: user messages ----------------------------------------------------------------


def test_row_user_message_input() -> None:
    """Only user messages the session lacks become user.message; never other roles."""
    run = RunAgentInput.model_validate(
        {
            "threadId": "x",
            "runId": "y",
            "messages": [
                {"id": "u1", "role": "user", "content": "old"},
                {"id": "a1", "role": "assistant", "content": "reply"},
                {"id": "u2", "role": "user", "content": [{"type": "text", "text": "new"}]},
                {"id": "s1", "role": "system", "content": "be nice"},
            ],
        }
    )
    assert input_user_messages(run, {"u1", "a1"}) == [("u2", "new")]


def test_row_user_message_egress_not_echoed() -> None:
    """A user.message is never a TEXT_MESSAGE_*: it rides in the next RUN_STARTED's input."""
    mapper, events = egress((frame("user.message", {"text": "hi"}), E))
    assert events == []
    assert mapper.known_message_ids


# --- row 12: RAWP-only frames -> CUSTOM ------------------------------------------------------


def test_row_rawp_only_frames_are_custom_inside_a_run() -> None:
    """compacted, renamed, agent.state, errors, cancel: CUSTOM named after the type, in a run."""
    compacted = frame(
        "session.compacted",
        {"summary": "s", "previous_token_count": 9, "current_token_count": 3, "trigger": "auto"},
    )
    renamed = frame("session.renamed", {"session_id": SID, "name": "n", "renamed_by": "edge"})
    state = frame("agent.state", {"state": "thinking"})
    cancel = frame("control.cancel", {})
    _, outside = egress((renamed, E))
    assert outside == []  # AG-UI allows nothing between runs
    _, events = egress((start(), C), (compacted, C), (renamed, E), (state, C), (cancel, E))
    assert [getattr(e, "name", None) for e in events[1:]] == [
        "session.compacted",
        "session.renamed",
        "agent.state",
        "control.cancel",
    ]


def test_row_custom_ingest_is_dropped() -> None:
    """CUSTOM and STATE_* events from an agent make no RAWP frame (docs: does not map)."""
    _, ops = ingest(RUN, CustomEvent(name="x", value=1), StateSnapshotEvent(snapshot={}), DONE)
    assert kinds(ops) == ["turn_start", "turn_end", "usage"]


# --- row 13: §7.8 finalization and unfinalization -----------------------------------------


def _synthetic_close() -> list[tuple[Frame | GenericFrame, str]]:
    return [
        (frame("agent.text.done", {"block_id": "b1"}, synthetic=True), M),
        (end("disconnected", synthetic=True), M),
    ]


def _history(truncated: bool) -> Frame | GenericFrame:
    more = frame("agent.text.delta", {"block_id": "b1", "delta": " more"})
    raw = codec.decode_object(codec.encode(more))  # type: ignore[arg-type]
    return frame(
        "session.history",
        {
            "frames": [raw],
            "buffer_status": {"policy_applied": "RING", "truncated": truncated},
            "last_sync_timestamp": "2026-12-01T09:00:00Z",
            "last_message_id": "x",
        },
    )


def test_finalization_is_held_and_unfinalization_continues_the_run() -> None:
    """Synthetic closers are held; a history that unfinalizes continues the same open run."""
    delta = frame("agent.text.delta", {"block_id": "b1", "delta": "part"})
    _, events = egress((start(), C), (delta, C), *_synthetic_close(), (_history(False), C))
    assert types(events) == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
    ]


def test_finalization_made_final_ends_the_run_disconnected() -> None:
    """A truncated history keeps the finalization: messages closed, RUN_ERROR disconnected."""
    delta = frame("agent.text.delta", {"block_id": "b1", "delta": "part"})
    _, events = egress((start(), C), (delta, C), *_synthetic_close(), (_history(True), C))
    assert types(events)[-2:] == ["TEXT_MESSAGE_END", "RUN_ERROR"]
    assert getattr(events[-1], "code", None) == "disconnected"


def test_row_deleted_ends_the_run_and_the_stream() -> None:
    """session.deleted from the master: open messages closed, RUN_ERROR, nothing after."""
    delta = frame("agent.text.delta", {"block_id": "b1", "delta": "part"})
    deleted = frame(
        "session.deleted", {"session_id": SID, "reason": "master_request", "deleted_by": "master"}
    )
    mapper, events = egress((start(), C), (delta, C), (deleted, M), (start(), C))
    assert types(events)[-2:] == ["TEXT_MESSAGE_END", "RUN_ERROR"]
    assert mapper.ended


def test_session_archived_while_finalized_makes_the_finalization_final() -> None:
    """Expiry after a drop (§16.1): the held synthetic closers stand, RUN_ERROR disconnected."""
    delta = frame("agent.text.delta", {"block_id": "b1", "delta": "part"})
    lost = frame(
        "tool.invoke.result",
        {"call_id": "c1", "status": "cancelled", "output": "Connection lost"},
        synthetic=True,
    )
    request = frame("tool.invoke.request", {"call_id": "c1", "tool_name": "t", "input": {}})
    deleted = frame(
        "session.deleted", {"session_id": SID, "reason": "timeout", "deleted_by": "system"}
    )
    closers = [_synthetic_close()[0], (lost, M), _synthetic_close()[1]]
    mapper, events = egress((start(), C), (delta, C), (request, C), *closers, (deleted, M))
    assert types(events)[-4:] == ["TEXT_MESSAGE_END", "TOOL_CALL_RESULT", "CUSTOM", "RUN_ERROR"]
    assert getattr(events[-1], "code", None) == "disconnected"
    assert mapper.ended
    assert not mapper.in_run
    snapshot = mapper.connect("snap", 7)
    assert types([e.event for e in snapshot]) == [
        "RUN_STARTED",
        "MESSAGES_SNAPSHOT",
        "RUN_FINISHED",
    ]


# --- row 14: late joiners, ids, the wire --------------------------------------------------


def test_connect_gives_a_snapshot_run_and_reopens_open_messages() -> None:
    """A late joiner: RUN_STARTED, MESSAGES_SNAPSHOT, then the open text message reopened."""
    delta = frame("agent.text.delta", {"block_id": "b1", "delta": "part"})
    mapper, _ = egress((frame("user.message", {"text": "q"}), E), (start(), C), (delta, C))
    events = mapper.connect("snap", 3)
    assert types([e.event for e in events]) == [
        "RUN_STARTED",
        "MESSAGES_SNAPSHOT",
        "TEXT_MESSAGE_START",
    ]
    assert [e.event_id for e in events] == [None, None, "3"]
    snapshot = events[1].event.model_dump(by_alias=True)
    assert [(m["role"], m["content"]) for m in snapshot["messages"]] == [
        ("user", "q"),
        ("assistant", "part"),
    ]
    idle, _ = egress()
    assert types([e.event for e in idle.connect("snap", 0)])[-1] == "RUN_FINISHED"


def test_event_ids_are_seq_and_seq_dot_index() -> None:
    """Several events from one entry: ``N.0``, ``N.1`` … ``N``; parse_event_id reads them back."""
    mapper = AguiEgress(SID)
    mapper.feed(start(), 1, C)
    made = mapper.feed(
        frame("tool.invoke.request", {"call_id": "c", "tool_name": "t", "input": {}}), 2, C
    )
    assert [e.event_id for e in made] == ["2.0", "2.1", "2"]
    assert parse_event_id("2.1") == (2, 2)
    assert parse_event_id("2") == (2, None)
    for bad in ("", "x", "2.", "-1", "2.x", "1e3", "٣"):
        try:
            parse_event_id(bad)
        except ValueError:
            continue
        raise AssertionError(bad)


def test_sse_encoding_cannot_be_split_by_received_strings() -> None:
    """Hostile text (CR, LF, a fake ``data:``) stays inside one JSON data line."""
    hostile = 'a\r\n\r\ndata: {"type":"RUN_ERROR"}\n\nid: 9'
    wire = encode_sse(TextMessageContentEvent(message_id="m", delta=hostile), "4").decode()
    assert wire.count("\n\n") == 1
    assert wire.endswith("\n\n")
    assert "\r" not in wire
    lines = wire[:-2].split("\n")
    assert lines[0] == "id: 4"
    assert len(lines) == 2
    assert decode_event(lines[1][6:]) == TextMessageContentEvent(message_id="m", delta=hostile)


def test_optional_fields_are_omitted_and_timestamps_are_integers() -> None:
    """No null on the wire; timestamp is epoch milliseconds."""
    _, events = egress((start(), C))
    data = json.loads(encode_sse(events[0]).decode()[6:])
    assert isinstance(data["timestamp"], int)
    assert None not in data.values()
    assert "parentRunId" not in data


# --- broken AG-UI streams --------------------------------------------------------------------


def test_broken_streams_end_the_turn_with_an_error() -> None:
    """Unknown message, chunk events, a second RUN_STARTED, no end: error, turn end, usage."""
    cases: list[list[BaseEvent]] = [
        [RUN, TextMessageContentEvent(message_id="ghost", delta="x")],
        [RUN, TextMessageChunkEvent(message_id="m", delta="x")],
        [RUN, RUN],
        [RUN, TextMessageStartEvent(message_id="m"), TextMessageStartEvent(message_id="m")],
        [RUN, ToolCallArgsEvent(tool_call_id="nope", delta="{}")],
        [RUN, ToolCallResultEvent(message_id="r", tool_call_id="nope", content="x")],
        [RUN, TextMessageStartEvent(message_id="m")],  # the stream just ends
        [TextMessageStartEvent(message_id="m")],
        [RUN, TextMessageStartEvent(message_id="x" * 257)],
    ]
    for events in cases:
        _, ops = ingest(*events)
        assert kinds(ops)[-2:] == ["turn_end", "usage"], events
        assert "error" in kinds(ops)
        assert ops[-2].args["stop_reason"] == "error"
        starts = kinds(ops).count("turn_start")
        assert starts == 1


def test_abort_closes_open_blocks_and_calls() -> None:
    """Open text, thinking and tool calls are closed before the turn ends error."""
    mapper = AguiIngest(TURN)
    for event in (
        RUN,
        TextMessageStartEvent(message_id="m"),
        ReasoningMessageStartEvent(message_id="t", role="reasoning"),
        ToolCallStartEvent(tool_call_id="c", tool_call_name="n"),
    ):
        mapper.feed(event)
    ops = mapper.abort("gone")
    assert kinds(ops) == [
        "error",
        "text_done",
        "thinking_done",
        "tool_request",
        "tool_result",
        "turn_end",
        "usage",
    ]
    assert ops[4].args["status"] == "error"
    assert mapper.feed(DONE) == []  # nothing after the end


def test_connect_while_an_interrupt_waits_lists_it() -> None:
    """A late joiner of a turn waiting for an answer gets the pending interrupt."""
    mapper, _ = egress((start(), C), (_ask(), C))
    finished = mapper.connect("snap", 2)[-1].event
    assert isinstance(finished, RunFinishedEvent)
    assert isinstance(finished.outcome, RunFinishedInterruptOutcome)
    assert [i.id for i in finished.outcome.interrupts] == ["i1"]
