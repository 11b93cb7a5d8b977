"""RAWP frames: the envelope (notes §3) and every frame type (RAWP 1.0.2 §7, notes §4).

Each frame type is one msgspec Struct tagged on ``type``. The envelope fields live on the
common base :class:`Frame`; the payload is a per-type Struct. Unknown keys are ignored on
decode (forward compatibility, notes §3): the relay forwards the sender's original bytes, so
nothing is lost by ignoring them here.

Unions per direction:

* :data:`ClientFrame` — what a client (agent runtime) may send;
* :data:`EdgeFrame` — what an edge (UI) may send;
* :data:`MasterFrame` — what the master originates;
* :data:`AnyFrame` — every known type (what a participant's socket is decoded with, so a frame
  of the wrong direction is answered ``direction`` rather than ``unknown_type``).
"""

from __future__ import annotations

import datetime as _dt
from typing import Annotated, Any, Final, Literal, TypeAlias

from msgspec import Meta, Raw, Struct, field

from .names import FRAME_TYPE_MAX_BYTES, FRAME_TYPE_PATTERN, SESSION_ID_MAX, SESSION_ID_PATTERN

__all__ = [
    "ISO8601_PATTERN",
    "PROTOCOL_VERSION",
    "REVISIT_REASON_MAX",
    "SUBPROTOCOL",
    "UUID4_PATTERN",
    "Ack",
    "AckPayload",
    "AgentState",
    "AgentStatePayload",
    "AnyFrame",
    "BufferGrant",
    "BufferRequest",
    "BufferStatus",
    "Cancel",
    "CancelPayload",
    "ClientFrame",
    "Compacted",
    "CompactedPayload",
    "ContextWindow",
    "CostUsage",
    "CreateSpec",
    "Deleted",
    "DeletedPayload",
    "EdgeFrame",
    "Frame",
    "GenericFrame",
    "Hello",
    "HelloPayload",
    "History",
    "HistoryPayload",
    "InteractionCancel",
    "InteractionCancelPayload",
    "InteractionRequest",
    "InteractionRequestPayload",
    "InteractionResponse",
    "InteractionResponsePayload",
    "MasterFrame",
    "MessageUsage",
    "Metadata",
    "Presence",
    "PresenceChange",
    "PresencePayload",
    "PreservedElements",
    "Received",
    "Renamed",
    "RenamedPayload",
    "Resume",
    "RevisitCancel",
    "RevisitCancelPayload",
    "RevisitRequest",
    "RevisitRequestPayload",
    "Role",
    "Sender",
    "SenderRole",
    "SessionError",
    "SessionErrorPayload",
    "SessionInfo",
    "SessionStatus",
    "SessionStatusName",
    "StatusPayload",
    "TextDelta",
    "TextDeltaPayload",
    "TextDone",
    "TextDonePayload",
    "ThinkingDelta",
    "ThinkingDeltaPayload",
    "ThinkingDone",
    "ThinkingDonePayload",
    "TokenUsage",
    "ToolRequest",
    "ToolRequestPayload",
    "ToolResult",
    "ToolResultPayload",
    "TurnEnd",
    "TurnEndPayload",
    "TurnError",
    "TurnStart",
    "TurnStartPayload",
    "Usage",
    "UsagePayload",
    "UserMessage",
    "UserMessagePayload",
    "Wake",
    "WakePayload",
    "Welcome",
    "WelcomePayload",
    "frame_types",
]

PROTOCOL_VERSION: Final = "1.0.2"
SUBPROTOCOL: Final = "rawp.1"

# --- constrained scalar types ------------------------------------------------------------

