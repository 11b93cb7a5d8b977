"""A connection joins fragments into the messages sent, whatever the split (relay/ws.py)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from picows import WSMsgType
from picows.picows import _make_test_ws_frame

from relay.config import Settings
from relay.ws import Connection

__all__: list[str] = []

_LIMIT = 4096


class _Endpoint:
    """What a connection reads of its endpoint before anything attaches."""

    def __init__(self) -> None:
        self.hub = type("Hub", (), {"settings": Settings(max_frame_bytes=_LIMIT)})()
        self.connections: set[Any] = set()


class _Transport:
    """A picows transport that records the close it is asked to send."""

    def __init__(self) -> None:
        self.closed_with: int | None = None
        self.close_handshake = None
        self.is_close_frame_sent = False

    def send_close(self, code: int, reason: object = None) -> None:
        if self.closed_with is None:
            self.closed_with = int(code)
            self.is_close_frame_sent = True


class _Recorder(Connection):
    """A connection whose whole messages are recorded instead of handled."""

    __slots__ = ("got",)

    def message(self, data: bytes, text: bool) -> None:
        self.got.append((data, text))


def _connection() -> tuple[_Recorder, _Transport]:
    connection = _Recorder(_Endpoint())  # type: ignore[arg-type]
    connection.got = []
    transport = _Transport()
    connection.transport = transport  # type: ignore[assignment]
    connection._timer = None
    return connection, transport


def _feed(frames: list[Any]) -> tuple[_Recorder, _Transport]:
    """``frames`` read by a new connection, in a running loop (a close arms its timer)."""

    async def read() -> tuple[_Recorder, _Transport]:
        connection, transport = _connection()
        for frame in frames:
            connection.on_ws_frame(transport, frame)  # type: ignore[arg-type]
        if connection._timer is not None:
            connection._timer.cancel()
        return connection, transport

    return asyncio.run(read())


def _frames(data: bytes, text: bool, cuts: list[int]) -> list[Any]:
    """``data`` as one message cut at ``cuts``: the first frame TEXT/BINARY, then continuations."""
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(data)}), len(data)]
    pieces = [data[a:b] for a, b in itertools.pairwise(bounds)] or [b""]
    first = WSMsgType.TEXT if text else WSMsgType.BINARY
    return [
        _make_test_ws_frame(kind, piece, i == len(pieces) - 1, False)
        for i, (kind, piece) in enumerate(zip(_kinds(first, len(pieces)), pieces, strict=True))
    ]


def _kinds(first: WSMsgType, count: int) -> list[WSMsgType]:
    return [first] + [WSMsgType.CONTINUATION] * (count - 1)


_messages = st.lists(
    st.tuples(
        st.binary(max_size=300),
        st.booleans(),
        st.lists(st.integers(min_value=1, max_value=299), max_size=6),
        st.booleans(),  # a pong comes in the middle of this message's fragments
    ),
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(_messages)
def test_fragments_join_into_the_messages_sent(messages: list[Any]) -> None:
    """Any split into fragments, control frames between them, gives back each message once."""
    frames: list[Any] = []
    for data, text, cuts, pong in messages:
        these = _frames(data, text, cuts)
        if pong:
            these.insert(len(these) // 2, _make_test_ws_frame(WSMsgType.PONG, b"", True, False))
        frames += these
    connection, transport = _feed(frames)
    assert connection.got == [(data, text) for data, text, _, _ in messages]
    assert transport.closed_with is None


@given(st.integers(min_value=2, max_value=8))
def test_fragments_past_the_limit_close_1009_and_deliver_nothing(count: int) -> None:
    """Fragments under the limit each but over it together fail the connection 1009."""
    piece = b"x" * (_LIMIT // count + 1)
    connection, transport = _feed(
        _frames(piece * count, True, [len(piece) * i for i in range(1, count)])
    )
    assert transport.closed_with == 1009
    assert connection.got == []


def test_a_stray_continuation_closes_1002() -> None:
    """A continuation with no message begun is a protocol error."""
    connection, transport = _feed([_make_test_ws_frame(WSMsgType.CONTINUATION, b"x", True, False)])
    assert transport.closed_with == 1002
    assert connection.got == []


def test_reserved_bits_close_1002() -> None:
    """RSV1 without a negotiated extension is a protocol error (RFC 6455 §5.2)."""
    connection, transport = _feed([_make_test_ws_frame(WSMsgType.TEXT, b"{}", True, True)])
    assert transport.closed_with == 1002
    assert connection.got == []


def test_a_message_in_too_many_fragments_closes_1009() -> None:
    """Empty fragments weigh nothing against the size limit; their number is bounded too."""
    empty = [_make_test_ws_frame(WSMsgType.CONTINUATION, b"", False, False)] * 5000
    connection, transport = _feed([_make_test_ws_frame(WSMsgType.TEXT, b"{", False, False), *empty])
    assert transport.closed_with == 1009
    assert connection.got == []
