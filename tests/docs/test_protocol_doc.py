"""docs/protocol.md's list of ``session.error`` codes is exactly the codes the code raises: a
code added to protocol/errors.py (or a master notice's code) and not to the list fails here."""

from __future__ import annotations

import re
from pathlib import Path

from protocol import errors

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "protocol.md"


def documented_codes() -> set[str]:
    """The codes named in the paragraph that starts "`session.error` codes:"."""
    text = DOC.read_text(encoding="utf-8")
    paragraph = text.split("`session.error` codes:", 1)[1].split("\n\n", 1)[0]
    listed = paragraph.split(" A `session.error` that refuses", 1)[0]
    return set(re.findall(r"`([a-z_]+)`", listed)) - {"user.message"}


def raised_codes() -> set[str]:
    """Every ProtocolError's code, and the codes of the master's own notices."""
    codes = {
        cls.code
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.ProtocolError)
    }
    source = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "relay").rglob("*.py"))
    return codes | set(re.findall(r'error_code="([a-z_]+)"', source))


def test_the_session_error_codes_listed_are_the_ones_raised() -> None:
    """Every session.error code the code raises is listed (busy included), and only those."""
    assert "busy" in raised_codes()
    assert documented_codes() == raised_codes()
