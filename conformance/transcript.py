"""The wire transcript of one case: what went over each socket and every HTTP exchange.

A :class:`Transcript` is filled by the case's peers (:mod:`.peer`) and its HTTP helper
(:class:`~.runner.Context`) as the case runs: each WebSocket opened, every message sent and
received (as its text, timestamped), how each socket closed (code and reason), and every HTTP
request with its status. The report keeps the transcript of every case that did not pass, so
a person porting RAWP sees the exchange that made the verdict (rawp-notes §2 transport, §5
handshake, §10 HTTP; RAWP 1.0.2 §7).

Texts are kept as they went over the wire, which means they may hold anything a master or a
case put there: renderers must escape them (the HTML report does).
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

__all__ = ["MAX_TEXT", "Event", "EventKind", "Transcript"]

EventKind: TypeAlias = Literal["open", "refused", "send", "recv", "close", "http", "note"]

MAX_TEXT: Final = 4096
"""Characters of one message kept in a transcript; the rest is cut (with its size noted)."""


def _clip(text: str) -> str:
    if len(text) <= MAX_TEXT:
        return text
    return f"{text[:MAX_TEXT]}… ({len(text.encode())} bytes in all)"


@dataclass(frozen=True, slots=True)
class Event:
    """One thing that happened on the wire.

    ``t_ms`` counts from the start of the case; ``at`` is the wall-clock time (UTC, RFC 3339);
    ``who`` is the peer's label (``client``, ``edge#2``) or ``http``; ``text`` is the message as
    sent or received, or a one-line description for open, close and HTTP events.
    """

    t_ms: float
    at: str
    who: str
    kind: EventKind
    text: str
    close_code: int | None = None
    http_status: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The event as the JSON report holds it."""
        out: dict[str, Any] = {
            "t_ms": round(self.t_ms, 1),
            "at": self.at,
            "who": self.who,
            "kind": self.kind,
            "text": self.text,
        }
        if self.close_code is not None:
            out["close_code"] = self.close_code
        if self.http_status is not None:
            out["http_status"] = self.http_status
        return out


@dataclass
class Transcript:
    """The events of one case, in the order they happened."""

    started: float = field(default_factory=time.monotonic)
    events: list[Event] = field(default_factory=list)

    def add(
        self,
        who: str,
        kind: EventKind,
        text: str,
        *,
        close_code: int | None = None,
        http_status: int | None = None,
    ) -> None:
        """Record one event now."""
        moment = dt.datetime.now(dt.UTC)
        at = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
        self.events.append(
            Event(
                t_ms=(time.monotonic() - self.started) * 1000,
                at=at,
                who=who,
                kind=kind,
                text=_clip(text),
                close_code=close_code,
                http_status=http_status,
            )
        )

    def to_json(self) -> list[dict[str, Any]]:
        """Every event as JSON."""
        return [event.to_json() for event in self.events]

    def to_text(self) -> str:
        """One line per event: ``+12.3ms who kind [code] text`` (for JUnit's system-out)."""
        lines = []
        for e in self.events:
            code = e.close_code if e.close_code is not None else e.http_status
            mark = f" [{code}]" if code is not None else ""
            lines.append(f"+{e.t_ms:.1f}ms {e.who} {e.kind}{mark} {e.text}")
        return "\n".join(lines)
