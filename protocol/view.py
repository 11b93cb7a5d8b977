"""A session as a UI shows it: transcript blocks folded from frames (RAWP §7, §7.8; notes §6, §8).

:class:`SessionView` folds every frame with the session state machine the master uses
(:func:`protocol.state.fold`, :func:`protocol.finalize.plan_history`) and keeps, beside the
:class:`~protocol.state.SessionState`, what a person looks at: an ordered list of transcript
blocks (turns, streamed text and thinking, tool calls paired with their results, interactions,
user messages, usage, compaction summaries, notices) and usage/cost :class:`Totals`. The state
machine holds the rules; the view only adds display data, so a view always agrees with a
replay of the log (notes §8 invariant 3).

Where frames come from:

* :meth:`SessionView.receive` — a frame delivered by the master: a log entry (it has a
  ``seq``; entries at or below :attr:`SessionView.last_seq` are ignored, so a replayed
  backlog never folds twice), the reattach backlog (a ``session.history`` without ``seq``,
  §7.1.1), the welcome, or a ``session.error`` addressed to this participant only.
* :meth:`SessionView.fold` — a frame this participant sent (the master does not echo a
  sender's frames back), or any frame of a log being replayed.

§7.8 in the view:

* :meth:`SessionView.connection_lost` finalizes locally (§7.8.1): the frames of
  :func:`protocol.finalize.finalize` are folded with ``metadata.synthetic: true`` and no
  ``seq``, so the state records the finalization as this view's own
  (``SessionState.finalized_locally``). It is also what :meth:`SessionView.restore` runs for
  a view loaded after an app restart (§7.8.2).
* The backlog that follows a reattach unfinalizes (§7.8.3): unless it is truncated or holds a
  ``session.deleted``, the locally synthetic frames are taken back out (their blocks vanish)
  and the backlog's frames are folded in order; otherwise the finalized state is kept and
  the backlog's frames are folded on top of it, skipping what the state machine refuses.
* A client's ``session.history`` log entry retracts the master's own synthetic frames the same
  way the master's fold does (notes §15.1), blocks included.

The view is lenient: a frame the state machine refuses is skipped and counted
(:attr:`SessionView.skipped`), never raised. Locally synthetic blocks, and blocks closed by the
master's synthetic frames, carry ``synthetic=True``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any, Final, Literal, TypeAlias, TypeVar

import msgspec

from . import codec
from .errors import ProtocolError
from .finalize import finalize, plan_history, unfinalizes
from .frames import (
    AgentState,
    BufferStatus,
    Cancel,
    Compacted,
    Deleted,
    Frame,
    GenericFrame,
    History,
    InteractionCancel,
    InteractionRequest,
    InteractionResponse,
    Presence,
    PreservedElements,
    Renamed,
    Sender,
    SessionError,
    SessionInfo,
    TextDelta,
    TextDone,
    ThinkingDelta,
    ThinkingDone,
    ToolRequest,
    ToolResult,
    TurnEnd,
    TurnStart,
    Usage,
    UserMessage,
    Welcome,
)
from .state import SenderRole, SessionState, Status, fold, snapshot, status

__all__ = [
    "LOCAL_SENDER",
    "Block",
    "CompactionBlock",
    "InteractionBlock",
    "Notice",
    "NoticeBlock",
    "SavedEntry",
    "SessionView",
    "TextBlock",
    "ThinkingBlock",
    "ToolCallBlock",
    "Totals",
    "TurnBlock",
    "UsageBlock",
    "UserMessageBlock",
    "ViewSnapshot",
]

LOCAL_SENDER: Final = Sender(role="master", participant_id="local")
"""The sender stamped on frames this view synthesizes itself (§7.8.1, never sent anywhere)."""

_COMPLETE: Final = BufferStatus(policy_applied="RING", truncated=False, lost_frame_count=0)
_MAX_REASONS: Final = 100


# --- transcript blocks ---------------------------------------------------------------------


class _Block(msgspec.Struct, kw_only=True, tag_field="kind"):
    """Common fields: the frame that opened the block and the turn it belongs to."""

    message_id: str
    seq: int | None = None
    turn_id: str | None = None


class TurnBlock(_Block, tag="turn"):
    """One turn (§7.5): opened by ``session.turn.start``, closed by ``session.turn.end``."""

    turn_index: int
    mode: str | None = None
    ended: bool = False
    stop_reason: str | None = None
    tool_invocation_count: int | None = None
    synthetic: bool = False  # ended by a synthetic turn end (§7.8.1 "disconnected")


class TextBlock(_Block, tag="text"):
    """Streamed text: the deltas accumulated so far; ``done`` once committed."""

    block_id: str
    text: str = ""
    done: bool = False
    synthetic: bool = False  # committed by finalization, not by the agent


class ThinkingBlock(_Block, tag="thinking"):
    """Streamed thinking."""

    block_id: str
    text: str = ""
    done: bool = False
    synthetic: bool = False


class ToolCallBlock(_Block, tag="tool_call"):
    """A tool call paired with its result (``status`` pending until the result arrives)."""

    call_id: str
    tool_name: str
    input: dict[str, Any]
    status: Literal["pending", "ok", "error", "cancelled"] = "pending"
    output: Any = None
    synthetic: bool = False  # the result was synthesized ("Connection lost")


class InteractionBlock(_Block, tag="interaction"):
    """The agent asked a person; answered by an edge, withdrawn by the agent (notes §16.4)
    or discarded by finalization."""

    interaction_id: str
    interaction_kind: str
    prompt: str
    options: list[Any] | None = None
    status: Literal["pending", "answered", "withdrawn", "discarded"] = "pending"
    response: Any = None
    synthetic: bool = False
    withdraw_reason: str | None = None


class UserMessageBlock(_Block, tag="user_message"):
    """User input from an edge."""

    text: str
    participant_id: str | None = None


class UsageBlock(_Block, tag="usage"):
    """One ``session.usage`` report (§7.3.1)."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    thinking_tokens: int | None = None
    cost_used: float = 0.0
    cost_limit: float = -1
    cost_unit: str = ""
    messages_used: int = 0
    messages_limit: int = -1
    context_utilization: float | None = None
    time_to_reset: str = ""
    from_master: bool = False  # the master's totals, not a report of the agent