# "$(?!\n)": msgspec matches with re.search, where a bare "$" also matches before a final
# newline; the lookahead keeps the same pattern valid in ECMA-262 for the JSON Schemas.
UUID4_PATTERN = (
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-4[0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$(?!\n)"
)
# ISO 8601: a date-time, or a duration such as "PT4H30M" (§7.3.1 time_to_reset). [0-9], not
# \d (which in Python also matches non-ASCII digits, unlike ECMA-262), and no capturing
# groups: a fifth of a session.usage decode was this match (make bench ARGS=validation).
_D = "[0-9]"
ISO8601_PATTERN = (
    rf"^(?:{_D}{{4}}-{_D}{{2}}-{_D}{{2}}(?:T{_D}{{2}}:{_D}{{2}}(?::{_D}{{2}}(?:\.{_D}+)?)?"
    rf"(?:Z|[+-]{_D}{{2}}:?{_D}{{2}})?)?"
    rf"|P(?!$)(?:{_D}+(?:\.{_D}+)?Y)?(?:{_D}+(?:\.{_D}+)?M)?(?:{_D}+(?:\.{_D}+)?W)?"
    rf"(?:{_D}+(?:\.{_D}+)?D)?"
    rf"(?:T(?={_D})(?:{_D}+(?:\.{_D}+)?H)?(?:{_D}+(?:\.{_D}+)?M)?(?:{_D}+(?:\.{_D}+)?S)?)?)$(?!\n)"
)

NonEmpty = Annotated[str, Meta(min_length=1, max_length=256)]
Id = Annotated[str, Meta(min_length=1, max_length=256, description="An opaque identifier.")]
# Names are grammar (notes §16.7, protocol/names.py).
SessionId = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=SESSION_ID_MAX,
        pattern=SESSION_ID_PATTERN,
        description="A session id: 1-128 characters of A-Z a-z 0-9 . _ : - (notes §16.7).",
    ),
]
FrameType = Annotated[
    str,
    Meta(
        max_length=FRAME_TYPE_MAX_BYTES,
        pattern=FRAME_TYPE_PATTERN,
        description="Dot-separated lowercase words, at most 64 bytes (notes §16.7).",
    ),
]
Uuid4 = Annotated[str, Meta(pattern=UUID4_PATTERN, description="A UUID version 4.")]
Count = Annotated[int, Meta(ge=0)]
Seq = Annotated[int, Meta(ge=0, description="A position in the session log (dense, from 1).")]
Timestamp = Annotated[_dt.datetime, Meta(tz=True, description="RFC 3339 date-time with offset.")]
Iso8601 = Annotated[
    str, Meta(pattern=ISO8601_PATTERN, description="ISO 8601 date-time or duration.")
]
Utilization = Annotated[float, Meta(ge=0.0, le=1.0)]
JsonObject = dict[str, Any]

Role = Literal["client", "edge"]
SenderRole = Literal["client", "edge", "master"]
"""Who sent a frame: the one definition (``protocol.state`` names it too)."""
Policy = Literal["RING", "DROP", "NONE"]
SessionStatusName = Literal["idle", "running", "requires_action", "rescheduling", "terminated"]


# Every Struct here is gc=False: frames are trees decoded from JSON and never part of a
# reference cycle, and not tracking them made decoding ~4 % faster (bench: validation).
class _Payload(Struct, gc=False, kw_only=True, omit_defaults=True):
    """Base of every payload: keyword-only, defaults omitted on encode."""


# --- envelope ----------------------------------------------------------------------------


class Sender(Struct, gc=False, kw_only=True):
    """Who sent a frame; stamped by the master on delivery (notes §3, §15.2)."""

    role: SenderRole
    participant_id: Id


class Metadata(Struct, gc=False, kw_only=True, omit_defaults=True):
    """Envelope metadata. Other keys are allowed and relayed untouched."""

    synthetic: bool = False
    ignorable: bool = False


class Frame(Struct, gc=False, tag_field="type", kw_only=True, omit_defaults=True):
    """The envelope shared by every frame (notes §3)."""

    message_id: Id
    session_id: SessionId
    timestamp: Timestamp
    seq: Seq | None = None
    sender: Sender | None = None
    metadata: Metadata | None = None

    @property
    def type(self) -> str:
        """The frame's ``type`` tag."""
        return self.__struct_config__.tag  # type: ignore[return-value]  # always a str here

    @property
    def synthetic(self) -> bool:
        """True for frames made by §7.8.1 finalization."""
        return self.metadata is not None and self.metadata.synthetic


class GenericFrame(Struct, gc=False, kw_only=True):
    """Any envelope, payload kept raw: used for unknown (``ignorable``) types."""

    type: FrameType
    message_id: Id
    session_id: SessionId
    timestamp: Timestamp
    payload: Raw = field(default_factory=lambda: Raw(b"{}"))
    seq: Seq | None = None
    sender: Sender | None = None
    metadata: Metadata | None = None

    @property
    def synthetic(self) -> bool:
        """Unknown types are never synthetic."""
        return False


# --- connection.* (notes §4, §5) ----------------------------------------------------------


