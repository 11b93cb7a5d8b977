"""Draw random sessions from the state machine, deterministically by seed.

The generator walks the reference model (:mod:`.model`): at each step it looks at the session's
state (phase, open blocks, open calls, pending interactions, who is attached) and picks an
action — mostly frames the state machine accepts there, about one in five that it refuses
(each kind of refusal of rawp-notes §6: ``direction``, ``turn_state``, ``block_state``,
``tool_pairing``, ``interaction_state``, ``invalid_frame``, ``unknown_type``), and drops,
reattaches with each buffer policy, takeovers, new edges (with and without a backlog), a
second client, renames, deletions. Everything random comes from one ``random.Random`` seeded
by ``(seed, index)``: ids, names and timestamps included, so a seed is a reproduction.

``user.message`` is sent only while no turn is open, and once per completed turn, so no
session depends on what a master does with a message that arrives while the agent may still be
answering another.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable
from typing import Any, Final

from protocol.frames import Policy

from .model import CLIENT, Model
from .steps import OBSERVER, SESSION_PLACEHOLDER, Step

__all__ = ["MAX_STEPS", "generate"]

MAX_STEPS: Final = 24
_TIME: Final = "2026-01-01T00:00:00.000Z"
_POLICIES: Final[tuple[Policy, ...]] = ("RING", "DROP", "NONE")
# Small capacities keep part of a backlog (RING and DROP then differ); 0 keeps nothing.
_CAPACITIES: Final = (0, 300, 700, 1500, 4000, 1 << 20)
_MAX_EDGES: Final = 4
_NAME: Final = "generated"


def generate(seed: int, index: int) -> list[Step]:
    """Session ``index`` of the run seeded ``seed``: the same steps on every call."""
    return _Generator(random.Random(f"rawp-generated:{seed}:{index}")).session()


Choice = Callable[[], Step | None]


class _Generator:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.model = Model(SESSION_PLACEHOLDER, capacity=1 << 20, name=_NAME, sizes=False)
        self.blocks = 0
        self.names = 0
        self.message_turns = -1
        """``turns_completed`` when the last user.message was drawn."""

    # --- ids -----------------------------------------------------------------------------

    def uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def block(self, prefix: str) -> str:
        self.blocks += 1
        return f"{prefix}{self.blocks}"

    def frame(self, type_: str, payload: dict[str, Any], **extra: Any) -> str:
        envelope: dict[str, Any] = {
            "type": type_,
            "message_id": self.uuid(),
            "session_id": SESSION_PLACEHOLDER,
            "timestamp": _TIME,
            "payload": payload,
        }
        envelope.update(extra)
        return json.dumps(envelope, separators=(",", ":"))

    def send(
        self, actor: str, type_: str, payload: dict[str, Any], note: str, **extra: Any
    ) -> Step:
        roll = self.rng.random()
        if roll < 0.08:  # an unknown envelope key travels untouched (notes §3)
            extra["x_trace"] = f"t-{self.rng.randint(0, 999)}"
        elif roll < 0.12:  # a stamp the sender made up: the master stamps its own (notes §3)
            extra["sender"] = {"role": "master", "participant_id": "made-up"}
            extra["seq"] = 99999
            note += ", with a forged sender and seq"
        return Step("send", actor, self.frame(type_, payload, **extra), note=note)

    # --- the session ---------------------------------------------------------------------

    def session(self) -> list[Step]:
        steps: list[Step] = []
        for _ in range(self.rng.randint(3, MAX_STEPS)):
            step = self.next_step()
            if step is None:
                continue
            self.model.apply(step)
            steps.append(step)
            if self.model.ended:
                if self.rng.random() < 0.5:  # a hello for the ended session: 4410
                    steps.append(Step("join", "late-edge", note="after the end: 4410"))
                break
        return steps

    def next_step(self) -> Step | None:
        m = self.model
        client = m.members[CLIENT]
        edges = [x for x in m.members.values() if x.role == "edge" and x.name != OBSERVER]
        options: list[tuple[float, Choice]] = []
        if client.attached:
            options.append((10.0, self.client_frame))
            options.append((0.6, lambda: Step("drop", CLIENT)))
            options.append((0.4, lambda: self.rehello(CLIENT, "takeover")))
        else:
            options.append((3.0, lambda: self.rehello(CLIENT, "reattach")))
            options.append((0.3, lambda: Step("second_client", CLIENT, note="replaces the client")))
        if client.attached:
            options.append((0.2, lambda: Step("second_client", CLIENT, note="client attached")))
        attached_edges = [e for e in edges if e.attached]
        detached_edges = [e for e in edges if not e.attached]
        if attached_edges:
            options.append((3.0, lambda: self.edge_frame(self.rng.choice(attached_edges).name)))
            options.append((0.6, lambda: Step("drop", self.rng.choice(attached_edges).name)))
            options.append(
                (0.3, lambda: self.rehello(self.rng.choice(attached_edges).name, "takeover"))
            )
        if detached_edges:
            options.append(
                (1.5, lambda: self.rehello(self.rng.choice(detached_edges).name, "reattach"))
            )
        if len(edges) < _MAX_EDGES:
            options.append((1.0, lambda: self.join(f"edge{len(edges) + 1}")))
        options.append((0.15, lambda: Step("delete", note="operator deletes")))
        weights = [w for w, _ in options]
        (choice,) = self.rng.choices([c for _, c in options], weights=weights)
        return choice()

    def buffer(self) -> tuple[Policy | None, int | None]:
        if self.rng.random() < 0.25:
            return None, None
        return self.rng.choice(_POLICIES), self.rng.choice(_CAPACITIES)

    def rehello(self, actor: str, note: str) -> Step:
        policy, capacity = self.buffer()
        return Step("rehello", actor, policy=policy, capacity=capacity, note=note)

    def join(self, actor: str) -> Step:
        policy, capacity = self.buffer()
        resume = self.rng.random() < 0.7
        return Step("join", actor, policy=policy, capacity=capacity, resume=resume)

    # --- frames --------------------------------------------------------------------------

    def client_frame(self) -> Step:
        if self.rng.random() < 0.2:
            return self.client_invalid()
        s = self.model.state
        c = CLIENT
        options: list[tuple[float, Choice]] = []
        if s.turn_id is None:
            start = {"turn_id": self.uuid(), "turn_index": s.last_turn_index + 1}
            options.append((4.0, lambda: self.send(c, "session.turn.start", start, "valid")))
        elif not s.open_calls:
            end = {"turn_id": s.turn_id, "stop_reason": self.rng.choice(["end_turn", "max_tokens"])}
            options.append((3.0, lambda: self.send(c, "session.turn.end", end, "valid")))
        options.append((2.0, lambda: self.send(c, "session.usage", _usage(), "valid")))
        open_text = sorted(s.open_text)
        options.append((3.0, lambda: self.delta("text", open_text)))
        if open_text:
            block = self.rng.choice(open_text)
            done = {"block_id": block, "text": "done"}
            options.append((2.0, lambda: self.send(c, "agent.text.done", done, "valid")))
        open_thinking = sorted(s.open_thinking)
        options.append((1.0, lambda: self.delta("thinking", open_thinking)))
        if open_thinking:
            th = {"block_id": self.rng.choice(open_thinking), "text": "done"}
            options.append((1.0, lambda: self.send(c, "agent.thinking.done", th, "valid")))
        request = {"call_id": self.uuid(), "tool_name": "probe", "input": {"n": 1}}
        options.append((2.0, lambda: self.send(c, "tool.invoke.request", request, "valid")))
        if s.open_calls:
            call = self.rng.choice(sorted(s.open_calls))
            result = {"call_id": call, "status": self.rng.choice(["ok", "error"]), "output": "r"}
            options.append((3.0, lambda: self.send(c, "tool.invoke.result", result, "valid")))
        ask = {"interaction_id": self.uuid(), "kind": "confirmation", "prompt": "Proceed?"}
        options.append((1.0, lambda: self.send(c, "agent.interaction.request", ask, "valid")))
        if s.pending_interactions:
            pending = self.rng.choice(sorted(s.pending_interactions))
            cancel = {"interaction_id": pending, "reason": "changed my mind"}
            options.append((1.0, lambda: self.send(c, "agent.interaction.cancel", cancel, "valid")))
        state = {"state": self.rng.choice(["thinking", "responding", "idle", "tool_calling"])}
        options.append((1.0, lambda: self.send(c, "agent.state", state, "valid")))
        compacted = {
            "summary": "shorter",
            "previous_token_count": 900,
            "current_token_count": 300,
            "trigger": "auto",
        }
        options.append((0.5, lambda: self.send(c, "session.compacted", compacted, "valid")))
        options.append((0.7, lambda: self.rename(c, "client", "valid")))
        note = {"error_code": "agent_warning", "message": "slow tool", "fatal": False}
        options.append((0.3, lambda: self.send(c, "session.error", note, "non-fatal error")))
        options.append(
            (
                0.4,
                lambda: self.send(
                    c,
                    "x.generated.note",
                    {"n": self.rng.randint(0, 9)},
                    "ignorable unknown type",
                    metadata={"ignorable": True},
                    extra_key="kept",
                ),
            )
        )
        deleted = {
            "session_id": SESSION_PLACEHOLDER,
            "reason": "user_request",
            "deleted_by": "client",
        }
        options.append((0.1, lambda: self.send(c, "session.deleted", deleted, "client ends it")))
        fatal = {"error_code": "agent_crashed", "message": "gone", "fatal": True}
        options.append((0.05, lambda: self.send(c, "session.error", fatal, "fatal error")))
        (choice,) = self.rng.choices([x for _, x in options], weights=[w for w, _ in options])
        step = choice()
        assert step is not None
        return step

    def delta(self, kind: str, open_blocks: list[str]) -> Step:
        block = (
            self.rng.choice(open_blocks)
            if open_blocks and self.rng.random() < 0.6
            else self.block("t" if kind == "text" else "h")
        )
        payload = {"block_id": block, "delta": "x" * self.rng.randint(1, 40)}
        return self.send(CLIENT, f"agent.{kind}.delta", payload, "valid")

    def message(self, actor: str, text: dict[str, Any]) -> Step:
        # One message per turn, sent while no turn is open: never a second message while the
        # agent may still be answering the first.
        self.message_turns = self.model.state.turns_completed
        return self.send(actor, "user.message", text, "valid")

    def rename(self, actor: str, by: str, note: str) -> Step:
        self.names += 1
        payload = {
            "session_id": SESSION_PLACEHOLDER,
            "name": f"name {self.names}",
            "renamed_by": by,
        }
        return self.send(actor, "session.renamed", payload, note)

    def client_invalid(self) -> Step:
        s = self.model.state
        c = CLIENT
        options: list[Choice] = [
            lambda: self.send(c, "control.cancel", {}, "direction: a client may not cancel"),
            lambda: self.send(c, "user.message", {"text": "?"}, "direction"),
            lambda: self.send(
                c,
                "session.turn.start",
                {"turn_id": self.uuid(), "turn_index": s.last_turn_index + 2},
                "turn_state: index skipped",
            ),
            lambda: self.send(
                c,
                "session.turn.end",
                {"turn_id": self.uuid(), "stop_reason": "end_turn"},
                "turn_state: no such turn open",
            ),
            lambda: self.send(
                c,
                "tool.invoke.result",
                {"call_id": self.uuid(), "status": "ok", "output": "?"},
                "tool_pairing: no request",
            ),
            lambda: self.send(
                c,
                "agent.interaction.cancel",
                {"interaction_id": self.uuid()},
                "interaction_state: nothing pending",
            ),
            lambda: self.send(
                c,
                "session.compacted",
                {
                    "summary": "grew",
                    "previous_token_count": 10,
                    "current_token_count": 50,
                    "trigger": "auto",
                },
                "invalid_frame: compaction grew",
            ),
            lambda: self.rename(c, "edge", "invalid_frame: renamed_by is not the sender's role"),
            lambda: self.send(c, "agent.text.delta", {"delta": "no block"}, "invalid_frame"),
            lambda: self.send(c, "x.generated.secret", {}, "unknown_type: not ignorable"),
            lambda: self.send(
                c,
                "agent.text.delta",
                {"block_id": self.block("t"), "delta": "x"},
                "invalid_frame: synthetic from a client",
                metadata={"synthetic": True},
            ),
            lambda: self.send(
                c,
                "session.turn.start",
                {"turn_id": "not-a-uuid", "turn_index": s.last_turn_index + 1},
                "invalid_frame: turn id not a UUID",
            ),
        ]
        if s.turn_id is not None:
            options.append(
                lambda: self.send(
                    c,
                    "session.turn.start",
                    {"turn_id": self.uuid(), "turn_index": s.last_turn_index + 1},
                    "turn_state: a turn is open",
                )
            )
            if s.open_calls:
                options.append(
                    lambda: self.send(
                        c,
                        "session.turn.end",
                        {"turn_id": s.turn_id, "stop_reason": "end_turn"},
                        "tool_pairing: calls open",
                    )
                )
        if s.turn_ids:
            options.append(
                lambda: self.send(
                    c,
                    "session.turn.start",
                    {"turn_id": sorted(s.turn_ids)[0], "turn_index": s.last_turn_index + 1},
                    "turn_state: turn id reused",
                )
            )
        if s.closed_blocks:
            block = sorted(s.closed_blocks)[0]
            options.append(
                lambda: self.send(
                    c, "agent.text.delta", {"block_id": block, "delta": "late"}, "block_state"
                )
            )
        if s.open_text:
            block = sorted(s.open_text)[0]
            options.append(
                lambda: self.send(
                    c,
                    "agent.thinking.delta",
                    {"block_id": block, "delta": "?"},
                    "block_state: other kind",
                )
            )
        if s.call_ids - set(s.open_calls):
            call = sorted(s.call_ids - set(s.open_calls))[0]
            options.append(
                lambda: self.send(
                    c,
                    "tool.invoke.result",
                    {"call_id": call, "status": "ok", "output": "again"},
                    "tool_pairing: answered already",
                )
            )
            options.append(
                lambda: self.send(
                    c,
                    "tool.invoke.request",
                    {"call_id": call, "tool_name": "probe", "input": {}},
                    "tool_pairing: call id reused",
                )
            )
        step = self.rng.choice(options)()
        assert step is not None
        return step

    def edge_frame(self, actor: str) -> Step:
        s = self.model.state
        options: list[tuple[float, Choice]] = [
            (1.0, lambda: self.send(actor, "control.cancel", {}, "valid")),
            (0.8, lambda: self.rename(actor, "edge", "valid")),
            (
                0.5,
                lambda: self.send(
                    actor, "agent.text.delta", {"block_id": "e", "delta": "x"}, "direction"
                ),
            ),
            (
                0.3,
                lambda: self.send(
                    actor,
                    "session.turn.start",
                    {"turn_id": self.uuid(), "turn_index": s.last_turn_index + 1},
                    "direction",
                ),
            ),
            (
                0.5,
                lambda: self.send(
                    actor,
                    "control.interaction.response",
                    {"interaction_id": self.uuid(), "response": "yes"},
                    "interaction_state: not pending",
                ),
            ),
            (0.3, lambda: self.rename(actor, "client", "invalid_frame: renamed_by")),
            (
                0.3,
                lambda: self.send(
                    actor,
                    "agent.interaction.cancel",
                    {"interaction_id": self.uuid()},
                    "direction: only the client withdraws",
                ),
            ),
        ]
        withdrawn = sorted(s.interaction_ids - set(s.pending_interactions))
        if withdrawn:
            late = {"interaction_id": self.rng.choice(withdrawn), "response": "too late"}
            options.append(
                (
                    0.8,
                    lambda: self.send(
                        actor,
                        "control.interaction.response",
                        late,
                        "interaction_state: answered or withdrawn",
                    ),
                )
            )
        if s.turn_id is None and s.turns_completed > self.message_turns:
            text = {"text": "hello " * self.rng.randint(1, 5)}
            options.append((2.0, lambda: self.message(actor, text)))
        if s.pending_interactions:
            pending = self.rng.choice(sorted(s.pending_interactions))
            answer = {"interaction_id": pending, "response": "yes"}
            options.append(
                (3.0, lambda: self.send(actor, "control.interaction.response", answer, "valid"))
            )
        deleted = {
            "session_id": SESSION_PLACEHOLDER,
            "reason": "user_request",
            "deleted_by": "edge",
        }
        options.append((0.05, lambda: self.send(actor, "session.deleted", deleted, "edge ends it")))
        (choice,) = self.rng.choices([x for _, x in options], weights=[w for w, _ in options])
        step = choice()
        assert step is not None
        return step


def _usage() -> dict[str, Any]:
    return {
        "token_usage": {"input_tokens": 12, "output_tokens": 34},
        "cost_usage": {"limit": -1, "used": 0.02, "unit": "USD"},
        "message_usage": {"limit": 100, "used": 1, "unit": "COUNT"},
        "time_to_reset": "PT5H",
    }
