"""One mutation of our master per conformance case: the case's ``kill``, applied in-process.

Each kill is a small function that monkeypatches one thing in ``relay/`` (or a ``protocol/``
rule table the master consults; two things where our master guards a rule twice) so the master
breaks exactly the rule the case checks, as the case's ``kill`` sentence says. The kill tests
start a master after applying the kill and show the runner reports the case as FAIL (WARN for
a SHOULD). A case no mutation can fail is not a case; :data:`KILLS` must hold one entry per
registered case.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp.web_protocol
import msgspec
import pytest

import protocol.acts
import protocol.codec
import protocol.errors
import protocol.state
import relay.auth
import relay.http.app
import relay.http.hardening
import relay.http.revoking
import relay.http.sessions
import relay.hub
import relay.revocation
import relay.server
import relay.session.attach
import relay.session.builders
import relay.session.core
import relay.session.detach
import relay.session.effects
import relay.session.history
import relay.session.pipeline
import relay.session.roster
import relay.session.runs
import relay.session.termination
import relay.store.base
import relay.store.memory
import relay.ws
from protocol.buffers import BoundedBuffer
from protocol.errors import (
    ClientAttached,
    InvalidFrame,
    ProtocolVersionMismatch,
    TurnStateError,
    UnknownType,
    UsageMissing,
)
from protocol.finalize import finalize
from protocol.frames import (
    AckPayload,
    AgentState,
    BufferGrant,
    BufferStatus,
    Deleted,
    Frame,
    GenericFrame,
    Metadata,
    Policy,
    PresenceChange,
    Sender,
    SessionError,
    TextDone,
    ToolResult,
    TurnEnd,
)
from protocol.state import Phase, Rule
from relay.session import Participant, Session, builders
from relay.session.attach import Attacher
from relay.session.pipeline import CommitPipeline
from relay.session.roster import Roster
from relay.store.base import LogEntry
from tests.conformance.switches import SWITCHES

__all__ = ["KILLS", "Kill"]

Kill = Callable[[pytest.MonkeyPatch], None]
KILLS: dict[str, Kill] = {}

_LIVE_PHASES = (Phase.IDLE, Phase.TURN_OPEN, Phase.USAGE_DUE)


def kill(case_id: str) -> Callable[[Kill], Kill]:
    """Register the decorated function as the kill of ``case_id``."""

    def register(fn: Kill) -> Kill:
        assert case_id not in KILLS, case_id
        KILLS[case_id] = fn
        return fn

    return register


def _wrap(mp: pytest.MonkeyPatch, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
    """Replace ``owner.name`` with ``make(original)``."""
    mp.setattr(owner, name, make(getattr(owner, name)))


def _rule(mp: pytest.MonkeyPatch, tag: str, rule: Rule) -> None:
    """Use ``rule`` for ``tag`` in every live phase of the state machine table."""
    for phase in _LIVE_PHASES:
        mp.setitem(protocol.state.TABLE, (phase, tag), rule)


def _nothing(state: Any, frame: Any, role: Any) -> None:
    """A rule step that checks or changes nothing."""


def _close_code(
    mp: pytest.MonkeyPatch, error: type[protocol.errors.HandshakeError], code: int
) -> None:
    mp.setattr(error, "close_code", code)


# --- handshake (notes §2, §5, §15.6–7) --------------------------------------------------------


@kill("notes-5/welcome")
def _resumed_always(mp: pytest.MonkeyPatch) -> None:
    _wrap(
        mp,
        Attacher,
        "_welcome",
        lambda orig: lambda self, record, resumed: orig(self, record, True),
    )


@kill("notes-2/subprotocol-selected")
def _no_subprotocol_selected(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(relay.ws, "_accepted_headers", lambda offered: relay.ws._SERVER)


@kill("notes-2/foreign-subprotocol-refused")
def _accept_foreign_subprotocols(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(relay.ws, "_offered_subprotocols", lambda headers: [])


@kill("notes-15.7/no-subprotocol-accepted")
def _require_a_subprotocol(mp: pytest.MonkeyPatch) -> None:
    _wrap(mp, relay.ws, "_offered_subprotocols", lambda orig: lambda h: orig(h) or ["none"])


@kill("notes-5/4400-malformed-hello")
def _malformed_1008(mp: pytest.MonkeyPatch) -> None:
    _close_code(mp, protocol.errors.MalformedHello, 1008)


@kill("notes-5/4401-bad-credential")
def _bad_credential_4403(mp: pytest.MonkeyPatch) -> None:
    _close_code(mp, protocol.errors.BadCredential, 4403)


@kill("notes-5/4404-unknown-session")
def _unknown_4410(mp: pytest.MonkeyPatch) -> None:
    _close_code(mp, protocol.errors.NoSuchSession, 4410)


@kill("notes-5/4408-hello-timeout")
def _timeout_4400(mp: pytest.MonkeyPatch) -> None:
    _close_code(mp, protocol.errors.HelloTimeout, 4400)


@kill("notes-5/4409-client-attached")
def _second_client(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(Session, "attached_client", lambda self: None)


@kill("notes-5/takeover-4409")
def _superseded_1000(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(relay.session.attach, "_SUPERSEDED", 1000)


@kill("notes-15.6/takeover-no-finalization")
def _finalize_on_takeover(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        async def attach(self: Session, sink: Any, hello: Any, principal: Any) -> Any:
            current = self.participants.get(hello.payload.participant_id or "")
            if current is not None and current.role == "client":
                frames = finalize(self.state, session_id=self.id, sender=self.master_sender)
                if frames:
                    await self.append_master(frames)
            return await orig(self, sink, hello, principal)

        return attach

    _wrap(mp, Session, "attach", make)


@kill("notes-5/4410-deleted-session")
def _deleted_4404(mp: pytest.MonkeyPatch) -> None:
    _close_code(mp, protocol.errors.SessionGone, 4404)


@kill("notes-5/4426-protocol-version")
def _version_4400(mp: pytest.MonkeyPatch) -> None:
    _close_code(mp, protocol.errors.ProtocolVersionMismatch, 4400)


@kill("notes-15.7/patch-version-accepted")
def _exact_version_only(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        async def attach(self: Any, sink: Any, hello: Any, principal: Any) -> Any:
            if hello.payload.protocol_version != "1.0.2":
                raise ProtocolVersionMismatch("only 1.0.2")
            return await orig(self, sink, hello, principal)

        return attach

    _wrap(mp, relay.hub.Hub, "attach", make)


@kill("notes-5/presence")
def _presence_always_attached(mp: pytest.MonkeyPatch) -> None:
    _wrap(mp, Roster, "announce", lambda orig: lambda self, p, state: orig(self, p, "attached"))


@kill("notes-5/presence-burst")
def _coalesced_first_only(mp: pytest.MonkeyPatch) -> None:
    # coalesce every change for a long step, then report only the first of each frame
    mp.setattr(relay.session.roster, "_COALESCE_AUDIENCE", 1)
    mp.setattr(relay.session.roster, "_MIN_PRESENCE_WAIT", 0.5)
    mp.setattr(relay.session.roster, "_MAX_PRESENCE_WAIT", 0.5)
    _wrap(mp, builders, "presence", lambda orig: lambda sid, changes: orig(sid, changes[:1]))


@kill("notes-5/presence-declined")
def _presence_to_everyone(mp: pytest.MonkeyPatch) -> None:
    # no entry type is the one a participant may decline: presence reaches everyone, live
    # (SessionCore.deliver) and in backlogs (LogEntry.delivered_to)
    mp.setattr(relay.session.core, "PRESENCE", "-")
    mp.setattr(relay.store.base, "PRESENCE", "-")


@kill("notes-2/frame-too-big-1009")
def _no_size_limit(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        def serve(*args: Any, **kwargs: Any) -> Any:
            kwargs["max_frame_size"] = 1 << 40
            return orig(*args, **kwargs)

        return serve

    _wrap(mp, relay.server, "ws_create_server", make)


@kill("notes-2/binary-unsupported-data")
def _binary_invalid_frame(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(relay.ws, "UnsupportedData", InvalidFrame)


# --- envelope (notes §3) ----------------------------------------------------------------------


@kill("notes-3/unknown-type-rejected")
def _relay_unknown_types(mp: pytest.MonkeyPatch) -> None:
    decoder = protocol.codec._generic_decoder
    mp.setattr(protocol.codec, "_decode_unknown", lambda data, text: decoder.decode(data))


@kill("notes-3/unknown-type-ignorable-relayed")
def _refuse_ignorable(mp: pytest.MonkeyPatch) -> None:
    def refuse(data: Any, text: str) -> GenericFrame:
        raise UnknownType("unknown frame type")

    mp.setattr(protocol.codec, "_decode_unknown", refuse)


@kill("notes-3/unknown-keys-relayed")
def _reencode(mp: pytest.MonkeyPatch) -> None:
    encode = protocol.codec.encode
    _wrap(
        mp,
        protocol.codec,
        "stamp_parts",
        lambda orig: lambda raw, frame, sender: orig(encode(frame), frame, sender),
    )


@kill("notes-3/seq-and-sender-stamped")
def _trust_sender(mp: pytest.MonkeyPatch) -> None:
    _wrap(
        mp,
        protocol.codec,
        "stamp_parts",
        lambda orig: lambda raw, frame, sender: orig(raw, frame, frame.sender or sender),
    )


# --- buffers and dedupe (notes §7, §15.4–5) ---------------------------------------------------


@kill("notes-7/resume-backlog")
def _drop_newest_missed(mp: pytest.MonkeyPatch) -> None:
    class LosesOne(BoundedBuffer[Any]):
        def kept_bytes(self) -> list[bytes]:
            return super().kept_bytes()[:-1]

    mp.setattr(relay.session.attach, "BoundedBuffer", LosesOne)


def _policy_swap(mp: pytest.MonkeyPatch, source: Policy, target: Policy) -> None:
    """Buffers asked for ``source`` behave like ``target`` but still report ``source``."""

    class Swapped(BoundedBuffer[Any]):
        def __init__(self, policy: Any, capacity_bytes: int) -> None:
            super().__init__(target if policy == source else policy, capacity_bytes)
            self.reported = policy

        def status(self, *, extra_lost: int = 0, unknown_loss: bool = False) -> BufferStatus:
            status = super().status(extra_lost=extra_lost, unknown_loss=unknown_loss)
            return msgspec.structs.replace(status, policy_applied=self.reported)

    mp.setattr(relay.session.attach, "BoundedBuffer", Swapped)


@kill("notes-7/ring-exact")
def _ring_as_drop(mp: pytest.MonkeyPatch) -> None:
    _policy_swap(mp, "RING", "DROP")


@kill("notes-7/drop-exact")
def _drop_as_ring(mp: pytest.MonkeyPatch) -> None:
    _policy_swap(mp, "DROP", "RING")


@kill("notes-7/none-exact")
def _none_as_ring(mp: pytest.MonkeyPatch) -> None:
    _policy_swap(mp, "NONE", "RING")


@kill("notes-15.4/high-watermark")
def _watermark_is_capacity(mp: pytest.MonkeyPatch) -> None:
    class CapacityWatermark(BoundedBuffer[Any]):
        def status(self, *, extra_lost: int = 0, unknown_loss: bool = False) -> BufferStatus:
            status = super().status(extra_lost=extra_lost, unknown_loss=unknown_loss)
            return msgspec.structs.replace(status, buffer_high_watermark=self.capacity_bytes)

    mp.setattr(relay.session.attach, "BoundedBuffer", CapacityWatermark)


@kill("notes-15.5/buffer-grant")
def _default_grant(mp: pytest.MonkeyPatch) -> None:
    def grant(self: Attacher, asked: Any, previous: Any) -> BufferGrant:
        return BufferGrant(policy="RING", capacity_bytes=self.core.settings.buffer_capacity)

    mp.setattr(Attacher, "_grant", grant)


@kill("notes-15.5/previous-policy-kept")
def _forget_previous_grant(mp: pytest.MonkeyPatch) -> None:
    _wrap(mp, Attacher, "_grant", lambda orig: lambda self, asked, prev: orig(self, asked, None))


def _forget_message_ids(mp: pytest.MonkeyPatch) -> None:
    """Treat a repeated message_id as a new frame (the master forgets ids it has seen)."""
    seen: set[str] = set()

    def make(orig: Any) -> Any:
        def decode(data: bytes | str) -> Frame | GenericFrame:
            frame = orig(data)
            if frame.message_id in seen:
                frame = msgspec.structs.replace(frame, message_id=f"again-{uuid.uuid4()}")
            seen.add(frame.message_id)
            return frame  # type: ignore[no-any-return]

        return decode

    _wrap(mp, protocol.codec, "decode", make)


KILLS["notes-7/dedupe-live"] = _forget_message_ids
KILLS["notes-7/dedupe-history"] = _forget_message_ids


# --- state machine (notes §6, §15.11) ---------------------------------------------------------


@kill("notes-6/turn-state")
def _two_open_turns(mp: pytest.MonkeyPatch) -> None:
    start = protocol.state.TABLE[Phase.IDLE, "session.turn.start"]
    mp.setitem(protocol.state.TABLE, (Phase.TURN_OPEN, "session.turn.start"), start)


@kill("notes-6/block-state")
def _deltas_after_done(mp: pytest.MonkeyPatch) -> None:
    delta = protocol.state.TABLE[Phase.IDLE, "agent.text.delta"]
    _rule(mp, "agent.text.delta", Rule(_nothing, delta.apply))


@kill("notes-6/tool-pairing")
def _orphan_results(mp: pytest.MonkeyPatch) -> None:
    def apply(state: Any, frame: Any, role: Any) -> None:
        state.open_calls.pop(frame.payload.call_id, None)

    _rule(mp, "tool.invoke.result", Rule(_nothing, apply))


@kill("notes-6/interaction-state")
def _orphan_responses(mp: pytest.MonkeyPatch) -> None:
    def apply(state: Any, frame: Any, role: Any) -> None:
        state.pending_interactions.pop(frame.payload.interaction_id, None)

    _rule(mp, "control.interaction.response", Rule(_nothing, apply))


@kill("notes-6/direction")
def _edges_send_agent_frames(mp: pytest.MonkeyPatch) -> None:
    may_send = protocol.state._MAY_SEND
    mp.setitem(may_send, "edge", may_send["edge"] | may_send["client"])


@kill("notes-6/compacted-token-counts")
def _growing_compaction(mp: pytest.MonkeyPatch) -> None:
    compacted = protocol.state.TABLE[Phase.IDLE, "session.compacted"]
    _rule(mp, "session.compacted", Rule(_nothing, compacted.apply))


# --- usage (§7.3.1, §7.5.2) ------------------------------------------------------------------


@kill("7.5.2/usage-missing")
def _no_usage_warning(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        def fold(state: Any, frame: Any, role: Any) -> list[Any]:
            return [w for w in orig(state, frame, role) if not isinstance(w, UsageMissing)]

        return fold

    _wrap(mp, relay.session.pipeline, "fold", make)


@kill("notes-6/usage-missing-frame-processed")
def _refuse_without_usage(mp: pytest.MonkeyPatch) -> None:
    check = protocol.state.check

    def make(orig: Any) -> Any:
        def fold(state: Any, frame: Any, role: Any) -> list[Any]:
            for warning in check(state, frame, role):
                if isinstance(warning, UsageMissing):
                    raise warning
            return orig(state, frame, role)  # type: ignore[no-any-return]

        return fold

    _wrap(mp, relay.session.pipeline, "fold", make)


@kill("7.5.2/usage-after-turn-end")
def _usage_always_missing(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        def fold(state: Any, frame: Any, role: Any) -> list[Any]:
            warnings: list[Any] = orig(state, frame, role)
            if frame.type == "session.usage" and role == "client":
                warnings.append(UsageMissing("usage must follow a turn end"))
            return warnings

        return fold

    _wrap(mp, relay.session.pipeline, "fold", make)


@kill("7.3.1/usage-with-text-done")
def _no_usage_in_turn(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        def fold(state: Any, frame: Any, role: Any) -> list[Any]:
            if frame.type == "session.usage" and state.phase is Phase.TURN_OPEN:
                raise TurnStateError("usage only after the turn end")
            return orig(state, frame, role)  # type: ignore[no-any-return]

        return fold

    _wrap(mp, relay.session.pipeline, "fold", make)


# --- errors (§7.4.1) --------------------------------------------------------------------------


@kill("7.4.1/nonfatal-error-continues")
def _every_error_fatal(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        def offer(self: Session, participant: Any, frame: Any, raw: bytes) -> bool:
            if isinstance(frame, SessionError) and not frame.payload.fatal:
                payload = msgspec.structs.replace(frame.payload, fatal=True)
                frame = msgspec.structs.replace(frame, payload=payload)
            return bool(orig(self, participant, frame, raw))

        return offer

    _wrap(mp, Session, "offer", make)


# --- termination (§7.5.3, §7.7.1, notes §9, §15.8) --------------------------------------------


def _on_terminate(mp: pytest.MonkeyPatch, reason: str, before: Callable[[Session], None]) -> None:
    """Run ``before(session)`` when the session terminates for ``reason``."""

    def make(orig: Any) -> Any:
        async def terminate(self: Session, why: str, deleted_by: str) -> None:
            if why == reason:
                before(self)
            await orig(self, why, deleted_by)

        return terminate

    _wrap(mp, Session, "terminate_locked", make)


@kill("7.5.3/cleanup-order-delete")
def _deleted_first_on_delete(mp: pytest.MonkeyPatch) -> None:
    flagged: set[int] = set()
    _on_terminate(mp, "master_request", lambda s: flagged.add(id(s)))

    def make(orig: Any) -> Any:
        async def flush(self: CommitPipeline, pending: list[Any]) -> bool:
            if id(self.core) in flagged and pending and isinstance(pending[-1].frame, Deleted):
                pending = [pending[-1], *pending[:-1]]
            return await orig(self, pending)  # type: ignore[no-any-return]

        return flush

    _wrap(mp, CommitPipeline, "flush", make)


@kill("7.5.3/cleanup-order-fatal-error")
def _no_results_on_fatal(mp: pytest.MonkeyPatch) -> None:
    _on_terminate(mp, "error", lambda s: s.state.open_calls.clear())


@kill("7.5.3/cleanup-order-delete-request")
def _no_turn_end_on_request(mp: pytest.MonkeyPatch) -> None:
    def forget_turn(session: Session) -> None:
        session.state.turn_id = None

    _on_terminate(mp, "user_request", forget_turn)


@kill("7.5.3/cleanup-order-expiry")
def _expiry_as_error(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        async def terminate(self: Session, reason: str, deleted_by: str) -> None:
            if reason == "timeout":
                reason, deleted_by = "error", "master"
            await orig(self, reason, deleted_by)

        return terminate

    _wrap(mp, Session, "terminate_locked", make)


@kill("7.5.3/no-turn-no-cleanup")
def _last_turn_still_open(mp: pytest.MonkeyPatch) -> None:
    def reopen(session: Session) -> None:
        state = session.state
        if state.turn_id is None and state.turn_ids:
            state.turn_id = next(iter(state.turn_ids))
            state.phase = Phase.TURN_OPEN

    _on_terminate(mp, "master_request", reopen)


@kill("7.7.1/deleted-to-every-edge")
def _deleted_to_client_only(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        def deliver(self: Session, entry: LogEntry) -> None:
            if entry.type != "session.deleted":
                orig(self, entry)
                return
            for q in self.participants.values():
                if q.role == "client":
                    q.outbox.put(entry.data, entry.seq)

        return deliver

    _wrap(mp, Session, "deliver", make)


@kill("7.7.1/deleted-last-before-close")
def _presence_after_deleted(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        async def append_master(self: Session, frames: Any, **kwargs: Any) -> bool:
            frames = list(frames)
            if frames and isinstance(frames[-1], Deleted):
                ghost = PresenceChange(participant_id="p-ghost", role="edge", state="expired")
                frames.append(builders.presence(self.id, [ghost]))
            return await orig(self, frames, **kwargs)  # type: ignore[no-any-return]

        return append_master

    _wrap(mp, Session, "append_master", make)


@kill("notes-9/close-1000-after-delete")
def _close_1001(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(relay.session.termination, "_NORMAL", 1001)


@kill("7.7.1/deleted-payload-delete")
def _delete_as_user_request(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        async def delete(self: Any, session_id: str, *, reason: str, deleted_by: str) -> bool:
            if reason == "master_request":
                reason = "user_request"
            return await orig(self, session_id, reason=reason, deleted_by=deleted_by)  # type: ignore[no-any-return]

        return delete

    _wrap(mp, relay.hub.Hub, "delete", make)


@kill("notes-15.8/delete-request-answered")
def _request_deleted_by_master(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        async def terminate(self: Session, reason: str, deleted_by: str) -> None:
            if reason == "user_request":
                deleted_by = "master"
            await orig(self, reason, deleted_by)

        return terminate

    _wrap(mp, Session, "terminate_locked", make)


# --- rename (§7.6.1, notes §15.9) -------------------------------------------------------------


def _renames_to(mp: pytest.MonkeyPatch, chooser: Callable[[Session, LogEntry], list[Any]]) -> None:
    def make(orig: Any) -> Any:
        def deliver(self: Session, entry: LogEntry) -> None:
            if entry.type != "session.renamed":
                orig(self, entry)
                return
            for q in chooser(self, entry):
                q.outbox.put(entry.data, entry.seq)

        return deliver

    _wrap(mp, Session, "deliver", make)


@kill("7.6.1/rename-broadcast-from-edge")
def _rename_not_to_requester(mp: pytest.MonkeyPatch) -> None:
    _renames_to(mp, lambda s, e: [q for q in s.participants.values() if q.id != e.sender_id])


@kill("7.6.1/rename-broadcast-from-client")
def _client_rename_to_first_edge(mp: pytest.MonkeyPatch) -> None:
    def chooser(session: Session, entry: LogEntry) -> list[Any]:
        everyone = list(session.participants.values())
        if entry.sender_role != "client":
            return everyone
        edges = [q for q in everyone if q.role == "edge"]
        return [q for q in everyone if q.role == "client"] + edges[:1]

    _renames_to(mp, chooser)


@kill("notes-15.9/renamed-by-sender-role")
def _any_renamed_by(mp: pytest.MonkeyPatch) -> None:
    renamed = protocol.state.TABLE[Phase.IDLE, "session.renamed"]
    _rule(mp, "session.renamed", Rule(_nothing, renamed.apply))


@kill("7.6.1/rename-in-welcome")
def _keep_old_name(mp: pytest.MonkeyPatch) -> None:
    class NotARename:
        """Stands in for Renamed so the session never records the new name."""

    mp.setattr(relay.session.effects, "Renamed", NotARename)


# --- recovery (§7.8, notes §8) ----------------------------------------------------------------


def _finalization(mp: pytest.MonkeyPatch, change: Callable[[list[Frame]], list[Frame]]) -> None:
    _wrap(mp, relay.session.detach, "finalize", lambda orig: lambda *a, **k: change(orig(*a, **k)))


def _with_payload(frame: Frame, **changes: Any) -> Frame:
    payload = msgspec.structs.replace(frame.payload, **changes)  # type: ignore[attr-defined]
    return msgspec.structs.replace(frame, payload=payload)


@kill("7.8.1/finalize-tool-call")
def _results_error(mp: pytest.MonkeyPatch) -> None:
    _finalization(
        mp,
        lambda frames: [
            _with_payload(f, status="error") if isinstance(f, ToolResult) else f for f in frames
        ],
    )


@kill("7.8.1/finalize-turn")
def _turn_end_error(mp: pytest.MonkeyPatch) -> None:
    _finalization(
        mp,
        lambda frames: [
            _with_payload(f, stop_reason="error") if isinstance(f, TurnEnd) else f for f in frames
        ],
    )


@kill("7.8.1/finalize-blocks")
def _blocks_left_open(mp: pytest.MonkeyPatch) -> None:
    _finalization(mp, lambda frames: [f for f in frames if not isinstance(f, TextDone)])


@kill("7.8.1/finalize-agent-idle")
def _agent_left_busy(mp: pytest.MonkeyPatch) -> None:
    _finalization(mp, lambda frames: [f for f in frames if not isinstance(f, AgentState)])


@kill("7.8.1/finalize-interaction-discarded")
def _keep_interactions(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        async def append_master(self: Session, frames: Any, **kwargs: Any) -> bool:
            frames = list(frames)
            saved = dict(self.state.pending_interactions)
            ok: bool = await orig(self, frames, **kwargs)
            if any(f.synthetic for f in frames):
                self.state.pending_interactions.update(saved)
            return ok

        return append_master

    _wrap(mp, Session, "append_master", make)


@kill("7.8.1/synthetic-flag")
def _unmarked_results(mp: pytest.MonkeyPatch) -> None:
    _finalization(
        mp,
        lambda frames: [
            msgspec.structs.replace(f, metadata=None) if isinstance(f, ToolResult) else f
            for f in frames
        ],
    )


@kill("7.8.2/no-finalization-after-termination")
def _finalize_then_delete(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        async def terminate(self: Session, reason: str, deleted_by: str) -> None:
            if reason == "master_request" and not self.terminated:
                frames = finalize(self.state, session_id=self.id, sender=self.master_sender)
                if frames:
                    await self.append_master(frames)
            await orig(self, reason, deleted_by)

        return terminate

    _wrap(mp, Session, "terminate_locked", make)


@kill("notes-8/edge-drop-no-finalization")
def _finalize_on_edge_drop(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        async def detach(self: Session, participant: Any, **kwargs: Any) -> None:
            await orig(self, participant, **kwargs)
            if participant.role == "edge" and not self.terminated:
                async with self.lock:
                    frames = finalize(self.state, session_id=self.id, sender=self.master_sender)
                    if frames:
                        await self.append_master(frames)

        return detach

    _wrap(mp, Session, "detach", make)


def _history_plan(
    mp: pytest.MonkeyPatch,
    change: Callable[[list[Any], BufferStatus], tuple[list[Any], BufferStatus]],
) -> None:
    def make(orig: Any) -> Any:
        def plan_history(state: Any, frames: Any, status: BufferStatus, role: Any) -> Any:
            frames, status = change(list(frames), status)
            return orig(state, frames, status, role)

        return plan_history

    _wrap(mp, relay.session.history, "plan_history", make)


@kill("7.8.3/unfinalization")
def _never_unfinalize(mp: pytest.MonkeyPatch) -> None:
    _history_plan(mp, lambda fs, st: (fs, msgspec.structs.replace(st, truncated=True)))


@kill("7.8.3/no-unfinalize-truncated")
def _unfinalize_truncated(mp: pytest.MonkeyPatch) -> None:
    _history_plan(mp, lambda fs, st: (fs, msgspec.structs.replace(st, truncated=False)))


@kill("7.8.3/no-unfinalize-deleted")
def _ignore_deleted_in_history(mp: pytest.MonkeyPatch) -> None:
    _history_plan(mp, lambda fs, st: ([f for f in fs if not isinstance(f, Deleted)], st))


@kill("7.8.3/history-relayed-to-edges")
def _history_not_relayed(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        def deliver(self: Session, entry: LogEntry) -> None:
            if entry.type == "session.history" and entry.sender_role == "client":
                return
            orig(self, entry)

        return deliver

    _wrap(mp, Session, "deliver", make)


# --- history (§7.1.1, notes §15.10) -----------------------------------------------------------


def _truncation_notices(mp: pytest.MonkeyPatch, change: Callable[[SessionError], Any]) -> None:
    def make(orig: Any) -> Any:
        async def append_master(self: Session, frames: Any, **kwargs: Any) -> bool:
            kept = []
            for frame in frames:
                if (
                    isinstance(frame, SessionError)
                    and frame.payload.error_code == "history_truncated"
                ):
                    frame = change(frame)
                if frame is not None:
                    kept.append(frame)
            if not kept:
                return True
            return await orig(self, kept, **kwargs)  # type: ignore[no-any-return]

        return append_master

    _wrap(mp, Session, "append_master", make)


@kill("7.1.1/truncated-history-notice")
def _no_truncation_notice(mp: pytest.MonkeyPatch) -> None:
    _truncation_notices(mp, lambda frame: None)


@kill("7.1.1/truncated-notice-lost-count")
def _notice_without_count(mp: pytest.MonkeyPatch) -> None:
    _truncation_notices(mp, lambda frame: _with_payload(frame, lost_frame_count=None))


# --- added with the HTTP API: master renames, session tokens; head_seq and own frames ----------


@kill("7.6.1/rename-by-master")
def _master_rename_to_client(mp: pytest.MonkeyPatch) -> None:
    def chooser(session: Session, entry: LogEntry) -> list[Any]:
        everyone = list(session.participants.values())
        if entry.sender_role != "master":
            return everyone
        return [q for q in everyone if q.role == "client"]

    _renames_to(mp, chooser)


@kill("notes-5/4403-not-allowed")
def _tokens_attach_as_client(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(relay.auth.Principal, "may_attach", lambda self, role: True)


@kill("notes-15.3/head-seq")
def _head_plus_one(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        def welcome(self: Attacher, record: Any, resumed: bool) -> Any:
            frame = orig(self, record, resumed)
            info = frame.payload.session
            info = msgspec.structs.replace(info, head_seq=info.head_seq + 1)
            payload = msgspec.structs.replace(frame.payload, session=info)
            return msgspec.structs.replace(frame, payload=payload)

        return welcome

    _wrap(mp, Attacher, "_welcome", make)


@kill("notes-15.4/backlog-excludes-own-frames")
def _own_frames_in_backlog(mp: pytest.MonkeyPatch) -> None:
    def delivered_to(self: LogEntry, participant_id: str, role: str) -> bool:
        return not (self.edges_only and role != "edge")

    mp.setattr(LogEntry, "delivered_to", delivered_to)


@kill("notes-5/edge-expiry-presence")
def _expired_as_detached(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        def announce(self: Roster, participant: Any, state: str) -> Any:
            return orig(self, participant, "detached" if state == "expired" else state)

        return announce

    _wrap(mp, Roster, "announce", make)


@kill("notes-5/reattach-within-window")
def _expire_reattached_client(mp: pytest.MonkeyPatch) -> None:
    """Keep the detach deadline on reattach and expire the client when it fires.

    Our master guards twice (the deadline is cleared on reattach, and expiry skips attached
    participants), so the smallest change that breaks the rule touches both guards.
    """

    async def keep(self: Any, session_id: str, participant_id: str) -> None:
        return None

    mp.setattr(relay.store.memory.MemoryStore, "clear_deadline", keep)

    async def expire(self: Session, participant_id: str) -> None:
        async with self.lock:
            if not self.terminated and participant_id == self.client_id:
                await self.terminate_locked("timeout", "system")

    mp.setattr(Session, "expire", expire)


@kill("notes-7/welcome-received")
def _no_received(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        def welcome(self: Attacher, record: Any, resumed: bool) -> Any:
            frame = orig(self, record, resumed)
            payload = msgspec.structs.replace(frame.payload, received=None)
            return msgspec.structs.replace(frame, payload=payload)

        return welcome

    _wrap(mp, Attacher, "_welcome", make)


@kill("notes-15.4/no-own-presence")
def _own_presence(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        async def append_master(self: Session, frames: Any, **kwargs: Any) -> bool:
            kwargs.pop("exclude", None)
            return await orig(self, frames, **kwargs)  # type: ignore[no-any-return]

        return append_master

    _wrap(mp, Session, "append_master", make)


@kill("notes-5/reattach-by-participant-id")
def _no_socket_cursor(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(relay.session.Participant, "_sent", lambda self, seq: None)


@kill("notes-7/ack-cursor")
def _ignore_acks(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(relay.session.Participant, "ack", lambda self, last_seq: None)


@kill("notes-15.6/new-client-replaces-detached")
def _detached_client_blocks(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        async def attach(self: Session, sink: Any, hello: Any, principal: Any) -> Any:
            p = hello.payload
            if p.role == "client" and self.client_id and p.participant_id != self.client_id:
                raise ClientAttached("another client is attached")
            return await orig(self, sink, hello, principal)

        return attach

    _wrap(mp, Session, "attach", make)


# --- the HTTP API other cases rely on (notes §10): the runner's features ----------------------


@kill("notes-10/session-state-over-http")
def _detached_shown_attached(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        async def describe(*args: Any, **kwargs: Any) -> Any:
            out = await orig(*args, **kwargs)
            for participant in out.participants:
                participant.state = "attached"
            return out

        return describe

    _wrap(mp, relay.http.sessions, "describe", make)


@kill("notes-10/session-tokens-over-http")
def _tokens_route_404(mp: pytest.MonkeyPatch) -> None:
    SWITCHES["session-tokens"](mp)


@kill("notes-10/rename-over-http")
def _rename_route_405(mp: pytest.MonkeyPatch) -> None:
    SWITCHES["rename-over-http"](mp)


# --- producer acks, withdrawn questions (notes §16.3, §16.4) ----------------------------------


@kill("notes-16.3/ack-committed")
def _ack_one_seq_late(mp: pytest.MonkeyPatch) -> None:
    def ack_payload(*, last_seq: int, last_message_id: str) -> AckPayload:
        return AckPayload(last_seq=last_seq + 1, last_message_id=last_message_id)

    mp.setattr(relay.session.builders, "AckPayload", ack_payload)


@kill("notes-16.3/ack-sender-only")
def _ack_everyone(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        def send_ack(self: Participant, entry: LogEntry) -> None:
            for participant in list(self.session.participants.values()):
                orig(participant, entry)

        return send_ack

    _wrap(mp, Participant, "send_ack", make)


@kill("notes-16.3/ack-increasing")
def _ack_twice(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        def send_ack(self: Participant, entry: LogEntry) -> None:
            orig(self, entry)
            orig(self, entry)

        return send_ack

    _wrap(mp, Participant, "send_ack", make)


@kill("notes-16.3/refusal-ref-message-id")
def _refusals_unnamed(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        def send_error(self: Participant, error: Any, **kwargs: Any) -> None:
            kwargs.pop("ref_message_id", None)
            orig(self, error, **kwargs)

        return send_error

    _wrap(mp, Participant, "send_error", make)


@kill("notes-16.3/warning-no-ref-message-id")
def _warning_named(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        def send_error(self: Participant, error: Any, **kwargs: Any) -> None:
            if isinstance(error, UsageMissing):
                kwargs["ref_message_id"] = str(uuid.uuid4())
            orig(self, error, **kwargs)

        return send_error

    _wrap(mp, Participant, "send_error", make)


@kill("notes-16.4/cancel-leaves-requires-action")
def _cancel_withdraws_all(mp: pytest.MonkeyPatch) -> None:
    cancel = protocol.state.TABLE[Phase.TURN_OPEN, "agent.interaction.cancel"]

    def apply(state: Any, frame: Any, role: Any) -> None:
        state.pending_interactions.clear()

    _rule(mp, "agent.interaction.cancel", Rule(cancel.check, apply))


@kill("notes-16.4/cancelled-then-refused")
def _answer_withdrawn(mp: pytest.MonkeyPatch) -> None:
    def check(state: Any, frame: Any, role: Any) -> None:
        if frame.payload.interaction_id not in state.interaction_ids:  # withdrawn ones pass
            raise protocol.errors.InteractionStateError("never requested")

    def apply(state: Any, frame: Any, role: Any) -> None:
        state.pending_interactions.pop(frame.payload.interaction_id, None)

    _rule(mp, "control.interaction.response", Rule(check, apply))


@kill("notes-16.4/cancel-from-edge")
def _edges_cancel(mp: pytest.MonkeyPatch) -> None:
    may_send = protocol.state._MAY_SEND
    mp.setitem(may_send, "edge", may_send["edge"] | {"agent.interaction.cancel"})


# --- who may end a session, names, credentials, the HTTP port (notes §10, §11, §16.6–9) -------


@kill("notes-16.6/edge-fatal-error-not-allowed")
def _edge_fatal_any(mp: pytest.MonkeyPatch) -> None:
    mp.setitem(protocol.acts.TABLE, ("end_with_fatal_error", "edge"), protocol.acts.Need.ANY)


@kill("notes-16.6/delete-request-not-allowed")
def _edge_delete_any(mp: pytest.MonkeyPatch) -> None:
    mp.setitem(protocol.acts.TABLE, ("request_deletion", "edge"), protocol.acts.Need.ANY)


class _LaxGeneric(msgspec.Struct, kw_only=True):
    """GenericFrame's fields without the name grammar."""

    type: str
    message_id: str
    session_id: str
    timestamp: str
    payload: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"{}"))
    seq: int | None = None
    sender: Sender | None = None
    metadata: Metadata | None = None


