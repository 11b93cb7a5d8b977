"""The reference model of a generated session: what a master must do for each step.

The session's rules are the sans-I/O core's, not a second copy: a frame is decoded by
``protocol.codec`` (``invalid_frame`` / ``unknown_type``), judged and folded by
``protocol.finalize.fold`` over ``protocol.state``'s table (the refusal's code is the error's),
its effect read from the table (``protocol.state.effect_of``: a rename goes back to its
sender, a participant's ``session.deleted`` or fatal ``session.error`` ends the session), a
client's drop finalized by ``protocol.finalize.finalize`` and a backlog bounded by
``protocol.buffers.select_backlog``.

What the master adds around those rules — who receives an entry, what a backlog holds, the
order of the cleanup that ends a session, how hellos are answered — is restated here, once
(docs/protocol.md §5, §7, §9; rawp-notes §5, §7, §8):

* an accepted frame is logged and delivered to every attached participant but its sender
  (a ``session.renamed`` also to its sender); a refused one is answered
  ``session.error {fatal: false}`` to its sender only; a warning (``usage_missing``) goes to
  the sender before the frame is delivered;
* after what the session folded — an accepted frame, a drop's finalization — a
  ``session.status {status, stop_reason}`` is logged when the derived status changed
  (``protocol.state.status_frame_due`` and ``stated_status``, notes §17.4), delivered to
  everyone attached;
* one run at a time (notes §17.3): an edge's ``user.message`` while a turn is open is held,
  then refused ``busy`` (``ref_message_id``, not logged); one while a run is about to start
  (a message relayed, no turn started) is held until that run's bound ends, then relayed.
  The driver waits :data:`HOLD_S` longer for either;
* a participant's backlog is every entry after its cursor that live delivery would have sent
  it, bounded by its buffer (the hello's request, else its previous one, else RING at the
  master's capacity); the cursor of a participant that dropped is the log's end at the drop;
* a session ends with a cancelled result per open call, the open turn ended ``error``,
  ``session.status terminated`` (with how the last run ended), then ``session.deleted``,
  delivered to everyone attached, each socket then closed 1000; hellos for it are refused
  4410;
* a second client while one is attached is refused 4409; a hello with an attached
  participant's id takes over (the old socket closed 4409, no finalization).

Presence is left out: every generated participant declines it (``presence: false``) and the
driver ignores presence frames. A backlog needs the size of each entry as delivered: the
driver reports it (:meth:`Model.observed`) from the observer, an edge that receives every entry.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from protocol import codec
from protocol.buffers import BufferedItem, select_backlog
from protocol.errors import ProtocolError
from protocol.finalize import finalize, fold
from protocol.frames import GenericFrame, Policy, Sender
from protocol.state import (
    Effect,
    Phase,
    SessionState,
    effect_of,
    stated_status,
    status,
    status_frame_due,
)

from .steps import OBSERVER, Step

__all__ = [
    "CLIENT",
    "HOLD_S",
    "Backlog",
    "Entry",
    "Expected",
    "Hello",
    "Member",
    "Model",
    "Outcome",
    "Refusal",
]

CLIENT: Final = "client"
HOLD_S: Final = 3.0
"""How long a master holds a ``user.message`` for the agent's run (notes §17.3)."""
_MASTER: Final = Sender(role="master", participant_id="master")


