"""Frame builders and Hypothesis strategies shared by the state-machine and finalization tests.

Builders make well-formed frames with short, deterministic ids (the state machine only cares
about ids being equal or not). :func:`streams` generates realistic client/edge frame streams
(turns with text and thinking deltas, tool calls and results, interactions and responses,
usage right after every turn end) that the state machine must accept in full.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from hypothesis import strategies as st
from msgspec import Raw

from protocol import codec
from protocol import frames as F
from protocol.state import Phase, SenderRole, SessionState

SESSION_ID = "s-test"
TS = dt.datetime(2026, 11, 29, 9, 0, tzinfo=dt.UTC)
MASTER = F.Sender(role="master", participant_id="node-1")
ROLES: tuple[SenderRole, ...] = ("client", "edge", "master")
STOP_REASONS = ("end_turn", "max_tokens", "cancelled", "error", "tool_use", "awaiting_input")

Stream: TypeAlias = list[tuple[F.Frame, SenderRole]]

_message_ids: Iterator[int] = itertools.count(1)


def uuid4(n: int) -> str:
    """A valid UUID v4 string derived from ``n`` (readable when Hypothesis shrinks)."""
    return f"{n & 0xFFFFFFFF:08x}-0000-4000-8000-{n:012x}"


def _envelope(synthetic: bool, sender: F.Sender | None) -> dict[str, Any]:
    return {
        "message_id": f"m-{next(_message_ids)}",
        "session_id": SESSION_ID,
        "timestamp": TS,
        "metadata": F.Metadata(synthetic=True) if synthetic else None,
        "sender": sender,
    }


def build(
    cls: type[F.Frame], payload: Any, *, synthetic: bool = False, sender: F.Sender | None = None
) -> F.Frame:
    """One frame of type ``cls`` with a fresh message id."""
    return cls(payload=payload, **_envelope(synthetic, sender))  # type: ignore[call-arg]


# --- one builder per frame type ----------------------------------------------------------


def turn_start(turn_id: str, index: int, **kw: Any) -> F.Frame:
    return build(F.TurnStart, F.TurnStartPayload(turn_id=turn_id, turn_index=index), **kw)


def turn_end(turn_id: str, stop_reason: str = "end_turn", **kw: Any) -> F.Frame:
    payload = F.TurnEndPayload(turn_id=turn_id, stop_reason=stop_reason)  # type: ignore[arg-type]
    return build(F.TurnEnd, payload, **kw)


def usage(
    input_tokens: int = 10, output_tokens: int = 5, utilization: float | None = None, **kw: Any
) -> F.Frame:
    payload = F.UsagePayload(
        token_usage=F.TokenUsage(input_tokens=input_tokens, output_tokens=output_tokens),
        cost_usage=F.CostUsage(limit=-1, used=0.25, unit="USD"),
        message_usage=F.MessageUsage(limit=-1, used=1, unit="COUNT"),
        time_to_reset="PT4H",
        context_window=None if utilization is None else F.ContextWindow(utilization=utilization),
    )
    return build(F.Usage, payload, **kw)


def compacted(previous: int, current: int, **kw: Any) -> F.Frame:
    payload = F.CompactedPayload(
        summary="s", previous_token_count=previous, current_token_count=current, trigger="auto"
    )
    return build(F.Compacted, payload, **kw)


def renamed(name: str, renamed_by: str, session_id: str = SESSION_ID, **kw: Any) -> F.Frame:
    payload = F.RenamedPayload(session_id=session_id, name=name, renamed_by=renamed_by)  # type: ignore[arg-type]
    return build(F.Renamed, payload, **kw)


def deleted(
    deleted_by: str = "master",
    reason: str = "master_request",
    session_id: str = SESSION_ID,
    **kw: Any,
) -> F.Frame:
    payload = F.DeletedPayload(session_id=session_id, reason=reason, deleted_by=deleted_by)  # type: ignore[arg-type]
    return build(F.Deleted, payload, **kw)


def session_error(code: str = "oops", fatal: bool = False, **kw: Any) -> F.Frame:
    payload = F.SessionErrorPayload(error_code=code, message="m", fatal=fatal)
    return build(F.SessionError, payload, **kw)


def presence(
    state: str = "attached", *, changes: list[tuple[str, str, str]] | None = None, **kw: Any
) -> F.Frame:
    """One presence change of ``p-e``; with ``changes`` (id, role, state) a coalesced frame."""
    if changes:
        items = [
            F.PresenceChange(participant_id=pid, role=role, state=st_)  # type: ignore[arg-type]
            for pid, role, st_ in changes
        ]
        first = items[0]
        payload = F.PresencePayload(
            participant_id=first.participant_id, role=first.role, state=first.state, changes=items
        )
    else:
        payload = F.PresencePayload(participant_id="p-e", role="edge", state=state)  # type: ignore[arg-type]
    return build(F.Presence, payload, **kw)


_PRESENCE_CHANGE = st.tuples(
    st.sampled_from(["p-e", "p-f", "p-g", "p-c"]),
    st.sampled_from(["edge", "client"]),
    st.sampled_from(["attached", "detached", "expired"]),
)


def agent_state(value: str, **kw: Any) -> F.Frame:
    return build(F.AgentState, F.AgentStatePayload(state=value), **kw)  # type: ignore[arg-type]


def text_delta(block: str, delta: str = "x", **kw: Any) -> F.Frame:
    return build(F.TextDelta, F.TextDeltaPayload(block_id=block, delta=delta), **kw)


def text_done(block: str, **kw: Any) -> F.Frame:
    return build(F.TextDone, F.TextDonePayload(block_id=block), **kw)


def thinking_delta(block: str, delta: str = "x", **kw: Any) -> F.Frame:
    return build(F.ThinkingDelta, F.ThinkingDeltaPayload(block_id=block, delta=delta), **kw)


def thinking_done(block: str, **kw: Any) -> F.Frame:
    return build(F.ThinkingDone, F.ThinkingDonePayload(block_id=block), **kw)


def tool_request(call: str, tool: str = "bash", **kw: Any) -> F.Frame:
    payload = F.ToolRequestPayload(call_id=call, tool_name=tool, input={"cmd": "ls"})
    return build(F.ToolRequest, payload, **kw)


def tool_result(call: str, status: str = "ok", output: Any = "done", **kw: Any) -> F.Frame:
    payload = F.ToolResultPayload(call_id=call, status=status, output=output)  # type: ignore[arg-type]
    return build(F.ToolResult, payload, **kw)


def interaction_request(iid: str, kind: str = "confirmation", **kw: Any) -> F.Frame:
    payload = F.InteractionRequestPayload(interaction_id=iid, kind=kind, prompt="ok?")  # type: ignore[arg-type]
    return build(F.InteractionRequest, payload, **kw)


def interaction_cancel(iid: str, reason: str | None = "timed out", **kw: Any) -> F.Frame:
    payload = F.InteractionCancelPayload(interaction_id=iid, reason=reason)
    return build(F.InteractionCancel, payload, **kw)


def interaction_response(iid: str, response: Any = True, **kw: Any) -> F.Frame:
    payload = F.InteractionResponsePayload(interaction_id=iid, response=response)
    return build(F.InteractionResponse, payload, **kw)


def user_message(text: str = "hi", **kw: Any) -> F.Frame:
    return build(F.UserMessage, F.UserMessagePayload(text=text), **kw)


def cancel(turn_id: str | None = None, **kw: Any) -> F.Frame:
    return build(F.Cancel, F.CancelPayload(turn_id=turn_id), **kw)


def status(name: str = "running", **kw: Any) -> F.Frame:
    return build(F.SessionStatus, F.StatusPayload(status=name), **kw)  # type: ignore[arg-type]


def revisit_request(
    revisit_id: str = "r1", at: dt.datetime = TS, reason: str | None = None, **kw: Any
) -> F.Frame:
    payload = F.RevisitRequestPayload(revisit_id=revisit_id, at=at, reason=reason)
    return build(F.RevisitRequest, payload, **kw)


def revisit_cancel(revisit_id: str = "r1", **kw: Any) -> F.Frame:
    return build(F.RevisitCancel, F.RevisitCancelPayload(revisit_id=revisit_id), **kw)


def wake(revisit_id: str = "r1", at: dt.datetime = TS, **kw: Any) -> F.Frame:
    return build(F.Wake, F.WakePayload(revisit_id=revisit_id, at=at), **kw)


def hello(role: str = "client", **kw: Any) -> F.Frame:
    payload = F.HelloPayload(protocol_version="1.0.2", role=role, token="t")  # type: ignore[arg-type]
    return build(F.Hello, payload, **kw)


def welcome(**kw: Any) -> F.Frame:
    info = F.SessionInfo(
        session_id=SESSION_ID, name="", status="idle", head_seq=0, epoch="e", created_at=TS
    )
    payload = F.WelcomePayload(
        participant_id="p-1",
        generation=1,
        resumed=False,
        session=info,
        reattach_window_ms=120_000,
        heartbeat_interval_ms=20_000,
        max_frame_bytes=1 << 20,
        buffer=F.BufferGrant(policy="RING", capacity_bytes=1 << 20),
    )
    return build(F.Welcome, payload, **kw)


def ack(last_seq: int = 0, **kw: Any) -> F.Frame:
    return build(F.Ack, F.AckPayload(last_seq=last_seq), **kw)


def history(
    inner: Sequence[F.Frame | F.GenericFrame | bytes], *, truncated: bool = False, **kw: Any
) -> F.History:
    """A ``session.history`` whose frames are ``inner`` (frames or raw envelopes)."""
    raws = [Raw(x if isinstance(x, bytes) else codec.encode(x)) for x in inner]
    payload = F.HistoryPayload(
        frames=raws,
        buffer_status=F.BufferStatus(
            policy_applied="RING", truncated=truncated, lost_frame_count=3 if truncated else 0
        ),
        last_sync_timestamp=TS,
        last_message_id="m-0",
    )
    frame = build(F.History, payload, **kw)
    assert isinstance(frame, F.History)
    return frame


def roundtrip(frame: F.Frame) -> F.Frame:
    """Encode and decode ``frame``: proves it is well-formed on the wire."""
    decoded = codec.decode(codec.encode(frame))
    assert isinstance(decoded, F.Frame)
    return decoded


# --- realistic streams ------------------------------------------------------------------

End: TypeAlias = Literal["any", "idle", "turn_open", "usage_due", "terminated"]


@dataclass
class _Model:
    """What the generator needs to know to only emit frames the state machine accepts."""

    n: int = 0
    turn_index: int = -1
    turn_id: str | None = None
    text: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    out: Stream = field(default_factory=list)

    def fresh(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def emit(self, frame: F.Frame, role: SenderRole = "client") -> None:
        self.out.append((frame, role))

    def start_turn(self) -> None:
        self.n += 1
        self.turn_index += 1
        self.turn_id = uuid4(self.n)
        self.emit(turn_start(self.turn_id, self.turn_index))

    def end_turn(self, stop_reason: str, with_usage: bool = True) -> None:
        assert self.turn_id is not None
        assert not self.calls
        self.emit(turn_end(self.turn_id, stop_reason))
        # Open blocks end with the turn (notes §15.8).
        self.text.clear()
        self.thinking.clear()
        self.turn_id = None
        if with_usage:
            self.emit(usage())

    def resolve_all(self) -> None:
        for call in self.calls:
            self.emit(tool_result(call))
        self.calls.clear()
        for block in self.text:
            self.emit(text_done(block))
        for block in self.thinking:
            self.emit(thinking_done(block))
        self.text.clear()
        self.thinking.clear()


def _actions(m: _Model) -> list[str]:
    acts = ["user_message", "rename_client", "rename_edge", "edge_error", "compacted"]
    if m.pending:
        acts.append("respond")
    if m.turn_id is None:
        acts += ["turn_start", "turn_start"]
        return acts
    acts += ["text_new", "thinking_new", "tool_request", "ask", "agent_state", "cancel", "usage"]
    acts += ["text_more", "text_done"] if m.text else []
    acts += ["thinking_more", "thinking_done"] if m.thinking else []
    acts += ["tool_result", "tool_result"] if m.calls else ["turn_end"]
    return acts


@st.composite
def streams(
    draw: st.DrawFn, *, max_steps: int = 30, end: End = "any", complete: bool = False
) -> Stream:
    """A realistic client/edge stream the state machine accepts frame by frame.

    ``end`` picks the phase the stream leaves the session in; ``complete`` also resolves
    every tool call, block and interaction, so nothing is left unfinished.
    """
    m = _Model()
    for _ in range(draw(st.integers(0, max_steps))):
        act = draw(st.sampled_from(_actions(m)))
        if act == "user_message":
            m.emit(user_message(), "edge")
        elif act == "rename_client":
            m.emit(renamed(m.fresh("name-"), "client"))
        elif act == "rename_edge":
            m.emit(renamed(m.fresh("name-"), "edge"), "edge")
        elif act == "edge_error":
            m.emit(session_error(), "edge")
        elif act == "compacted":
            m.emit(compacted(100, draw(st.integers(0, 100))))
        elif act == "respond":
            iid = draw(st.sampled_from(m.pending))
            m.pending.remove(iid)
            m.emit(interaction_response(iid), "edge")
        elif act == "turn_start":
            m.start_turn()
        elif act == "text_new":
            block = m.fresh("t")
            m.text.append(block)
            m.emit(text_delta(block))
        elif act == "text_more":
            m.emit(text_delta(draw(st.sampled_from(m.text))))
        elif act == "text_done":
            block = draw(st.sampled_from(m.text))
            m.text.remove(block)
            m.emit(text_done(block))
        elif act == "thinking_new":
            block = m.fresh("k")
            m.thinking.append(block)
            m.emit(thinking_delta(block))
        elif act == "thinking_more":
            m.emit(thinking_delta(draw(st.sampled_from(m.thinking))))
        elif act == "thinking_done":
            block = draw(st.sampled_from(m.thinking))
            m.thinking.remove(block)
            m.emit(thinking_done(block))
        elif act == "tool_request":
            call = m.fresh("c")
            m.calls.append(call)
            m.emit(tool_request(call))
        elif act == "tool_result":
            call = draw(st.sampled_from(m.calls))
            m.calls.remove(call)
            m.emit(tool_result(call, draw(st.sampled_from(["ok", "error"]))))
        elif act == "ask":
            iid = m.fresh("i")
            m.pending.append(iid)
            m.emit(interaction_request(iid))
        elif act == "agent_state":
            value = ["idle", "thinking", "tool_calling", "responding", "awaiting_input"]
            m.emit(agent_state(draw(st.sampled_from(value))))
        elif act == "cancel":
            m.emit(cancel(m.turn_id), "edge")
        elif act == "usage":
            m.emit(usage())
        elif act == "turn_end":
            m.end_turn(draw(st.sampled_from(STOP_REASONS)))
        else:  # pragma: no cover - the action list and this chain must agree
            raise AssertionError(act)
    if complete:
        for iid in m.pending:
            m.emit(interaction_response(iid), "edge")
        m.pending.clear()
        m.resolve_all()
        if m.turn_id is not None:
            m.end_turn("end_turn")
        m.emit(agent_state("idle"))
    if end == "idle" and m.turn_id is not None:
        m.resolve_all()
        m.end_turn("end_turn")
    elif end == "turn_open" and m.turn_id is None:
        m.start_turn()
    elif end == "usage_due":
        if m.turn_id is None:
            m.start_turn()
        m.resolve_all()
        m.end_turn("end_turn", with_usage=False)
    elif end == "terminated":
        m.emit(deleted(), "master")
    return m.out


# --- one well-formed frame of any type, biased towards the state's ids -------------------


def _pick(draw: st.DrawFn, *groups: object) -> str:
    """A value from the state's id collections, or a fresh one."""
    pool: list[str] = ["fresh-id"]
    for g in groups:
        pool.extend(sorted(g))  # type: ignore[call-overload]
    return draw(st.sampled_from(pool))