@kill("notes-16.7/type-grammar")
def _any_ignorable_type(mp: pytest.MonkeyPatch) -> None:
    lax = msgspec.json.Decoder(_LaxGeneric)

    class Decoder:
        def decode(self, data: bytes | str) -> GenericFrame:
            got = lax.decode(data)
            return GenericFrame(**{f: getattr(got, f) for f in _LaxGeneric.__struct_fields__})

    mp.setattr(protocol.codec, "_generic_decoder", Decoder())


@kill("notes-16.7/session-id-grammar")
def _any_session_id(mp: pytest.MonkeyPatch) -> None:
    # An ungrammatical id read as an unknown session (4404) instead of a malformed hello.
    def malformed(message: str) -> protocol.errors.HandshakeError:
        if "session_id" in message:
            return protocol.errors.NoSuchSession(message)
        return protocol.errors.MalformedHello(message)

    mp.setattr(relay.ws, "MalformedHello", malformed)


@kill("notes-11/other-workspace-absent")
def _other_workspace_4403(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        async def attach(self: Any, connection: Any, hello: Any, principal: Any) -> Any:
            try:
                return await orig(self, connection, hello, principal)
            except protocol.errors.NoSuchSession:
                if await self.store.get_session(hello.session_id) is not None:
                    raise protocol.errors.Forbidden("another workspace's session") from None
                raise

        return attach

    _wrap(mp, relay.hub.Hub, "attach", make)


@kill("notes-16.9/revoked-token-closes-4401")
def _revoked_1008(mp: pytest.MonkeyPatch) -> None:
    # Both ways a revocation ends a socket: the route at once, the watch at its next round.
    mp.setattr(relay.http.revoking, "_REVOKED", 1008)
    mp.setattr(relay.revocation, "CLOSE_INVALID_CREDENTIAL", 1008)


@kill("notes-10/malformed-requests-problem-json")
def _parser_text_plain(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(
        relay.http.hardening.ProblemRequestHandler,
        "handle_error",
        aiohttp.web_protocol.RequestHandler.handle_error,
    )


@kill("notes-10/server-header-no-version")
def _server_version(mp: pytest.MonkeyPatch) -> None:
    async def keep_banner(request: Any, response: Any) -> None:
        return None

    mp.setattr(relay.http.app, "hide_server_version", keep_banner)


# --- archived sessions (notes §16.1) ----------------------------------------------------------


@kill("notes-16.1/archived-readable")
def _archived_4404(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        async def attach(self: Any, connection: Any, hello: Any, principal: Any) -> Any:
            try:
                return await orig(self, connection, hello, principal)
            except protocol.errors.SessionGone:
                header = await self.store.get_session(hello.session_id)
                if header is not None and header.archived:
                    raise protocol.errors.NoSuchSession("no such session") from None
                raise

        return attach

    _wrap(mp, relay.hub.Hub, "attach", make)


@kill("notes-16.1/archived-delete-purges")
def _archived_undeletable(mp: pytest.MonkeyPatch) -> None:
    def make(orig: Any) -> Any:
        async def delete_session(request: Any) -> Any:
            hub = request.app[relay.http.app.HUB]
            header = await hub.store.get_session(request.match_info["session_id"])
            if header is not None and header.archived:
                return relay.http.app.problem(404, "no such session", code="not_found")
            return await orig(request)

        return delete_session

    _wrap(mp, relay.http.app, "delete_session", make)


# --- one run at a time (notes §17.3) ----------------------------------------------------------


@kill("notes-17.3/busy-after-hold")
def _never_busy(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(relay.session.runs.RunGate, "busy", lambda self: False)


@kill("notes-17.3/held-until-turn-ends")
def _refuse_held(mp: pytest.MonkeyPatch) -> None:
    async def commit_held(self: CommitPipeline, participant: Any, item: Any) -> None:
        participant.send_error(relay.session.runs.busy_error(), ref_message_id=item[0].message_id)

    mp.setattr(CommitPipeline, "_commit_held", commit_held)


@kill("notes-17.3/first-edge-wins")
def _no_about_to_start(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(
        relay.session.runs.RunGate,
        "busy",
        lambda self: self.core.state.phase is Phase.TURN_OPEN,
    )


@kill("notes-17.3/steering-client-gets-all")
def _no_steering(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(relay.session.runs.RunGate, "steering", lambda self: False)


@kill("notes-17.3/held-cut-once")
def _held_outlives_its_connection(mp: pytest.MonkeyPatch) -> None:
    """A held message stays held when its connection is cut (and is judged as if its sender
    were attached), and a re-send of it is not recognised. Our master guards twice (the held
    message goes with its connection, and a re-sent id is deduplicated), so the smallest
    change that breaks the rule touches both."""

    async def release(self: Any, participant: Any, commit: Any) -> None:
        held = participant.held
        try:
            while held and not self.core.terminated:
                deadline = held[0][2]
                await self.wait_free(deadline)
                if self.busy() and time.monotonic() < deadline:
                    continue
                await commit(participant, held.popleft())
        finally:
            participant.releaser = None

    async def commit_held(self: CommitPipeline, participant: Any, item: Any) -> None:
        async with self.core.lock:
            if self.core.terminated:
                return
            participant.releasing = item
            cut, participant.fenced = participant.fenced, False  # judged as if still attached
            try:
                await self.commit_now([(participant, item[0], item[1])])
            finally:
                participant.releasing = None
                participant.fenced = cut

    mp.setattr(relay.session.runs.RunGate, "_release", release)
    mp.setattr(CommitPipeline, "_commit_held", commit_held)
    _forget_message_ids(mp)
