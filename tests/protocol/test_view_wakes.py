"""Revisits and wakes in the view, `rawp tail` and the Markdown export (notes §17.5)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from protocol import codec
from protocol.client_sends import revisit_time
from protocol.frames import Frame, GenericFrame
from protocol.state import SenderRole
from protocol.tail import TailPrinter
from protocol.view import NoticeBlock, SessionView
from relay.http.transcript import render_markdown
from tests.protocol.test_names import CONTROLS
from tests.support.wire import envelope

SID = "s-wake"
EVIL = "`*_[x](javascript:1)<b>#|" + "".join(CONTROLS) + "\x1b[2J"
AT = "2026-12-08T09:30:15.250+01:00"  # 08:30:15 UTC


def _frame(seq: int, role: SenderRole, tag: str, payload: dict[str, Any]) -> Frame | GenericFrame:
    raw = envelope(SID, tag, payload, seq=seq, sender={"role": role, "participant_id": f"p-{role}"})
    return codec.decode(json.dumps(raw))


def _log(reason: str | None = "check the build") -> list[tuple[Frame | GenericFrame, SenderRole]]:
    request: dict[str, Any] = {"revisit_id": "r1", "at": AT}
    if reason is not None:
        request["reason"] = reason
    wake = {**request}
    return [
        (_frame(1, "client", "session.revisit.request", request), "client"),
        (_frame(2, "client", "session.revisit.request", {"revisit_id": "r2", "at": AT}), "client"),
        (_frame(3, "client", "session.revisit.cancel", {"revisit_id": "r2"}), "client"),
        (_frame(4, "client", "session.revisit.cancel", {"revisit_id": "unknown"}), "client"),
        (_frame(5, "master", "session.wake", wake), "master"),
    ]


def test_view_folds_pending_revisits_and_status() -> None:
    """A pending revisit makes the status rescheduling; the wake (or cancel) ends it."""
    log = _log()
    view = SessionView.replay(SID, log[:2])
    assert view.status == "rescheduling"
    assert sorted(view.pending_revisits) == ["r1", "r2"]
    assert view.pending_revisits["r1"].reason == "check the build"
    view = SessionView.replay(SID, log[:4])
    assert list(view.pending_revisits) == ["r1"]
    assert view.status == "rescheduling"
    view = SessionView.replay(SID, log)
    assert view.pending_revisits == {}
    assert view.status == "idle"
    assert view.skipped == 0


def test_view_renders_revisit_and_wake_lines() -> None:
    """Each request, a cancel of a pending one and the wake are a notice line, in UTC."""
    view = SessionView.replay(SID, _log())
    lines = [(b.notice, b.text) for b in view.blocks if isinstance(b, NoticeBlock)]
    assert lines == [
        ("revisit", "asked to be woken at 2026-12-08 08:30:15 UTC (check the build)"),
        ("revisit", "asked to be woken at 2026-12-08 08:30:15 UTC"),
        ("revisit_cancelled", "no longer asks to be woken at 2026-12-08 08:30:15 UTC"),
        ("wake", "woken: check the build (asked for 2026-12-08 08:30:15 UTC)"),
    ]


def test_tail_prints_wake_lines_with_hostile_reason_escaped() -> None:
    """rawp tail shows the revisit and the wake; a reason's control characters never pass."""
    out: list[str] = []
    printer = TailPrinter(out.append)
    for frame, _role in _log(EVIL):
        printer.frame(frame)
    text = "".join(out)
    assert "⏰ asked to be woken at 2026-12-08 08:30:15 UTC (" in text
    assert '⏰ revisit withdrawn: "r2"' in text
    assert "⏰ woken: `*_[x]" in text
    assert "\x1b" not in text
    assert not [c for c in CONTROLS if c not in "\n\t" and c in text]
    assert text.count("\n") == len(out)  # one line per frame: no forged line


def test_markdown_export_escapes_the_reason() -> None:
    """The Markdown export writes the wake lines with the reason's markup escaped."""
    view = SessionView.replay(SID, _log(EVIL))
    text = render_markdown(view, [])
    [asked] = [line for line in text.splitlines() if "asked to be woken" in line and "(" in line]
    [woken] = [line for line in text.splitlines() if "woken:" in line]
    for line in (asked, woken):
        assert line.startswith("*⏰ ")
        assert "\\`\\*\\_\\[x\\]" in line
        assert "<b>" not in line
        assert "\x1b" not in line


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("2026-12-08T09:00:00Z", dt.datetime(2026, 12, 8, 9, tzinfo=dt.UTC)),
        (
            dt.datetime(2026, 12, 8, 10, tzinfo=dt.timezone(dt.timedelta(hours=1))),
            dt.datetime(2026, 12, 8, 9, tzinfo=dt.UTC),
        ),
    ],
)
def test_revisit_time_accepts_aware_times(given: str | dt.datetime, expected: dt.datetime) -> None:
    """revisit() takes RFC 3339 text and aware datetimes."""
    assert revisit_time(given) == expected


def test_revisit_time_refuses_naive_and_bad_text() -> None:
    """A time without a zone, or text that is no time, is refused before anything is sent."""
    with pytest.raises(ValueError, match="time zone"):
        revisit_time(dt.datetime(2026, 12, 8, 9))
    with pytest.raises(ValueError, match="time zone"):
        revisit_time("2026-12-08T09:00:00")
    with pytest.raises(ValueError, match="RFC 3339"):
        revisit_time("tomorrow")
    later = revisit_time(dt.timedelta(seconds=30))
    assert 25 < (later - dt.datetime.now(dt.UTC)).total_seconds() <= 30