class Resume(Struct, gc=False, kw_only=True, omit_defaults=True):
    """Where a reattaching participant's view ends: it has every seq up to ``last_seq``."""

    last_seq: Seq
    last_message_id: str | None = None


class BufferRequest(Struct, gc=False, kw_only=True):
    """The reattach buffer a participant asks for (capped by the server)."""

    policy: Policy
    capacity_bytes: Count


class BufferGrant(Struct, gc=False, kw_only=True):
    """The reattach buffer the master granted."""

    policy: Policy
    capacity_bytes: Count


class CreateSpec(_Payload):
    """Create the session if it does not exist (client only; idempotent)."""

    name: str | None = None
    agent_id: str | None = None
    parent_session_id: SessionId | None = None


class HelloPayload(_Payload):
    """First frame of every connection.

    ``presence``: false asks for no ``session.presence`` frames, live or in the backlog; None
    keeps the participant's previous choice, else true (docs/protocol.md §5 item 12).
    """

    protocol_version: NonEmpty
    role: Role
    token: NonEmpty
    participant_id: Id | None = None
    resume: Resume | None = None
    buffer: BufferRequest | None = None
    create: CreateSpec | None = None
    presence: bool | None = None
    accepts_input_during_turn: bool | None = None
    """A client that steers: it takes ``user.message`` during its turn, so they are relayed at
    once instead of waiting for the run to end (notes §17.3)."""


class SessionInfo(Struct, gc=False, kw_only=True):
    """The session as the welcome describes it."""

    session_id: Id
    name: str
    status: SessionStatusName
    head_seq: Seq
    epoch: str
    created_at: Timestamp


class Received(Struct, gc=False, kw_only=True):
    """The last frame the master committed from this participant."""

    last_message_id: str | None = None


class WelcomePayload(_Payload):
    """The master's answer to a valid hello.

    ``presence`` is false when this connection receives no ``session.presence`` frames
    (omitted when it does: docs/protocol.md §5 item 12).
    """

    participant_id: Id
    generation: Count
    resumed: bool
    session: SessionInfo
    reattach_window_ms: Annotated[
        int, Meta(ge=-1, description="How long a detached participant may come back; -1: never.")
    ]
    heartbeat_interval_ms: Count
    max_frame_bytes: Count
    buffer: BufferGrant
    received: Received | None = None
    presence: bool = True


class AckPayload(_Payload):
    """Cumulative acknowledgement of every seq up to ``last_seq``.

    Both ways (notes §5, §16.3): a participant tells the master what it has received (its
    cursor; ``last_message_id`` unused), and the master tells a sender what it has committed
    of theirs: ``last_message_id`` is the sender's latest committed frame, ``last_seq`` its
    seq, and every earlier frame of theirs on this connection is committed too (or refused).
    """

    last_seq: Seq
    last_message_id: str | None = None


class PresenceChange(_Payload):
    """One participant's presence change inside a coalesced ``session.presence``."""

    participant_id: Id
    role: Role
    state: Literal["attached", "detached", "expired"]


class PresencePayload(_Payload):
    """A participant attached, detached or expired; ``changes``: several at once.

    A coalesced frame (docs/protocol.md "Presence") lists every change of one delivery step
    in ``changes``, in order; the top-level fields repeat the first change, so a reader that
    knows only the one-change shape still reads a valid (partial) presence frame.
    """

    participant_id: Id
    role: Role
    state: Literal["attached", "detached", "expired"]
    changes: list[PresenceChange] | None = None

    def all_changes(self) -> list[PresenceChange]:
        """The changes this frame reports, in order (one for the one-change shape)."""
        if self.changes:
            return self.changes
        return [
            PresenceChange(participant_id=self.participant_id, role=self.role, state=self.state)
        ]

    def __post_init__(self) -> None:
        if self.changes is not None:
            first = self.changes[0] if self.changes else None
            if first is None or (first.participant_id, first.role, first.state) != (
                self.participant_id,
                self.role,
                self.state,
            ):
                raise ValueError("changes must be non-empty and start with the top-level change")


# --- §7.1 history -----------------------------------------------------------------------


class BufferStatus(_Payload):
    """§7.1.1 buffer_status."""

    policy_applied: Policy
    truncated: bool
    lost_frame_count: Count | None = None
    buffer_high_watermark: Count | None = None


