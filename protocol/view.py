"""A session as a UI shows it: transcript blocks folded from frames (RAWP §7, §7.8; notes §6, §8).

:class:`SessionView` folds every frame with the session state machine the master uses
(:func:`protocol.finalize.fold`, :func:`protocol.finalize.plan_history`) and keeps, beside the
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
from typing import Final, Literal

import msgspec

from . import codec
from .blocks import (
    Block,
    CompactionBlock,
    InteractionBlock,
    Notice,
    NoticeBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    Totals,
    TurnBlock,
    UsageBlock,
    UserMessageBlock,
)
from .errors import ProtocolError
from .finalize import finalize, fold, plan_history, snapshot, unfinalizes
from .frames import (
    BufferStatus,
    Frame,
    GenericFrame,
    History,
    Presence,
    Sender,
    SessionError,
    SessionInfo,
    Welcome,
)
from .render import BlockRenderer
from .state import PendingRevisit, SenderRole, SessionState, Status, status

# The block types live in protocol.blocks; they are named here too, where callers import them.
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
        # False when this connection declined presence (docs/protocol.md §5 item 12): then
        # ``participants`` says nothing of who is attached
        self.presence = True
        self._entries: list[tuple[Frame | GenericFrame, SenderRole]] = []
        self._renderer = BlockRenderer()
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
        """idle / running / requires_action / rescheduling / terminated (seed 000, §17.5)."""
        return status(self.state)

    @property
    def pending_revisits(self) -> dict[str, PendingRevisit]:
        """Revisits the agent asked for that are neither woken nor withdrawn, by revisit id
        (notes §17.5); while any is and no turn is open the status is ``rescheduling``."""
        return dict(self.state.pending_revisits)

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
            self.presence = frame.payload.presence
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
        renderer = BlockRenderer()
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
