"""One step of a generated session: what one participant (or the operator) does.

A session is the client and an observer (an edge that never acts; it receives every entry of
the log, so the driver learns each entry's size as delivered) attached first, then a list of
steps. A step names its actor by a stable name (``client``, ``edge1``…), never by a
participant id the master assigns, so any sub-list of a session's steps is a session too
(shrinking removes steps; a step whose actor is absent is skipped by model and driver alike).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

from protocol.frames import Policy

__all__ = ["OBSERVER", "SESSION_PLACEHOLDER", "Step", "StepKind"]

StepKind: TypeAlias = Literal["send", "drop", "rehello", "join", "second_client", "delete"]

OBSERVER: Final = "observer"
SESSION_PLACEHOLDER: Final = "GENERATED-SESSION-ID"
"""Stands for the session id in a step's frame until the session runs."""


@dataclass(frozen=True)
class Step:
    """One action. ``frame`` is the envelope's JSON text for ``send`` (session id as
    :data:`SESSION_PLACEHOLDER`); ``policy`` and ``capacity`` the buffer a hello asks for
    (``rehello``: a reattach, or a takeover while attached; ``join``: a new edge, with
    ``resume`` at seq 0 when set); ``note`` says what the generator meant by it."""

    kind: StepKind
    actor: str = ""
    frame: str = ""
    policy: Policy | None = None
    capacity: int | None = None
    resume: bool = False
    note: str = ""

    @property
    def message_id(self) -> str | None:
        """The ``message_id`` of the frame a ``send`` step sends."""
        data: Any = json.loads(self.frame) if self.frame else {}
        value = data.get("message_id") if isinstance(data, dict) else None
        return value if isinstance(value, str) else None

    def text(self, session_id: str) -> str:
        """The frame's text for the session ``session_id``."""
        return self.frame.replace(SESSION_PLACEHOLDER, session_id)

    def describe(self) -> str:
        """One line: who does what."""
        if self.kind == "send":
            data: Any = json.loads(self.frame)
            what = f"sends {data.get('type')} {json.dumps(data.get('payload'), sort_keys=True)}"
        elif self.kind == "drop":
            what = "drops its connection (TCP abort)"
        elif self.kind == "rehello":
            what = "says hello again with its participant id" + self._buffer()
        elif self.kind == "join":
            what = "attaches as a new edge" + (" resuming at seq 0" if self.resume else "")
            what += self._buffer()
        elif self.kind == "second_client":
            what = "attaches as a client with a new participant id"
        else:
            what = "DELETE /v1/session/{id}"
        note = f"  [{self.note}]" if self.note else ""
        return f"{self.actor or 'operator'} {what}{note}"

    def _buffer(self) -> str:
        if self.policy is None:
            return ""
        return f", buffer {self.policy} {self.capacity} bytes"