@st.composite
def frames_of_type(draw: st.DrawFn, tag: str, state: SessionState) -> F.Frame:
    """A well-formed frame of type ``tag`` whose ids may or may not fit ``state``."""
    synthetic = draw(st.booleans())
    kw: dict[str, Any] = {"synthetic": synthetic}
    frame: F.Frame
    if tag == "connection.hello":
        frame = hello(**kw)
    elif tag == "connection.welcome":
        frame = welcome(**kw)
    elif tag == "connection.ack":
        frame = ack(draw(st.integers(0, 5)), **kw)
    elif tag == "session.presence":
        # coalesced presence (docs/protocol.md §5 item 11) half of the time
        coalesced = draw(st.one_of(st.none(), st.lists(_PRESENCE_CHANGE, min_size=2, max_size=5)))
        frame = presence(
            draw(st.sampled_from(["attached", "detached", "expired"])), changes=coalesced, **kw
        )
    elif tag == "session.history":
        frame = history([user_message()], truncated=draw(st.booleans()), **kw)
    elif tag == "session.turn.start":
        ids = [uuid4(10_000), *sorted(state.turn_ids)]
        turn_id = draw(st.sampled_from(ids))
        last = state.last_turn_index
        index = draw(st.sampled_from(sorted({last + 1, max(last, 0), last + 2, 0})))
        frame = turn_start(turn_id, index, **kw)
    elif tag == "session.turn.end":
        ids = [uuid4(10_001), *sorted(state.turn_ids)]
        if state.turn_id is not None:
            ids += [state.turn_id] * 3
        reason = draw(st.sampled_from([*STOP_REASONS, "disconnected"]))
        frame = turn_end(draw(st.sampled_from(ids)), reason, **kw)
    elif tag == "session.usage":
        util = draw(st.none() | st.floats(0.0, 1.0))
        frame = usage(draw(st.integers(0, 50)), draw(st.integers(0, 50)), util, **kw)
    elif tag == "session.compacted":
        frame = compacted(draw(st.integers(0, 9)), draw(st.integers(0, 9)), **kw)
    elif tag == "session.renamed":
        sid = draw(st.sampled_from([SESSION_ID, "s-other"]))
        frame = renamed("n", draw(st.sampled_from(ROLES)), sid, **kw)
    elif tag == "session.deleted":
        sid = draw(st.sampled_from([SESSION_ID, "s-other"]))
        by = draw(st.sampled_from(["edge", "client", "master", "system"]))
        frame = deleted(by, "user_request", sid, **kw)
    elif tag == "session.error":
        frame = session_error(fatal=draw(st.booleans()), **kw)
    elif tag == "agent.state":
        frame = agent_state(draw(st.sampled_from(["idle", "thinking", "awaiting_input"])), **kw)
    elif tag in ("agent.text.delta", "agent.text.done", "agent.thinking.delta"):
        block = _pick(draw, state.open_text, state.open_thinking, state.closed_blocks)
        make = {
            "agent.text.delta": text_delta,
            "agent.text.done": text_done,
            "agent.thinking.delta": thinking_delta,
        }[tag]
        frame = make(block, **kw)
    elif tag == "agent.thinking.done":
        block = _pick(draw, state.open_text, state.open_thinking, state.closed_blocks)
        frame = thinking_done(block, **kw)
    elif tag == "tool.invoke.request":
        frame = tool_request(_pick(draw, state.call_ids), **kw)
    elif tag == "tool.invoke.result":
        call = _pick(draw, state.open_calls, state.call_ids)
        frame = tool_result(call, draw(st.sampled_from(["ok", "error", "cancelled"])), **kw)
    elif tag == "agent.interaction.request":
        frame = interaction_request(_pick(draw, state.interaction_ids), **kw)
    elif tag == "control.interaction.response":
        iid = _pick(draw, state.pending_interactions, state.interaction_ids)
        frame = interaction_response(iid, **kw)
    elif tag == "agent.interaction.cancel":
        iid = _pick(draw, state.pending_interactions, state.interaction_ids)
        frame = interaction_cancel(iid, **kw)
    elif tag == "user.message":
        frame = user_message(**kw)
    elif tag == "control.cancel":
        frame = cancel(state.turn_id, **kw)
    elif tag == "session.status":
        frame = status(draw(st.sampled_from(["idle", "running", "requires_action"])), **kw)
    elif tag in ("session.revisit.request", "session.revisit.cancel", "session.wake"):
        rid = _pick(draw, state.pending_revisits, {"r1", "r2"})
        make_revisit = {
            "session.revisit.request": revisit_request,
            "session.revisit.cancel": revisit_cancel,
            "session.wake": wake,
        }[tag]
        frame = make_revisit(rid, **kw)
    else:  # pragma: no cover - a new frame type needs a branch here
        raise AssertionError(f"no strategy for {tag}")
    return roundtrip(frame)


