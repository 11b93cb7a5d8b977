"""Bytes in, frames out; frames in, bytes out. Decoders and encoders are built once.

* :func:`decode` parses one WebSocket message into a typed frame (or a :class:`GenericFrame`
  for an unknown type marked ``metadata.ignorable``), raising :class:`InvalidFrame` or
  :class:`UnknownType` with a message a person can act on.
* :func:`decode_received` is :func:`decode` for a frame a participant sent, whose bytes are
  relayed as they came: it also refuses an object holding one key twice (parsers disagree on
  which value counts, so the frame validated would not be the frame every receiver reads).
* :func:`stamp` / :func:`stamp_parts` add the master's ``seq`` and ``sender`` to the sender's
  *original* bytes, so unknown keys travel untouched (notes §3) and the frame is encoded once.
* :func:`encode` serialises frames the master or a library builds itself.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import itertools
import json
import os
import re
import time
from typing import Any, Final

import msgspec

from .errors import InvalidFrame, UnknownType
from .frames import (
    ISO8601_PATTERN,
    UUID4_PATTERN,
    AnyFrame,
    Frame,
    GenericFrame,
    Metadata,
    Sender,
    frame_types,
)

__all__ = [
    "SYNTHETIC",
    "decode",
    "decode_object",
    "decode_received",
    "duplicate_key",
    "encode",
    "encode_json",
    "format_time",
    "new_message_id",
    "now",
    "parse_time",
    "stamp",
    "stamp_parts",
    "stamp_sender",
]

_any_decoder: Final = msgspec.json.Decoder(AnyFrame)
_generic_decoder: Final = msgspec.json.Decoder(GenericFrame)
_dict_decoder: Final = msgspec.json.Decoder(dict[str, Any])
_encoder: Final = msgspec.json.Encoder()

SYNTHETIC: Final = Metadata(synthetic=True)


def decode(data: bytes | str) -> Frame | GenericFrame:
    """Decode one envelope. Raises :class:`InvalidFrame` or :class:`UnknownType`."""
    try:
        frame: Frame = _any_decoder.decode(data)
    except msgspec.ValidationError as exc:
        text = str(exc)
        if text.startswith("Invalid value") and text.endswith("at `$.type`"):
            return _decode_unknown(data, text)
        raise InvalidFrame(_explain(text)) from None
    except msgspec.DecodeError as exc:
        raise InvalidFrame(f"not a JSON object: {exc}") from None
    except RecursionError:
        raise InvalidFrame("JSON nested too deeply") from None
    return frame


def decode_received(data: bytes) -> Frame | GenericFrame:
    """:func:`decode`, and :class:`InvalidFrame` when any object of ``data`` holds a key twice.

    Such a frame would be validated with one value (the last) and relayed with both, and a
    receiver whose parser keeps the first would read another frame than the one checked.
    """
    frame = decode(data)
    duplicate = duplicate_key(data)
    if duplicate is not None:
        shown = duplicate[:40].encode("unicode_escape").decode("ascii")
        raise InvalidFrame(f"the key {shown!r} appears twice in one object; send each key once")
    return frame


class _Duplicate(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Duplicate(key)
            seen.add(key)
    return obj


def duplicate_key(data: bytes) -> str | None:
    """The first key found twice in one object of the JSON ``data``, or None.

    Fast path: ``data`` re-encoded compactly from what it decodes to is ``data`` itself, which
    a text with a key twice never is (the decoded object has one key fewer). Only a text
    that differs (spaces, escapes, a key twice) is parsed again key by key.
    """
    try:
        if _encoder.encode(_dict_decoder.decode(data)) == data:
            return None
        json.loads(data, object_pairs_hook=_unique)
    except _Duplicate as exc:
        return exc.key
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
        return None  # not for this check to judge: decode() says what is wrong
    return None


def _decode_unknown(data: bytes | str, text: str) -> GenericFrame:
    try:
        generic = _generic_decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise InvalidFrame(_explain(str(exc))) from None
    except msgspec.DecodeError as exc:
        # The union decoder stops at the unknown tag, before the malformed rest.
        raise InvalidFrame(f"not a JSON object: {exc}") from None
    except RecursionError:
        raise InvalidFrame("JSON nested too deeply") from None
    if generic.metadata is not None and generic.metadata.ignorable:
        return generic
    close = difflib.get_close_matches(generic.type, frame_types(), n=1, cutoff=0.75)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise UnknownType(
        f"unknown frame type {generic.type!r}{hint}; set metadata.ignorable to true to have "
        "it relayed untouched"
    )


_PATTERN_NAMES: Final = {
    UUID4_PATTERN: "must be a UUID v4 (like 0f8fad5b-d9cb-469f-a165-70867728950e)",
    ISO8601_PATTERN: "must be an ISO 8601 date-time or duration (like PT5H)",
}
_PATTERN_MISMATCH: Final = re.compile(
    r"^Expected `str` matching regex (?P<pattern>'.*') - at `(?P<at>[^`]+)`$", re.DOTALL
)


def _explain(text: str) -> str:
    """Turn msgspec's message into one that names the field in the envelope's terms.

    A string that does not match a known pattern says what it must be ("must be a UUID v4")
    rather than quoting the regular expression.
    """
    text = text.replace("`$.", "`").replace("`$`", "the envelope")
    match = _PATTERN_MISMATCH.match(text)
    if match:
        for pattern, meaning in _PATTERN_NAMES.items():
            if match.group("pattern") == repr(pattern):
                return f"`{match.group('at')}` {meaning}"
    return text


def decode_object(data: bytes | str) -> dict[str, Any]:
    """Decode a JSON object into a plain dict (slow path; tools and tests)."""
    return _dict_decoder.decode(data)


def encode(frame: Frame | GenericFrame) -> bytes:
    """Encode a frame the caller built (compact JSON)."""
    return _encoder.encode(frame)


def encode_json(value: Any) -> bytes:
    """Encode any msgspec-supported value (compact JSON)."""
    return _encoder.encode(value)


def stamp_parts(raw: bytes, frame: Frame | GenericFrame, sender: Sender) -> tuple[bytes, bytes]:
    """Split the stamped envelope around its seq: the frame is ``head + str(seq) + tail``.

    Fast path: the sender sent neither ``seq`` nor ``sender`` (both are ignored on input), so
    both are appended to the original bytes. Otherwise the object is re-encoded without them.
    """
    tail = b',"sender":%s}' % _encoder.encode(sender)
    # A key present with a null value decodes as None too: look at the bytes as well, and
    # at escapes (``"s\u0065nder": null`` is that key too, under another spelling).
    if (
        frame.seq is None
        and frame.sender is None
        and b'"seq"' not in raw
        and b'"sender"' not in raw
        and b"\\u" not in raw
    ):
        return raw.rstrip()[:-1] + b',"seq":', tail
    obj = _dict_decoder.decode(raw)
    obj.pop("seq", None)
    obj.pop("sender", None)
    return _encoder.encode(obj)[:-1] + b',"seq":', tail


_SEQ_KEY: Final = b',"seq":'


def stamp_sender(raw: bytes, frame: Frame | GenericFrame, sender: Sender) -> bytes:
    """``raw`` with no ``seq`` and the master's ``sender``: a frame inside a participant's
    ``session.history``, which has no seq of its own (notes §15.1) and speaks for the
    participant that sent the history, whatever stamp it brought (notes §16.8)."""
    head, tail = stamp_parts(raw, frame, sender)
    return head[: -len(_SEQ_KEY)] + tail


def stamp(raw: bytes, frame: Frame | GenericFrame, seq: int, sender: Sender) -> bytes:
    """Return ``raw`` with the master's ``seq`` and ``sender`` set (notes §3)."""
    head, tail = stamp_parts(raw, frame, sender)
    return b"%s%d%s" % (head, seq, tail)