class HistoryPayload(_Payload):
    """§7.1.1 session.history. Each element of ``frames`` is a complete envelope."""

    frames: list[Raw]
    buffer_status: BufferStatus
    last_sync_timestamp: Timestamp
    last_message_id: str


# --- §7.2 compaction ---------------------------------------------------------------------


class PreservedElements(_Payload):
    """§7.2.1 preserved_elements."""

    files_modified: list[str] | None = None
    decisions_made: list[str] | None = None
    errors_encountered: list[str] | None = None
    active_todos: list[JsonObject] | None = None


class CompactedPayload(_Payload):
    """§7.2.1 session.compacted."""

    summary: str
    previous_token_count: Count
    current_token_count: Count
    trigger: Literal["auto", "manual", "requested"]
    preserved_elements: PreservedElements | None = None


# --- §7.3 usage --------------------------------------------------------------------------


class TokenUsage(_Payload):
    """§7.3.1 token_usage."""

    input_tokens: Count
    output_tokens: Count
    cache_read_tokens: Count | None = None
    cache_write_tokens: Count | None = None
    thinking_tokens: Count | None = None


class CostUsage(_Payload):
    """§7.3.1 cost_usage; ``limit`` -1 means unlimited, else an amount (≥ 0)."""

    limit: Annotated[
        float,
        Meta(ge=-1, extra_json_schema={"not": {"exclusiveMinimum": -1, "exclusiveMaximum": 0}}),
    ]
    used: Annotated[float, Meta(ge=0)]
    unit: NonEmpty

    def __post_init__(self) -> None:
        # -1 is a sentinel, not the low end of a range: -0.5 means nothing
        if -1 < self.limit < 0:
            raise ValueError("cost_usage.limit is -1 (unlimited) or an amount of at least 0")


class MessageUsage(_Payload):
    """§7.3.1 message_usage; ``limit`` -1 means unlimited."""

    limit: Annotated[int, Meta(ge=-1)]
    used: Count
    unit: NonEmpty


class ContextWindow(_Payload):
    """§7.3.1 context_window."""

    capacity: Count | None = None
    used: Count | None = None
    utilization: Utilization | None = None


class UsagePayload(_Payload):
    """§7.3.1 session.usage."""

    token_usage: TokenUsage
    cost_usage: CostUsage
    message_usage: MessageUsage
    time_to_reset: Iso8601
    turn_id: str | None = None
    context_window: ContextWindow | None = None


# --- §7.4 errors -------------------------------------------------------------------------


class SessionErrorPayload(_Payload):
    """§7.4.1 session.error; ``lost_frame_count`` accompanies ``history_truncated``."""

    error_code: NonEmpty
    message: str
    fatal: bool
    lost_frame_count: Count | None = None
    ref_message_id: str | None = None
    """The ``message_id`` of the frame this error refuses (notes §16.3); absent otherwise."""


# --- §7.5 turns --------------------------------------------------------------------------

StopReason = Literal[
    "end_turn", "max_tokens", "cancelled", "error", "tool_use", "awaiting_input", "disconnected"
]


class TurnStartPayload(_Payload):
    """§7.5.1 session.turn.start."""

    turn_id: Uuid4
    turn_index: Count
    mode: str | None = None


class TurnError(_Payload):
    """Why a run failed (notes §17.4): a short machine code and a sentence for people."""

    code: Annotated[str, Meta(min_length=1, max_length=64)]
    message: Annotated[str, Meta(max_length=4096)]


class TurnEndPayload(_Payload):
    """§7.5.2 session.turn.end; ``disconnected`` only ever appears on synthetic frames;
    ``error`` only with ``stop_reason: error``."""

    turn_id: NonEmpty
    stop_reason: StopReason
    tool_invocation_count: Count | None = None
    error: TurnError | None = None


class StatusPayload(_Payload):
    """The session's derived status changed (notes §17.4); ``stop_reason`` is how the last
    run ended (absent while one runs)."""

    status: SessionStatusName
    stop_reason: StopReason | None = None


# --- §7.6 / §7.7 rename and delete -------------------------------------------------------


class RenamedPayload(_Payload):
    """§7.6.1 session.renamed."""

    session_id: Id
    name: Annotated[str, Meta(max_length=200)]
    renamed_by: SenderRole
    previous_name: str | None = None