class CompactionBlock(_Block, tag="compaction"):
    """A context compaction (§7.2.1) and its summary."""

    summary: str
    previous_token_count: int
    current_token_count: int
    trigger: str
    preserved_elements: PreservedElements | None = None


NoticeKind: TypeAlias = Literal["renamed", "deleted", "error", "history", "cancel"]


class NoticeBlock(_Block, tag="notice"):
    """A logged event worth a line: rename, delete, error, a client's history, a cancel."""

    notice: NoticeKind
    text: str
    error_code: str | None = None
    truncated: bool = False
    lost_frame_count: int | None = None
    reported_by: SenderRole = "master"
    """Who sent the frame. Only the master's notices (``history_truncated``) are the
    session's own facts; a participant's ``session.error`` is that participant's report
    (notes §16.8)."""

    @property
    def data_incomplete(self) -> bool:
        """Does this notice say the session's data is incomplete (§7.1.1)?

        A master's ``history_truncated``, or a client's truncated history (the client is
        the one who knows what its own buffer lost) — never a ``history_truncated`` that a
        participant wrote itself (§16.8).
        """
        if self.notice == "history":
            return self.truncated
        return self.error_code == "history_truncated" and self.reported_by == "master"


Block: TypeAlias = (
    TurnBlock
    | TextBlock
    | ThinkingBlock
    | ToolCallBlock
    | InteractionBlock
    | UserMessageBlock
    | UsageBlock
    | CompactionBlock
    | NoticeBlock
)
_Streamed = TypeVar("_Streamed", TextBlock, ThinkingBlock)  # blocks built up from deltas


class Totals(msgspec.Struct, kw_only=True):
    """Usage and cost over the session, from the agent's ``session.usage`` reports."""

    turns: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    thinking_tokens: int = 0
    cost_used: float = 0.0
    cost_limit: float = -1
    cost_unit: str = ""
    context_utilization: float | None = None
    compactions: int = 0