class _RandomHex:
    """``os.urandom`` read 4 KiB at a time, as hex: a message id costs a slice, not a system
    call (an attach makes several: participant id, welcome, presence).

    Safe from several threads without a lock, by construction (the client library may make ids
    from several): each id takes the next number of an ``itertools.count`` (one C call, atomic
    under the GIL), which names its block of random bytes and its slot in it, so no two calls
    share a slot; ``setdefault`` keeps the first of two blocks made at once. Reset in a forked
    child, so a parent's and a child's ids never repeat each other's.
    """

    __slots__ = ("_blocks", "_numbers")

    _IDS_PER_BLOCK: Final = 256  # 4 KiB of random bytes, 32 hex digits per id

    def __init__(self) -> None:
        self.after_fork()

    def after_fork(self) -> None:
        """Fresh blocks (in a forked child: none of the parent's)."""
        self._numbers = itertools.count()
        self._blocks: dict[int, str] = {}

    def take32(self) -> str:
        """32 fresh random hex digits (128 bits)."""
        block, slot = divmod(next(self._numbers), self._IDS_PER_BLOCK)
        digits = self._blocks.get(block)
        if digits is None:
            digits = self._blocks.setdefault(block, os.urandom(16 * self._IDS_PER_BLOCK).hex())
            self._blocks.pop(block - 2, None)  # a thread may still be slicing the one before
        return digits[32 * slot : 32 * slot + 32]


_random: Final = _RandomHex()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_random.after_fork)
# RFC 4122 variant: the 17th digit's two high bits are 10 (8, 9, a or b), its low two random.
_VARIANT: Final = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


def new_message_id() -> str:
    """A fresh message id (UUID v4: 122 bits from ``os.urandom``, as ``uuid.uuid4``).

    Made from random hex digits directly, version and variant set in place: ``str(uuid.uuid4())``
    builds a ``UUID`` object first, ~10× the cost, and an attach makes several (participant
    id, welcome, presence).
    """
    h = _random.take32()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}"


def parse_time(text: str) -> _dt.datetime:
    """Parse an RFC 3339 date-time (as stored in session headers)."""
    return msgspec.convert(text, _dt.datetime)


def format_time(moment: _dt.datetime) -> str:
    """Format a date-time as RFC 3339, the way frames carry it."""
    return _encoder.encode(moment).decode()[1:-1]


_from_timestamp: Final = _dt.datetime.fromtimestamp


def now() -> _dt.datetime:
    """The current time, UTC, millisecond precision (RFC 3339 on the wire).

    From whole milliseconds (a third of ``datetime.now`` then ``replace``); a float of
    milliseconds / 1000 converts back to exactly that millisecond (tested over 20 s of them).
    """
    return _from_timestamp(time.time_ns() // 1_000_000 / 1000, _dt.UTC)
