"""A client's ``session.history`` (§7.1.1, §7.8.3, notes §15.1, §15.10).

The frames a reattaching client buffered while it was away are checked like live ones
(session, dedupe, the act table), planned against the state (:func:`protocol.finalize.plan_history`
unfinalizes what the detach finalized) and logged as one entry that carries their own bytes.
What they do once logged (renames, endings, the truncation notice) is the history's effect,
applied with every committed entry's (:mod:`.effects`).
"""

from __future__ import annotations

import msgspec

from protocol import acts, codec
from protocol.errors import NotAllowed, ProtocolError, StoreError
from protocol.finalize import plan_history
from protocol.frames import Frame, GenericFrame, History, HistoryPayload
from protocol.state import Effect, effect_of

from ..store.base import NewEntry
from .core import Hooks, SessionCore
from .participant import Participant
from .pipeline import CommitPipeline, Pending, same_frame

__all__ = ["ClientHistory"]


class ClientHistory:
    """Accepts a client's history into one session (caller holds the lock)."""

    def __init__(self, core: SessionCore, pipeline: CommitPipeline, hooks: Hooks) -> None:
        self.core = core
        self.pipeline = pipeline
        self.hooks = hooks

    async def accept(self, participant: Participant, frame: History) -> None:
        """Check, plan, log and deliver ``frame``; its effects follow its delivery."""
        core = self.core
        frames: list[Frame | GenericFrame] = []
        raw_of: dict[int, bytes] = {}  # each frame's own bytes, only seq and sender replaced
        for raw in frame.payload.frames:
            try:
                inner = codec.decode_received(bytes(raw))
            except ProtocolError as exc:
                participant.send_error(exc)
                continue
            if inner.session_id != core.id:
                participant.send_error(
                    ProtocolError(f"history frame {inner.message_id} names another session"),
                    ref_message_id=inner.message_id,
                )
                continue
            try:
                logged = core.seen(inner.message_id) or await core.store.message_seq(
                    core.id, inner.message_id
                )
            except StoreError as exc:
                # Refused like a failed append: answered, and later frames refused until it
                # is sent again (never judged against a state the history would have changed).
                core.count_store_error(exc)
                self.pipeline.refuse(participant, frame.message_id, exc)
                return
            if logged:
                held = await self.pipeline.holder(inner.message_id)
                if held is not None and not same_frame(held, participant.role, inner, bytes(raw)):
                    # Another frame holds that id: refused, not dropped as logged already.
                    self.pipeline.conflict(participant, inner, held)
                continue  # already logged live: logged once (notes §7)
            # [trust] a history's frames are acts like live ones: what the credential may
            # not do is neither logged nor relayed (every view would fold it, §16.6).
            act = acts.act_of(
                inner.type, fatal=effect_of(inner, participant.role) is Effect.END_WITH_ERROR
            )
            try:
                if act is not None:
                    acts.require(act, participant.role, participant.principal)
            except NotAllowed as exc:
                participant.send_error(
                    NotAllowed(f"history frame {inner.message_id} refused: {exc.message}")
                )
                continue
            frames.append(inner)
            # Stripped and stamped like a live frame: a seq or a master's sender brought in a
            # history would reach the edges and the log as the master's word (notes §16.8).
            raw_of[id(inner)] = codec.stamp_sender(bytes(raw), inner, participant.sender)
        try:
            plan = plan_history(core.state, frames, frame.payload.buffer_status, participant.role)
        except ProtocolError as exc:
            participant.send_error(exc, ref_message_id=frame.message_id)
            return
        for refused, error in plan.refused:
            participant.send_error(
                type(error)(f"history frame {refused.message_id} refused: {error.message}"),
                ref_message_id=refused.message_id,
            )
        kept = [raw_of[id(f)] for f in plan.accepted]
        entry_frame = History(
            message_id=frame.message_id,
            session_id=core.id,
            timestamp=frame.timestamp,
            metadata=frame.metadata,
            payload=HistoryPayload(
                frames=[msgspec.Raw(b) for b in kept],
                buffer_status=frame.payload.buffer_status,
                last_sync_timestamp=frame.payload.last_sync_timestamp,
                last_message_id=frame.payload.last_message_id,
            ),
        )
        previous = core.state
        core.state = plan.state
        encoded = codec.encode(entry_frame)
        head, tail = codec.stamp_parts(encoded, entry_frame, participant.sender)
        entry = NewEntry(
            message_id=frame.message_id,
            type="session.history",
            head=head,
            tail=tail,
            sender_id=participant.id,
            sender_role=participant.role,
            exclude=participant.id,
            # welcome.received reports the history's last frame (notes §4); none kept: unchanged
            received_id=plan.accepted[-1].message_id if plan.accepted else "",
        )
        if not await self.pipeline.flush([Pending(participant, entry_frame, entry)]):
            core.state = previous