@dataclass(frozen=True)
class Expected:
    """One frame a participant must receive.

    ``message_id`` is the sender's for a relayed frame (None for one the master makes);
    ``payload`` is compared key by key, or as a whole when ``exact`` (a relayed frame travels
    untouched, unknown keys included). ``entry`` is its index in the log (None: not logged).
    """

    type: str
    payload: dict[str, Any]
    role: str
    entry: int | None = None
    message_id: str | None = None
    exact: bool = False
    synthetic: bool = False
    absent: tuple[str, ...] = ()
    """Payload keys that must not be there."""
    keys: tuple[tuple[str, Any], ...] = ()
    """Envelope keys the sender added beyond the envelope's own, relayed untouched (notes §3)."""
    held: float = 0.0
    """Seconds the master may hold it before sending it (a message waiting for the agent)."""

    def describe(self) -> str:
        """``type(key=value, …)`` with what identifies it."""
        keys = (
            "error_code",
            "block_id",
            "call_id",
            "status",
            "turn_id",
            "stop_reason",
            "state",
            "interaction_id",
            "name",
            "reason",
            "deleted_by",
        )
        bits = [f"{k}={self.payload[k]}" for k in keys if k in self.payload]
        if self.synthetic:
            bits.append("synthetic")
        bits.append(f"from {self.role}")
        return f"{self.type}({', '.join(bits)})"

    def mismatch(self, frame: dict[str, Any]) -> str | None:
        """Why ``frame`` is not this frame, or None when it is."""
        got_type = frame.get("type")
        if got_type != self.type:
            return f"type {got_type!r}"
        if self.message_id is not None and frame.get("message_id") != self.message_id:
            return f"message_id {frame.get('message_id')!r}, not the sender's {self.message_id!r}"
        sender = frame.get("sender")
        role = sender.get("role") if isinstance(sender, dict) else None
        if role != self.role:
            return f"sender.role {role!r}"
        metadata = frame.get("metadata")
        synthetic = isinstance(metadata, dict) and metadata.get("synthetic") is True
        if synthetic != self.synthetic:
            return "metadata.synthetic " + ("set" if synthetic else "missing")
        for key, value in self.keys:
            if frame.get(key) != value:
                return f"envelope key {key} = {frame.get(key)!r}, expected {value!r} (relayed)"
        payload = frame.get("payload")
        if not isinstance(payload, dict):
            return "no payload object"
        if self.exact:
            if payload != self.payload:
                return f"payload {json.dumps(payload, sort_keys=True)} (changed on the way)"
            return None
        for key, value in self.payload.items():
            if payload.get(key) != value:
                return f"payload.{key} = {payload.get(key)!r}, expected {value!r}"
        for key in self.absent:
            if key in payload:
                return f"payload.{key} = {payload[key]!r}, expected none"
        return None


@dataclass
class Entry:
    """One entry of the session's log, as the model expects it."""

    expected: Expected
    sender: str
    """The member ident that sent it, or ``master``."""
    echo: bool = False
    """Delivered to its sender too (``session.renamed``)."""
    size: int | None = None
    """Bytes of the envelope as delivered (reported by the driver from the observer)."""


@dataclass
class Member:
    """A participant the master knows."""

    name: str
    role: str
    ident: str
    policy: Policy
    capacity: int
    attached: bool = True
    cursor: int = 0
    last_sent: str | None = None


@dataclass(frozen=True)
class Backlog:
    """The ``session.history`` that must follow a welcome."""

    frames: tuple[Expected, ...]
    buffer_status: dict[str, Any]


@dataclass(frozen=True)
class Hello:
    """What a hello must be answered with: a welcome (and maybe a backlog), or a close."""

    member: str
    role: str
    refused: int | None = None
    resumed: bool = False
    status: str = "idle"
    name: str = ""
    participant: str | None = None
    """The member whose participant id the hello names (None: a new participant)."""
    backlog: Backlog | None = None
    received_last: str | None = None
    superseded: bool = False
    """The member's current socket is taken over: closed 4409 before the welcome."""


@dataclass(frozen=True)
class Refusal:
    """Why the model cannot judge a step (sizes it was not told): never a verdict."""

    reason: str


@dataclass
class Outcome:
    """What one step must produce."""

    deliveries: dict[str, list[Expected]] = field(default_factory=dict)
    closes: dict[str, int] = field(default_factory=dict)
    hello: Hello | None = None
    delete_status: int | None = None


