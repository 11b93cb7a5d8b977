"""Names are grammar (notes §16.7): frame types, session ids, and escaping for outputs."""

from __future__ import annotations

import json

import pytest

from protocol import codec, names
from protocol.errors import InvalidFrame
from tests.support.wire import envelope

# Every C0 control, DEL, every C1 control, and the Unicode line/paragraph separators.
CONTROLS = [chr(c) for c in (*range(0x20), *range(0x7F, 0xA0))] + ["\u2028", "\u2029"]


@pytest.mark.parametrize("text", ["user.message", "x.custom", "a_1.b2.c_3", "a." + "b" * 62])
def test_frame_types_that_follow_the_grammar(text: str) -> None:
    """Dot-separated lowercase words up to 64 bytes are frame types."""
    assert names.is_frame_type(text)


@pytest.mark.parametrize(
    "text",
    ["", "x", "X.y", "x..y", ".x", "x.", "x.y-z", "x.y z", "x.ÿ", "a." + "b" * 63, "x.y\n"],
)
def test_frame_types_that_do_not(text: str) -> None:
    """Anything else (one word, capitals, spaces, non-ASCII, over 64 bytes) is not."""
    assert not names.is_frame_type(text)


@pytest.mark.parametrize("text", ["s-1", "A.b_c:d-9", "x" * 128, "0"])
def test_session_ids_that_follow_the_grammar(text: str) -> None:
    """1–128 characters of A-Z a-z 0-9 . _ : - are session ids."""
    assert names.is_session_id(text)


@pytest.mark.parametrize(
    "text", ["", "x" * 129, "s{1}", "a/b", "a b", "s-ü", "s\n", "%41", "a#b", "s-1\r"]
)
def test_session_ids_that_do_not(text: str) -> None:
    """Braces (a Redis hash tag), slashes, spaces, non-ASCII, controls: not session ids."""
    assert not names.is_session_id(text)


def test_every_control_character_is_escaped_on_one_line() -> None:
    """one_line writes every control character as a visible escape, nothing raw."""
    for char in CONTROLS:
        out = names.one_line(f"a{char}b")
        assert char not in out, repr(char)
        assert out.startswith("a\\")
        assert out.endswith("b")


def test_text_bodies_keep_only_newlines_and_tabs() -> None:
    """text_body turns CR and CRLF into LF and escapes every other control character."""
    assert names.text_body("a\r\nb\rc\td") == "a\nb\nc\td"
    for char in CONTROLS:
        if char in "\n\t\r":
            continue
        assert char not in names.text_body(f"a{char}b"), repr(char)


@pytest.mark.parametrize("char", CONTROLS, ids=[f"U+{ord(c):04X}" for c in CONTROLS])
def test_an_ignorable_type_with_a_control_character_is_invalid(char: str) -> None:
    """The SSE-injection frame of issue 12 (an ignorable type with CR/LF) is invalid_frame."""
    frame = envelope("s-1", f"x.evil{char}id: 999999", {}, metadata={"ignorable": True})
    with pytest.raises(InvalidFrame):
        codec.decode(json.dumps(frame))


@pytest.mark.parametrize("session_id", ["s{1}", "a/b", "a b", "", "x" * 129, "s\n"])
def test_a_frame_naming_a_malformed_session_id_is_invalid(session_id: str) -> None:
    """Every envelope's session_id follows the grammar, known types and ignorable ones alike."""
    for frame in (
        envelope(session_id, "user.message", {"text": "hi"}),
        envelope(session_id, "x.custom", {}, metadata={"ignorable": True}),
    ):
        with pytest.raises(InvalidFrame):
            codec.decode(json.dumps(frame))


def test_an_ignorable_type_outside_the_grammar_is_invalid_not_unknown() -> None:
    """A type that is no name at all is invalid_frame, whether marked ignorable or not."""
    for metadata in ({"ignorable": True}, {}):
        frame = envelope("s-1", "Not A Type", {}, metadata=metadata)
        with pytest.raises(InvalidFrame):
            codec.decode(json.dumps(frame))


def test_check_session_id_names_the_grammar_and_escapes_what_it_echoes() -> None:
    """The refusal says what a session id is, and never echoes a raw control character."""
    with pytest.raises(InvalidFrame) as info:
        names.check_session_id("bad\nid: 1")
    assert "\n" not in info.value.message
    assert "A-Z a-z 0-9 . _ : -" in info.value.message


@pytest.mark.parametrize(
    ("text", "segment"),
    [
        ("s-py", "s-py"),
        ("a:b.c_d", "a%3Ab.c_d"),
        (".", "%2E"),
        ("..", "%2E%2E"),
        ("...", "%2E%2E%2E"),
        ("a/../b", "a%2F..%2Fb"),
    ],
)
def test_a_path_segment_is_one_segment_no_parser_resolves_away(text: str, segment: str) -> None:
    """Every reserved character is escaped, and an id of dots only is written %2E."""
    assert names.path_segment(text) == segment