class DeletedPayload(_Payload):
    """§7.7.1 session.deleted."""

    session_id: Id
    reason: Literal["user_request", "master_request", "timeout", "error"]
    deleted_by: Literal["edge", "client", "master", "system"]
    reattach_window_ms: Count | None = None
    """With ``timeout``: the reattach window that ran out, so every view can say how long the
    agent was waited for (notes §17.1)."""


# --- agent, tool, interaction, user and control frames (notes §4) ------------------------


class AgentStatePayload(_Payload):
    """What the agent is doing."""

    state: Literal["idle", "thinking", "tool_calling", "responding", "awaiting_input"]


class TextDeltaPayload(_Payload):
    """A piece of streamed text."""

    block_id: Id
    delta: str


class TextDonePayload(_Payload):
    """A text block is complete; ``text`` is optional (the concatenated deltas)."""

    block_id: Id
    text: str | None = None


class ThinkingDeltaPayload(_Payload):
    """A piece of streamed thinking."""

    block_id: Id
    delta: str


class ThinkingDonePayload(_Payload):
    """A thinking block is complete."""

    block_id: Id


class ToolRequestPayload(_Payload):
    """The agent calls a tool."""

    call_id: Id
    tool_name: NonEmpty
    input: JsonObject


class ToolResultPayload(_Payload):
    """The result of one tool call."""

    call_id: Id
    status: Literal["ok", "error", "cancelled"]
    output: Any = None


class InteractionRequestPayload(_Payload):
    """The agent waits for a person (confirmation, choice or free input)."""

    interaction_id: Id
    kind: Literal["confirmation", "choice", "input"]
    prompt: str
    options: list[Any] | None = None


class InteractionCancelPayload(_Payload):
    """The agent withdraws a pending interaction (notes §16.4)."""

    interaction_id: Id
    reason: str | None = None


class InteractionResponsePayload(_Payload):
    """An edge answers one pending interaction."""

    interaction_id: Id
    response: Any


class UserMessagePayload(_Payload):
    """User input from an edge; starts work for the agent."""

    text: str


class CancelPayload(_Payload):
    """An edge asks the client to stop the current turn."""

    turn_id: str | None = None


# --- wake and revisit (notes §17.5) -------------------------------------------------------

REVISIT_REASON_MAX: Final = 1024
RevisitReason = Annotated[
    str, Meta(max_length=REVISIT_REASON_MAX, description="Why, for people (at most 1024).")
]


class RevisitRequestPayload(_Payload):
    """The client asks to be woken at ``at`` (notes §17.5); the same ``revisit_id`` again
    reschedules the pending one."""

    revisit_id: Id
    at: Timestamp
    reason: RevisitReason | None = None


class RevisitCancelPayload(_Payload):
    """The client withdraws a pending revisit (an unknown or already woken id: no-op)."""

    revisit_id: Id


class WakePayload(_Payload):
    """A revisit came due (notes §17.5): ``at`` is the time the client asked for."""

    revisit_id: Id
    at: Timestamp
    reason: RevisitReason | None = None


# --- the frame types ---------------------------------------------------------------------


class Hello(Frame, tag="connection.hello"):
    """First frame on every connection (C, E)."""

    payload: HelloPayload


class Welcome(Frame, tag="connection.welcome"):
    """The master accepts a hello (M)."""

    payload: WelcomePayload


class Ack(Frame, tag="connection.ack"):
    """Cumulative acknowledgement (C, E: received; M: committed, notes §16.3)."""

    payload: AckPayload


class Presence(Frame, tag="session.presence"):
    """Presence change of one participant, or coalesced changes of several (M)."""

    payload: PresencePayload


class History(Frame, tag="session.history"):
    """§7.1.1 (C→M after reattach; M→C/E as the backlog)."""

    payload: HistoryPayload


class TurnStart(Frame, tag="session.turn.start"):
    """§7.5.1 (C)."""

    payload: TurnStartPayload


class TurnEnd(Frame, tag="session.turn.end"):
    """§7.5.2 (C; M when finalizing or cleaning up)."""

    payload: TurnEndPayload


class Usage(Frame, tag="session.usage"):
    """§7.3.1 (C; M may send totals)."""

    payload: UsagePayload


class Compacted(Frame, tag="session.compacted"):
    """§7.2.1 (C)."""

    payload: CompactedPayload


class SessionStatus(Frame, tag="session.status"):
    """The derived status changed (M; notes §17.4)."""

    payload: StatusPayload


