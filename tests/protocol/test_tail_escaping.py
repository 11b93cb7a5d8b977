"""rawp tail writes received text as text: no control character reaches the terminal."""

from __future__ import annotations

import json

from protocol import codec
from protocol.tail import TailPrinter
from tests.protocol.test_names import CONTROLS
from tests.support.wire import envelope

EVIL = "x" + "".join(CONTROLS) + "\x1b[2J\x1b]0;owned\x07"


def test_no_received_control_character_reaches_the_terminal() -> None:
    """Errors, renames and streamed text print every control character but LF and tab escaped."""
    out: list[str] = []
    printer = TailPrinter(out.append)
    frames = [
        envelope(
            "s-t", "session.renamed", {"session_id": "s-t", "name": EVIL, "renamed_by": "edge"}
        ),
        envelope(
            "s-t", "session.error", {"error_code": EVIL[:50], "message": EVIL, "fatal": False}
        ),
        envelope("s-t", "agent.text.delta", {"block_id": "b", "delta": EVIL}),
    ]
    for seq, frame in enumerate(frames, start=1):
        stamped = {**frame, "seq": seq, "sender": {"role": "edge", "participant_id": "p"}}
        printer.frame(codec.decode(json.dumps(stamped)))
    text = "".join(out)
    assert "\x1b" not in text
    assert not [c for c in CONTROLS if c not in "\n\t" and c in text]


def test_a_participants_error_is_printed_as_its_report() -> None:
    """rawp tail labels a participant's session.error with its role; the master's stands alone."""
    out: list[str] = []
    printer = TailPrinter(out.append)
    payload = {"error_code": "history_truncated", "message": "lost", "fatal": False}
    for seq, role in enumerate(("edge", "master"), start=1):
        frame = envelope("s-t", "session.error", payload)
        stamped = {**frame, "seq": seq, "sender": {"role": role, "participant_id": f"p-{role}"}}
        printer.frame(codec.decode(json.dumps(stamped)))
    assert out == [
        "! history_truncated (reported by the edge): lost\n",
        "! history_truncated: lost\n",
    ]