class Model:
    """The session as the master must keep it, step by step."""

    def __init__(self, session_id: str, *, capacity: int, name: str, sizes: bool = True) -> None:
        self.session_id = session_id
        self.capacity = capacity
        self.state = SessionState()
        self.state.name = name
        self.log: list[Entry] = []
        self.members: dict[str, Member] = {}
        self.ended = False
        self.sizes = sizes
        self._idents = 0
        self._join(CLIENT, CLIENT)
        self._join(OBSERVER, "edge")

    # --- helpers -------------------------------------------------------------------------

    def _join(self, name: str, role: str) -> Member:
        self._idents += 1
        member = Member(
            name=name,
            role=role,
            ident=f"{name}#{self._idents}",
            policy="RING",
            capacity=self.capacity,
            cursor=len(self.log),
        )
        self.members[name] = member
        return member

    def attached(self) -> list[Member]:
        """Attached members, in the order they joined."""
        return [m for m in self.members.values() if m.attached]

    def observed(self, entry: int, size: int) -> None:
        """The driver saw ``entry`` delivered as ``size`` bytes."""
        self.log[entry].size = size

    def _log(self, outcome: Outcome, expected: Expected, sender: str, *, echo: bool) -> None:
        index = len(self.log)
        logged = Expected(
            type=expected.type,
            payload=expected.payload,
            role=expected.role,
            entry=index,
            message_id=expected.message_id,
            exact=expected.exact,
            synthetic=expected.synthetic,
            absent=expected.absent,
            keys=expected.keys,
            held=expected.held,
        )
        self.log.append(Entry(logged, sender, echo=echo))
        for member in self.attached():
            if member.ident != sender or echo:
                outcome.deliveries.setdefault(member.name, []).append(logged)

    def _status(self, outcome: Outcome) -> None:
        """After what the session folded: a ``session.status`` when the derived status
        changed (notes §17.4), logged and delivered to everyone attached."""
        if not status_frame_due(self.state) or self.state.phase is Phase.TERMINATED:
            return
        now, stop = stated_status(self.state)
        payload: dict[str, Any] = {"status": now}
        absent: tuple[str, ...] = ()
        if stop is None:
            absent = ("stop_reason",)
        else:
            payload["stop_reason"] = stop
        self.state.logged_status = now  # what folding the master's frame does
        expected = Expected("session.status", payload, "master", absent=absent)
        self._log(outcome, expected, "master", echo=False)

    def _busy(self) -> bool:
        """An edge's ``user.message`` must wait for the agent (notes §17.3): a turn is open.
        A run about to start (a message relayed, no turn started yet) holds a message at most
        until its own bound ends, then the message is judged: relayed, as if not held. No
        generated client steers (``accepts_input_during_turn``)."""
        return self.state.phase is Phase.TURN_OPEN

    def _error(
        self,
        outcome: Outcome,
        member: Member,
        code: str,
        refused: str | None = None,
        held: float = 0.0,
    ) -> None:
        """A refusal names its frame (``ref_message_id``, notes §16.3); a warning about a frame
        that was accepted names none."""
        payload: dict[str, Any] = {"error_code": code, "fatal": False}
        if refused is not None:
            payload["ref_message_id"] = refused
        absent = () if refused is not None else ("ref_message_id",)
        expected = Expected("session.error", payload, role="master", absent=absent, held=held)
        outcome.deliveries.setdefault(member.name, []).append(expected)

    def _backlog(self, member: Member, start: int) -> Backlog | Refusal:
        entries = [
            e
            for e in self.log[start:]
            if e.sender != member.ident or e.echo  # what live delivery would have sent it
        ]
        if not self.sizes:
            return Backlog((), {})
        unknown = [e for e in entries if e.size is None]
        if unknown:
            return Refusal(f"the size of {unknown[0].expected.describe()} was never observed")
        items = [BufferedItem(b"\0" * (e.size or 0), e.expected) for e in entries]
        chosen = select_backlog(items, member.policy, member.capacity)
        status_ = msgspec.to_builtins(chosen.status)
        return Backlog(tuple(i.value for i in chosen.items), status_)

    def _grant(self, member: Member, step: Step) -> None:
        if step.policy is not None:
            member.policy = step.policy
            member.capacity = min(step.capacity or 0, self.capacity)

    def _end(self, outcome: Outcome, reason: str, deleted_by: str) -> None:
        """§7.5.3 / §7.7: cleanup, ``session.deleted``, close 1000 for everyone attached."""
        for call in list(self.state.open_calls):
            payload = {"call_id": call, "status": "cancelled"}
            self._log(
                outcome, Expected("tool.invoke.result", payload, "master"), "master", echo=False
            )
        stop = self.state.stop_reason
        if self.state.turn_id is not None:
            stop = "error"
            payload = {"turn_id": self.state.turn_id, "stop_reason": "error"}
            self._log(
                outcome, Expected("session.turn.end", payload, "master"), "master", echo=False
            )
        ended: dict[str, Any] = {"status": "terminated"}
        if stop is not None:
            ended["stop_reason"] = stop
        absent = () if stop is not None else ("stop_reason",)
        self._log(
            outcome,
            Expected("session.status", ended, "master", absent=absent),
            "master",
            echo=False,
        )
        deleted = {"session_id": self.session_id, "reason": reason, "deleted_by": deleted_by}
        self._log(outcome, Expected("session.deleted", deleted, "master"), "master", echo=False)
        for member in self.attached():
            outcome.closes[member.name] = 1000
            member.attached = False
        self.ended = True

    # --- steps ---------------------------------------------------------------------------

    def apply(self, step: Step) -> Outcome | Refusal | None:
        """What ``step`` must produce; None when it does not apply (its actor is absent)."""
        handler = {
            "send": self._send,
            "drop": self._drop,
            "rehello": self._rehello,
            "join": self._new_edge,
            "second_client": self._second_client,
            "delete": self._delete,
        }[step.kind]
        return handler(step)

    def _send(self, step: Step) -> Outcome | Refusal | None:
        member = self.members.get(step.actor)
        if member is None or not member.attached or self.ended:
            return None
        outcome = Outcome()
        text = step.text(self.session_id)
        role: Any = member.role
        try:
            frame = codec.decode(text)
            if frame.type == "user.message" and role == "edge" and self._busy():
                # One run at a time (notes §17.3): held while the turn stays open, then
                # refused, not logged.
                self._error(outcome, member, "busy", refused=step.message_id, held=HOLD_S)
                return outcome
            # A run about to start holds the message until its own bound ends (notes §17.12).
            held = HOLD_S if frame.type == "user.message" and self.state.run_requested else 0.0
            ending = frame.type == "session.deleted"
            before = copy.deepcopy(self.state) if ending else self.state
            warnings = fold(self.state, frame, role)
        except ProtocolError as exc:
            self._error(outcome, member, exc.code, refused=step.message_id)
            return outcome
        effect = effect_of(frame, role)
        for warning in warnings:
            self._error(outcome, member, warning.code)
        member.last_sent = frame.message_id
        if effect is Effect.END_REQUESTED:
            # A participant's session.deleted is a request, not logged itself (§9).
            self.state = before
            self._end(outcome, "user_request", member.role)
            return outcome
        raw = json.loads(text)
        relayed = Expected(
            type=frame.type if not isinstance(frame, GenericFrame) else str(raw["type"]),
            payload=raw.get("payload", {}),
            role=member.role,
            message_id=frame.message_id,
            exact=True,
            keys=tuple((k, v) for k, v in raw.items() if k.startswith("x_")),
            held=held if role == "edge" else 0.0,
        )
        self._log(outcome, relayed, member.ident, echo=effect is Effect.RENAME)
        # Judged by its own fold: a fatal error that follows a turn end in place of the usage
        # moves the status on (idle) before the session ends.
        self._status(outcome)
        if effect is Effect.END_WITH_ERROR:
            self._end(outcome, "error", member.role)
        return outcome

    def _drop(self, step: Step) -> Outcome | None:
        member = self.members.get(step.actor)
        if member is None or not member.attached or self.ended or member.name == OBSERVER:
            return None
        outcome = Outcome()
        member.attached = False
        member.cursor = len(self.log)
        if member.role == CLIENT:
            for frame in finalize(self.state, session_id=self.session_id, sender=_MASTER):
                fold(self.state, msgspec.structs.replace(frame, seq=len(self.log) + 1), "master")
                payload = msgspec.to_builtins(frame.payload)  # type: ignore[attr-defined]
                expected = Expected(frame.type, payload, "master", synthetic=True)
                self._log(outcome, expected, "master", echo=False)
            self._status(outcome)
        return outcome

    def _welcome(self, member: Member, **fields: Any) -> Hello:
        return Hello(
            member=member.name,
            role=member.role,
            status=status(self.state),
            name=self.state.name,
            **fields,
        )

    def _rehello(self, step: Step) -> Outcome | Refusal | None:
        member = self.members.get(step.actor)
        if member is None:
            return None
        if self.ended:
            hello = Hello(
                member=member.name, role=member.role, refused=4410, participant=member.name
            )
            return Outcome(hello=hello)
        superseded = member.attached
        if superseded:
            member.cursor = len(self.log)  # everything was written to the old socket
        self._grant(member, step)
        backlog = self._backlog(member, member.cursor)
        if isinstance(backlog, Refusal):
            return backlog
        member.attached = True
        hello = self._welcome(
            member,
            resumed=True,
            participant=member.name,
            backlog=backlog,
            received_last=member.last_sent,
            superseded=superseded,
        )
        return Outcome(hello=hello)

    def _new_edge(self, step: Step) -> Outcome | Refusal | None:
        if step.actor in self.members:
            return None
        if self.ended:
            return Outcome(hello=Hello(member=step.actor, role="edge", refused=4410))
        member = self._join(step.actor, "edge")
        member.cursor = 0
        self._grant(member, step)
        backlog = self._backlog(member, 0) if step.resume else None
        if isinstance(backlog, Refusal):
            return backlog
        member.cursor = len(self.log)
        hello = self._welcome(member, backlog=backlog)
        return Outcome(hello=hello)

    def _second_client(self, step: Step) -> Outcome | None:
        if self.ended:
            return Outcome(hello=Hello(member=CLIENT, role=CLIENT, refused=4410))
        current = self.members[CLIENT]
        if current.attached:
            return Outcome(hello=Hello(member=CLIENT, role=CLIENT, refused=4409))
        # The detached client is replaced: the new participant is the session's client.
        member = self._join(CLIENT, CLIENT)
        return Outcome(hello=self._welcome(member))

    def _delete(self, step: Step) -> Outcome | None:
        if self.ended:
            return None
        outcome = Outcome(delete_status=200)
        self._end(outcome, "master_request", "master")
        return outcome