class Renamed(Frame, tag="session.renamed"):
    """§7.6.1 (C, E, M)."""

    payload: RenamedPayload


class Deleted(Frame, tag="session.deleted"):
    """§7.7.1 (M; from C/E a delete request)."""

    payload: DeletedPayload


class SessionError(Frame, tag="session.error"):
    """§7.4.1 (C, E, M)."""

    payload: SessionErrorPayload


class AgentState(Frame, tag="agent.state"):
    """Agent activity (C; M when finalizing)."""

    payload: AgentStatePayload


class TextDelta(Frame, tag="agent.text.delta"):
    """Streamed text (C)."""

    payload: TextDeltaPayload


class TextDone(Frame, tag="agent.text.done"):
    """Text block complete (C; M when finalizing)."""

    payload: TextDonePayload


class ThinkingDelta(Frame, tag="agent.thinking.delta"):
    """Streamed thinking (C)."""

    payload: ThinkingDeltaPayload


class ThinkingDone(Frame, tag="agent.thinking.done"):
    """Thinking block complete (C; M when finalizing)."""

    payload: ThinkingDonePayload


class ToolRequest(Frame, tag="tool.invoke.request"):
    """Tool call (C)."""

    payload: ToolRequestPayload


class ToolResult(Frame, tag="tool.invoke.result"):
    """Tool result (C; M when finalizing or cleaning up)."""

    payload: ToolResultPayload


class InteractionRequest(Frame, tag="agent.interaction.request"):
    """The agent asks a person (C)."""

    payload: InteractionRequestPayload


class InteractionCancel(Frame, tag="agent.interaction.cancel"):
    """The agent withdraws its question (C; notes §16.4)."""

    payload: InteractionCancelPayload


class InteractionResponse(Frame, tag="control.interaction.response"):
    """A person answers (E)."""

    payload: InteractionResponsePayload


class UserMessage(Frame, tag="user.message"):
    """User input (E)."""

    payload: UserMessagePayload


class Cancel(Frame, tag="control.cancel"):
    """Cancel the current turn (E)."""

    payload: CancelPayload


class RevisitRequest(Frame, tag="session.revisit.request"):
    """Wake me at a time (C; notes §17.5)."""

    payload: RevisitRequestPayload


class RevisitCancel(Frame, tag="session.revisit.cancel"):
    """Withdraw a pending revisit (C; notes §17.5)."""

    payload: RevisitCancelPayload


class Wake(Frame, tag="session.wake"):
    """A revisit came due (M; notes §17.5)."""

    payload: WakePayload


ClientFrame: TypeAlias = (
    Hello
    | Ack
    | History
    | TurnStart
    | TurnEnd
    | Usage
    | Compacted
    | Renamed
    | Deleted
    | SessionError
    | AgentState
    | TextDelta
    | TextDone
    | ThinkingDelta
    | ThinkingDone
    | ToolRequest
    | ToolResult
    | InteractionRequest
    | InteractionCancel
    | RevisitRequest
    | RevisitCancel
)
EdgeFrame: TypeAlias = (
    Hello | Ack | Renamed | Deleted | SessionError | InteractionResponse | UserMessage | Cancel
)
MasterFrame: TypeAlias = (
    Welcome
    | Ack
    | Presence
    | History
    | Usage
    | Renamed
    | Deleted
    | SessionError
    | TurnEnd
    | TextDone
    | ThinkingDone
    | ToolResult
    | AgentState
    | SessionStatus
    | Wake
)
AnyFrame: TypeAlias = (
    Hello
    | Welcome
    | Ack
    | Presence
    | History
    | TurnStart
    | TurnEnd
    | Usage
    | Compacted
    | Renamed
    | Deleted
    | SessionError
    | AgentState
    | TextDelta
    | TextDone
    | ThinkingDelta
    | ThinkingDone
    | ToolRequest
    | ToolResult
    | InteractionRequest
    | InteractionCancel
    | InteractionResponse
    | UserMessage
    | Cancel
    | SessionStatus
    | RevisitRequest
    | RevisitCancel
    | Wake
)


def frame_types() -> dict[str, type[Frame]]:
    """Every known frame type by its ``type`` tag."""
    return {str(cls.__struct_config__.tag): cls for cls in _all_frame_classes()}


def _all_frame_classes() -> list[type[Frame]]:
    return list(AnyFrame.__args__)