class Notice(msgspec.Struct, kw_only=True):
    """Something this participant alone was told or noticed (not in the session log).

    ``position`` is ``len(blocks)`` when it happened, so a UI can show it inline.
    """

    kind: Literal["error", "connection_lost", "backlog_truncated", "local"]
    text: str
    position: int
    error_code: str | None = None


# --- the renderer: frames the state machine accepted -> blocks ----------------------------


class _Renderer:
    """Builds blocks from accepted frames, in order. Pure bookkeeping, no rules."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.totals = Totals()
        self._turns: dict[str, TurnBlock] = {}
        self._text: dict[str, TextBlock] = {}
        self._thinking: dict[str, ThinkingBlock] = {}
        self._calls: dict[str, ToolCallBlock] = {}
        self._interactions: dict[str, InteractionBlock] = {}
        self._turn: str | None = None
        self._last_turn: str | None = None  # a usage after a turn end belongs to that turn

    def apply(self, frame: Frame | GenericFrame, role: SenderRole) -> None:
        """Render one accepted frame."""
        if isinstance(frame, GenericFrame):
            return
        base: dict[str, Any] = {
            "message_id": frame.message_id,
            "seq": frame.seq,
            "turn_id": self._turn,
        }
        synthetic = frame.synthetic
        if isinstance(frame, TurnStart):
            p = frame.payload
            self._turn = p.turn_id
            base["turn_id"] = p.turn_id
            turn = TurnBlock(turn_index=p.turn_index, mode=p.mode, **base)
            self._turns[p.turn_id] = turn
            self.blocks.append(turn)
        elif isinstance(frame, TurnEnd):
            self._end_turn(frame, synthetic)
        elif isinstance(frame, TextDelta):
            self._block(
                self._text, TextBlock, frame.payload.block_id, base
            ).text += frame.payload.delta
        elif isinstance(frame, TextDone):
            # a done without deltas: an empty (or given) text block
            text = self._block(self._text, TextBlock, frame.payload.block_id, base)
            if frame.payload.text is not None:
                text.text = frame.payload.text
            text.done = True
            text.synthetic = synthetic
        elif isinstance(frame, ThinkingDelta):
            self._block(
                self._thinking, ThinkingBlock, frame.payload.block_id, base
            ).text += frame.payload.delta
        elif isinstance(frame, ThinkingDone):
            thinking = self._block(self._thinking, ThinkingBlock, frame.payload.block_id, base)
            thinking.done = True
            thinking.synthetic = synthetic
        elif isinstance(frame, ToolRequest):
            p_req = frame.payload
            call = ToolCallBlock(
                call_id=p_req.call_id, tool_name=p_req.tool_name, input=p_req.input, **base
            )
            self._calls[call.call_id] = call
            self.blocks.append(call)
            self.totals.tool_calls += 1
        elif isinstance(frame, ToolResult):
            found = self._calls.get(frame.payload.call_id)
            if found is not None:
                found.status = frame.payload.status
                found.output = frame.payload.output
                found.synthetic = synthetic
        elif isinstance(frame, InteractionRequest):
            p_ask = frame.payload
            ask = InteractionBlock(
                interaction_id=p_ask.interaction_id,
                interaction_kind=p_ask.kind,
                prompt=p_ask.prompt,
                options=p_ask.options,
                **base,
            )
            self._interactions[ask.interaction_id] = ask
            self.blocks.append(ask)
        elif isinstance(frame, InteractionResponse):
            answered = self._interactions.get(frame.payload.interaction_id)
            if answered is not None:
                answered.status = "answered"
                answered.response = frame.payload.response
        elif isinstance(frame, InteractionCancel):
            withdrawn = self._interactions.get(frame.payload.interaction_id)
            if withdrawn is not None and withdrawn.status == "pending":
                withdrawn.status = "withdrawn"
                withdrawn.withdraw_reason = frame.payload.reason
        elif isinstance(frame, AgentState):
            if synthetic:  # §7.8.1: finalization discards pending interactions
                for ask in self._interactions.values():
                    if ask.status == "pending":
                        ask.status = "discarded"
                        ask.synthetic = True
        elif isinstance(frame, UserMessage):
            who = frame.sender.participant_id if frame.sender is not None else None
            self.blocks.append(
                UserMessageBlock(text=frame.payload.text, participant_id=who, **base)
            )
        elif isinstance(frame, Usage):
            self._usage(frame, role, base)
        elif isinstance(frame, Compacted):
            p_c = frame.payload
            self.blocks.append(
                CompactionBlock(
                    summary=p_c.summary,
                    previous_token_count=p_c.previous_token_count,
                    current_token_count=p_c.current_token_count,
                    trigger=p_c.trigger,
                    preserved_elements=p_c.preserved_elements,
                    **base,
                )
            )
            self.totals.compactions += 1
        else:
            self._notice(frame, base, role)

    def _block(
        self,
        by_id: dict[str, _Streamed],
        kind: type[_Streamed],
        block_id: str,
        base: dict[str, Any],
    ) -> _Streamed:
        """The text or thinking block ``block_id``, opened (and shown) at its first frame."""
        block = by_id.get(block_id)
        if block is None:
            block = by_id[block_id] = kind(block_id=block_id, **base)
            self.blocks.append(block)
        return block

    def _end_turn(self, frame: TurnEnd, synthetic: bool) -> None:
        p = frame.payload
        turn = self._turns.get(p.turn_id)
        if turn is not None:
            turn.ended = True
            turn.stop_reason = p.stop_reason
            turn.tool_invocation_count = p.tool_invocation_count
            turn.synthetic = synthetic
        # Open text and thinking blocks end with the turn (notes §15.8).
        blocks: list[TextBlock | ThinkingBlock] = [*self._text.values(), *self._thinking.values()]
        for block in blocks:
            if block.turn_id == p.turn_id and not block.done:
                block.done = True
                block.synthetic = synthetic
        self._turn = None
        self._last_turn = p.turn_id
        self.totals.turns += 1

    def _usage(self, frame: Usage, role: SenderRole, base: dict[str, Any]) -> None:
        p = frame.payload
        tokens = p.token_usage
        window = p.context_window
        block = UsageBlock(
            input_tokens=tokens.input_tokens,
            output_tokens=tokens.output_tokens,
            cache_read_tokens=tokens.cache_read_tokens,
            cache_write_tokens=tokens.cache_write_tokens,
            thinking_tokens=tokens.thinking_tokens,
            cost_used=p.cost_usage.used,
            cost_limit=p.cost_usage.limit,
            cost_unit=p.cost_usage.unit,
            messages_used=p.message_usage.used,
            messages_limit=p.message_usage.limit,
            context_utilization=None if window is None else window.utilization,
            time_to_reset=p.time_to_reset,
            from_master=role == "master",
            **{**base, "turn_id": p.turn_id or base["turn_id"] or self._last_turn},
        )
        self.blocks.append(block)
        if role != "client":
            return  # the master's totals restate what the client reported (state.py agrees)
        t = self.totals
        t.input_tokens += tokens.input_tokens
        t.output_tokens += tokens.output_tokens
        t.cache_read_tokens += tokens.cache_read_tokens or 0
        t.cache_write_tokens += tokens.cache_write_tokens or 0
        t.thinking_tokens += tokens.thinking_tokens or 0
        t.cost_used = p.cost_usage.used
        t.cost_limit = p.cost_usage.limit
        t.cost_unit = p.cost_usage.unit
        if block.context_utilization is not None:
            t.context_utilization = block.context_utilization

    def _notice(self, frame: Frame, base: dict[str, Any], role: SenderRole) -> None:
        notice: NoticeBlock | None = None
        if isinstance(frame, Renamed):
            p_r = frame.payload
            notice = NoticeBlock(
                notice="renamed", text=f"renamed to {p_r.name!r} by {p_r.renamed_by}", **base
            )
        elif isinstance(frame, Deleted):
            p_d = frame.payload
            notice = NoticeBlock(
                notice="deleted",
                text=f"session deleted ({p_d.reason}, by {p_d.deleted_by})",
                **base,
            )
        elif isinstance(frame, SessionError):
            p_e = frame.payload
            notice = NoticeBlock(
                notice="error",
                text=p_e.message,
                error_code=p_e.error_code,
                lost_frame_count=p_e.lost_frame_count,
                reported_by=role,
                **base,
            )
        elif isinstance(frame, History):
            s = frame.payload.buffer_status
            count = len(frame.payload.frames)
            text = f"the agent reconnected with {count} buffered frame(s)"
            if s.truncated:
                lost = "an unknown number of" if s.lost_frame_count is None else s.lost_frame_count
                text += f"; {lost} frame(s) were lost ({s.policy_applied} buffer)"
            notice = NoticeBlock(
                notice="history",
                text=text,
                truncated=s.truncated,
                lost_frame_count=s.lost_frame_count,
                **base,
            )
        elif isinstance(frame, Cancel):
            notice = NoticeBlock(notice="cancel", text="cancel requested", **base)
        # session.presence changes no block (the view keeps participants apart).
        if notice is not None:
            self.blocks.append(notice)


# --- persistence ---------------------------------------------------------------------------


class SavedEntry(msgspec.Struct, array_like=True):
    """One folded frame as persisted: who sent it and its envelope."""

    role: SenderRole
    frame: msgspec.Raw


class ViewSnapshot(msgspec.Struct, kw_only=True):
    """What :meth:`SessionView.snapshot` saves: enough to rebuild the view exactly."""

    session_id: str
    last_seq: int = 0
    last_message_id: str | None = None
    entries: list[SavedEntry] = msgspec.field(default_factory=list)
    info: SessionInfo | None = None
    skipped: int = 0
    participants: dict[str, str] = msgspec.field(default_factory=dict)


# --- the view ------------------------------------------------------------------------------


class SessionView:
    """The folded session plus its transcript, for a UI (see the module docstring)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.state = SessionState()
        self.info: SessionInfo | None = None
        self.last_seq = 0
        self.last_message_id: str | None = None
        self.skipped = 0
        self.skipped_reasons: deque[str] = deque(maxlen=_MAX_REASONS)
        self.notices: list[Notice] = []
        self.participants: dict[str, str] = {}  # participant_id -> attached/detached/expired
        self._entries: list[tuple[Frame | GenericFrame, SenderRole]] = []
        self._renderer = _Renderer()
        self._mark: int | None = None  # index of the first synthetic entry in effect
        self._seen: set[str] = set()

    # --- what a UI reads ---------------------------------------------------------------

    @property
    def blocks(self) -> list[Block]:
        """The transcript, oldest first."""
        return self._renderer.blocks

    @property
    def totals(self) -> Totals:
        """Usage and cost totals."""
        return self._renderer.totals

    @property
    def status(self) -> Status:
        """idle / running / requires_action / terminated (seed 000)."""
        return status(self.state)

    @property
    def agent_state(self) -> str:
        """What the agent is doing (``idle`` after finalization)."""
        return self.state.agent_state

    @property
    def name(self) -> str:
        """The session's name: the latest rename, else the welcome's."""
        if self.state.name:
            return self.state.name
        return self.info.name if self.info is not None else ""

    @property
    def finalized_locally(self) -> bool:
        """True while this view's own §7.8.1 synthetic frames are in effect."""
        return self.state.finalized_locally and self.state.finalized

    @property
    def entries(self) -> list[tuple[Frame | GenericFrame, SenderRole]]:
        """The frames in effect, in order (synthetic frames taken back out are gone)."""
        return list(self._entries)

    def has_seen(self, message_id: str) -> bool:
        """True when a frame with this message id was folded."""
        return message_id in self._seen

    # --- input -------------------------------------------------------------------------

    def receive(self, frame: Frame | GenericFrame) -> bool:
        """Fold a frame the master delivered. Returns True when it changed the view."""
        if isinstance(frame, Welcome):
            self.info = frame.payload.session
            return False
        if frame.seq is None:
            if isinstance(frame, History):
                self._receive_backlog(frame)
                return True
            if isinstance(frame, SessionError):
                p = frame.payload
                self._note("error", p.message, error_code=p.error_code)
            return False
        role: SenderRole = frame.sender.role if frame.sender is not None else "master"
        return self._receive_logged(frame, role)

    def _receive_logged(self, frame: Frame | GenericFrame, role: SenderRole) -> bool:
        """A log entry (it has a seq) sent by ``role``."""
        assert frame.seq is not None
        if frame.seq <= self.last_seq:
            return False  # already folded (a backlog never overlaps, but be safe)
        self.last_seq = frame.seq
        self.last_message_id = frame.message_id
        if self.state.finalized_locally and self.state.finalized:
            # A live frame without a backlog first: the local finalization stands (§7.8.3).
            self._make_final()
        if isinstance(frame, Presence):
            for change in frame.payload.all_changes():  # coalesced: several, in order
                self.participants[change.participant_id] = change.state
        return self.fold(frame, role)

    def fold(self, frame: Frame | GenericFrame, role: SenderRole) -> bool:
        """Fold one frame sent by ``role`` (own frames, or a log being replayed).

        Returns False (and counts it) when the state machine refuses the frame, or when a
        frame with the same message id was already folded.
        """
        if frame.message_id in self._seen:
            return False
        if isinstance(frame, History):
            return self._fold_history(frame, role)
        had_record = self.state.finalized
        try:
            fold(self.state, frame, role)
        except ProtocolError as exc:
            self._skip(frame, exc)
            return False
        self._seen.add(frame.message_id)
        self._append(frame, role, had_record)
        return True

    def reset_cursor(self, seq: int, message_id: str | None = None) -> None:
        """Move the cursor (the master said where this participant's view starts)."""
        self.last_seq = seq
        self.last_message_id = message_id

    # --- §7.8 --------------------------------------------------------------------------

    def connection_lost(self) -> list[Frame]:
        """§7.8.1: finalize locally; returns the synthetic frames folded (maybe none)."""
        if self.finalized_locally or self.status == "terminated":
            return []
        frames = finalize(self.state, session_id=self.session_id, sender=LOCAL_SENDER)
        for frame in frames:
            self.fold(frame, "master")
        if frames:
            self._note("connection_lost", "connection lost: unfinished items were finalized")
        return frames

    def _receive_backlog(self, history: History) -> None:
        frames = self._decode_all(history.payload.frames)
        status_ = history.payload.buffer_status
        if self.state.finalized_locally and self.state.finalized:
            if unfinalizes(status_, frames):
                # §7.8.3 step 1: take exactly the locally synthetic frames back out.
                plan = plan_history(self.state, [], _COMPLETE, "master")
                self.state = plan.state
                self._retract()
            else:
                self._make_final()  # truncated, or deleted inside: the finalization stays
        if status_.truncated:
            lost = status_.lost_frame_count
            count = "an unknown number of" if lost is None else str(lost)
            self._note(
                "backlog_truncated",
                f"{count} frame(s) missed while disconnected were lost "
                f"({status_.policy_applied} buffer): this view is incomplete",
            )
        # §7.8.3 step 2: replay the backlog in order, as the frames would have arrived live.
        for frame in frames:
            self.receive(frame)

    def _make_final(self) -> None:
        self.state = snapshot(self.state)  # drops the record: nothing can retract it now
        self._mark = None

    def _fold_history(self, history: History, role: SenderRole) -> bool:
        decoded = self._decode_all(history.payload.frames)
        frames = [f for f in decoded if f.message_id not in self._seen]
        try:
            plan = plan_history(self.state, frames, history.payload.buffer_status, role)
        except ProtocolError as exc:
            self._skip(history, exc)
            return False
        self._seen.add(history.message_id)
        self.state = plan.state
        if plan.unfinalized:
            self._retract()
        self._mark = None
        self._entries.append((history, role))
        self._renderer.apply(history, role)
        if unfinalizes(history.payload.buffer_status, frames):
            for frame in plan.accepted:
                self._seen.add(frame.message_id)
                self._entries.append((frame, role))
                self._renderer.apply(frame, role)
        for refused, error in plan.refused:
            self._skip(refused, error)
        return True

    def _append(self, frame: Frame | GenericFrame, role: SenderRole, had_record: bool) -> None:
        self._entries.append((frame, role))
        has_record = self.state.finalized
        if has_record and not had_record:
            self._mark = len(self._entries) - 1
        elif had_record and not has_record:
            self._mark = None
        self._renderer.apply(frame, role)

    def _retract(self) -> None:
        """Remove the synthetic entries of the finalization just taken back; re-render."""
        mark = self._mark
        if mark is not None:
            self._entries = [
                entry
                for index, entry in enumerate(self._entries)
                if index < mark or not entry[0].synthetic
            ]
        self._mark = None
        self._rerender()

    def _rerender(self) -> None:
        renderer = _Renderer()
        for frame, role in self._entries:
            renderer.apply(frame, role)
        self._renderer = renderer

    # --- bookkeeping -------------------------------------------------------------------

    def _decode_all(self, raws: Iterable[msgspec.Raw]) -> list[Frame | GenericFrame]:
        frames: list[Frame | GenericFrame] = []
        for raw in raws:
            try:
                frames.append(codec.decode(raw))
            except ProtocolError as exc:
                self.skipped += 1
                self.skipped_reasons.append(f"undecodable frame in a history: {exc.message}")
        return frames

    def _skip(self, frame: Frame | GenericFrame, exc: ProtocolError) -> None:
        self.skipped += 1
        self.skipped_reasons.append(f"{frame.type} {frame.message_id}: {exc.code}: {exc.message}")

    def _note(
        self,
        kind: Literal["error", "connection_lost", "backlog_truncated", "local"],
        text: str,
        *,
        error_code: str | None = None,
    ) -> None:
        self.notices.append(
            Notice(kind=kind, text=text, position=len(self.blocks), error_code=error_code)
        )

    def note(self, text: str) -> None:
        """Record a local notice (e.g. the client library's own frames were lost)."""
        self._note("local", text)

    # --- persistence and replay --------------------------------------------------------

    def snapshot(self) -> ViewSnapshot:
        """What to persist; a local finalization is left out (restore redoes it)."""
        entries = self._entries
        if self.finalized_locally and self._mark is not None:
            entries = entries[: self._mark]
        return ViewSnapshot(
            session_id=self.session_id,
            last_seq=self.last_seq,
            last_message_id=self.last_message_id,
            entries=[SavedEntry(role, msgspec.Raw(codec.encode(f))) for f, role in entries],
            info=self.info,
            skipped=self.skipped,
            participants=dict(self.participants),
        )

    @classmethod
    def restore(cls, saved: ViewSnapshot, *, finalize_now: bool = True) -> SessionView:
        """Rebuild a view from :meth:`snapshot`; ``finalize_now`` runs §7.8.2 (app restart)."""
        view = cls(saved.session_id)
        view.info = saved.info
        view.participants = dict(saved.participants)
        for entry in saved.entries:
            try:
                frame = codec.decode(entry.frame)
            except ProtocolError:
                continue
            view._replay_entry(frame, entry.role)
        view.last_seq = saved.last_seq
        view.last_message_id = saved.last_message_id
        view.skipped = saved.skipped
        if finalize_now:
            view.connection_lost()
        return view

    def _replay_entry(self, frame: Frame | GenericFrame, role: SenderRole) -> None:
        if isinstance(frame, History):
            # Its effect is already in the entries: what it retracted is gone, what it folded
            # follows it. What is left is that no finalization before it can be retracted.
            self._seen.add(frame.message_id)
            self._make_final()
            self._entries.append((frame, role))
            self._renderer.apply(frame, role)
            return
        self.fold(frame, role)

    @classmethod
    def replay(
        cls, session_id: str, frames: Iterable[tuple[Frame | GenericFrame, SenderRole]]
    ) -> SessionView:
        """A fresh view that folded ``frames`` (a session log) in order."""
        view = cls(session_id)
        for frame, role in frames:
            if frame.seq is not None:
                view._receive_logged(frame, role)
            else:
                view.fold(frame, role)
        return view