PHASE_ENDS: dict[Phase, End] = {
    Phase.IDLE: "idle",
    Phase.TURN_OPEN: "turn_open",
    Phase.USAGE_DUE: "usage_due",
    Phase.TERMINATED: "terminated",
}


def sample(tag: str) -> F.Frame:
    """A fixed well-formed frame of type ``tag`` (ids that fit no particular state)."""
    makers: dict[str, Any] = {
        "connection.hello": hello,
        "connection.welcome": welcome,
        "connection.ack": ack,
        "session.presence": presence,
        "session.history": lambda: history([]),
        "session.turn.start": lambda: turn_start(uuid4(99), 0),
        "session.turn.end": lambda: turn_end(uuid4(99)),
        "session.usage": usage,
        "session.compacted": lambda: compacted(10, 5),
        "session.renamed": lambda: renamed("n", "edge"),
        "session.deleted": lambda: deleted("edge", "user_request"),
        "session.error": session_error,
        "agent.state": lambda: agent_state("thinking"),
        "agent.text.delta": lambda: text_delta("b"),
        "agent.text.done": lambda: text_done("b"),
        "agent.thinking.delta": lambda: thinking_delta("b"),
        "agent.thinking.done": lambda: thinking_done("b"),
        "tool.invoke.request": lambda: tool_request("c"),
        "tool.invoke.result": lambda: tool_result("c"),
        "agent.interaction.request": lambda: interaction_request("i"),
        "control.interaction.response": lambda: interaction_response("i"),
        "agent.interaction.cancel": lambda: interaction_cancel("i"),
        "user.message": user_message,
        "control.cancel": cancel,
        "session.status": status,
        "session.revisit.request": revisit_request,
        "session.revisit.cancel": revisit_cancel,
        "session.wake": wake,
    }
    return roundtrip(makers[tag]())
