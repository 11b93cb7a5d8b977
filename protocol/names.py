"""Names are grammar, not free text (notes §16.7); received text never shapes an output.

* A frame ``type`` is dot-separated lowercase words: ``[a-z0-9_]+(\\.[a-z0-9_]+)+``, at most
  64 bytes — the known types and the ignorable ones alike.
* A ``session_id`` is 1–128 characters of ``[A-Za-z0-9._:-]``, the same on every store (a
  ``{`` or ``}`` would move a Redis Cluster hash tag; a ``/`` would leave its URL path).

Frames that break either are ``invalid_frame`` (at hello: close 4400); HTTP answers 400.

Outputs that carry received strings in a line-based or markup format (SSE fields, console
log lines, Markdown) pass them through :func:`one_line` (every control character shown as
an escape, so no CR/LF/ESC ever reaches the output) or :func:`text_body` (only newlines
kept) first.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Final

from .errors import InvalidFrame

__all__ = [
    "FRAME_TYPE_MAX_BYTES",
    "FRAME_TYPE_PATTERN",
    "SESSION_ID_MAX",
    "SESSION_ID_PATTERN",
    "check_session_id",
    "is_frame_type",
    "is_session_id",
    "not_a_session_id",
    "one_line",
    "path_segment",
    "text_body",
]

FRAME_TYPE_MAX_BYTES: Final = 64
SESSION_ID_MAX: Final = 128
# "$(?!\n)": msgspec matches with re.search, where a bare "$" also matches before a final
# newline; the lookahead keeps the pattern valid in ECMA-262 for the JSON Schemas.
FRAME_TYPE_PATTERN: Final = r"^[a-z0-9_]+(?:\.[a-z0-9_]+)+$(?!\n)"
SESSION_ID_PATTERN: Final = r"^[A-Za-z0-9._:-]+$(?!\n)"

_FRAME_TYPE: Final = re.compile(FRAME_TYPE_PATTERN)
_SESSION_ID: Final = re.compile(SESSION_ID_PATTERN)
# C0 controls, DEL, C1 controls, and the Unicode line/paragraph separators (JavaScript and
# some terminals break lines there too).
_CONTROL: Final = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROL_BUT_NEWLINE: Final = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def is_frame_type(text: str) -> bool:
    """Does ``text`` follow the frame-type grammar (§16.7)?"""
    return len(text.encode()) <= FRAME_TYPE_MAX_BYTES and _FRAME_TYPE.match(text) is not None


def is_session_id(text: str) -> bool:
    """Does ``text`` follow the session-id grammar (§16.7)?"""
    return 0 < len(text) <= SESSION_ID_MAX and _SESSION_ID.match(text) is not None


def not_a_session_id(text: str) -> str:
    """Why ``text`` was refused as a session id (safe to echo: escaped and cut short)."""
    return (
        f"session_id {one_line(text[:SESSION_ID_MAX])!r} is not 1-{SESSION_ID_MAX} "
        "characters of A-Z a-z 0-9 . _ : - (notes §16.7)"
    )


def check_session_id(text: str) -> str:
    """``text`` if it is a session id; else :class:`InvalidFrame` naming the grammar."""
    if not is_session_id(text):
        raise InvalidFrame(not_a_session_id(text))
    return text


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def one_line(text: str) -> str:
    """``text`` with every control character (CR and LF included) written as an escape."""
    return _CONTROL.sub(_escape, text)


def text_body(text: str) -> str:
    """Multi-line ``text``: CRLF/CR made LF, every control character but LF and tab escaped."""
    return _CONTROL_BUT_NEWLINE.sub(_escape, text.replace("\r\n", "\n").replace("\r", "\n"))


def path_segment(text: str) -> str:
    """``text`` as one URL path segment, already percent-encoded: every character but
    ``A-Z a-z 0-9 - . _ ~`` escaped (``:`` too), and a segment of dots only (``.``, ``..``,
    both valid session ids) written ``%2E`` so no URL parser takes it for a dot segment and
    resolves it away. Send it as an *encoded* URL (no requoting, which would undo both)."""
    segment = urllib.parse.quote(text, safe="")
    return segment.replace(".", "%2E") if segment.strip(".") == "" else segment
