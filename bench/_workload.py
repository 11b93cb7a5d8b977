"""The frames the load generators send: a realistic, valid agent stream and hellos.

:class:`AgentStream` yields the encoded frames of one session's client, turn after turn, in
an order the session state machine accepts (notes §6). One turn is 70 frames: turn start,
agent states, a thinking block, two text blocks of token-sized deltas around one tool call
and its result, turn end and usage — 59 of the 70 are ``*.delta`` frames, as in a real
stream. Frames are built from byte templates (no JSON encoder per frame), message ids are
``<prefix>-<counter>`` (any string of ≤ 256 characters is a valid id, docs/protocol.md §3).

:func:`stamp_ns` adds an unknown envelope key ``"bt"`` holding a monotonic-clock timestamp;
unknown keys are relayed untouched (notes §3), so an edge can read it back to measure
latency with both the master and the baseline relay.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from typing import Any, Final

import msgspec

__all__ = [
    "FRAMES_PER_TURN",
    "TIMESTAMP",
    "AgentStream",
    "frame_type",
    "hello",
    "read_stamp",
    "stamp_ns",
]

TIMESTAMP: Final = "2026-11-29T09:00:00.123Z"
_enc = msgspec.json.Encoder()

_WORDS: Final = (
    "the",
    " model",
    " streams",
    " tokens",
    ",",
    " one",
    " at",
    " a",
    " time",
    ".",
    "\n",
    " Here",
    "'s",
    " the",
    " diff",
    ":",
    " `relay/",
    "fanout.py`",
    " — ",
    " naïve",
    " ✓",
    " def",
    " deliver",
    "(self",
    ", entry",
    "):",
    "\n    ",
    "for",
    " q",
    " in",
    " self",
    ".participants",
    ".values",
    "()",
    " 12",
    "345",
    " ms",
    " p99",
    " latency",
    " 🚀",
)


def _delta_pool(seed: int, size: int = 512) -> list[bytes]:
    rng = random.Random(seed)
    pool = []
    for _ in range(size):
        text = "".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 4)))
        pool.append(_enc.encode(text))
    return pool


_TOOL_OUTPUT: Final = _enc.encode(
    {
        "matches": [
            {"path": f"relay/module_{i}.py", "line": 10 * i + 3, "text": "    await q.send(data)"}
            for i in range(6)
        ],
        "truncated": False,
    }
)

_USAGE: Final = _enc.encode(
    {
        "token_usage": {"input_tokens": 18234, "output_tokens": 1290, "cache_read_tokens": 15000},
        "cost_usage": {"limit": 50.0, "used": 12.37, "unit": "USD"},
        "message_usage": {"limit": -1, "used": 214, "unit": "COUNT"},
        "context_window": {"capacity": 200000, "used": 19524, "utilization": 0.0976},
        "time_to_reset": "PT4H30M",
    }
)[:-1]  # the turn_id is appended per turn

FRAMES_PER_TURN: Final = 70


class AgentStream:
    """An endless, valid client stream for ``session_id`` (see the module docstring)."""

    def __init__(self, session_id: str, *, seed: int = 0, prefix: str = "m") -> None:
        self.session_id = session_id
        self.prefix = prefix
        self.count = 0  # frames produced so far
        self.turn_index = 0
        self._pool = _delta_pool(seed)
        self._rng = random.Random(seed)
        self._head = b'","message_id":"%s-%%d","session_id":"%s","timestamp":"%s","payload":' % (
            prefix.encode(),
            session_id.encode(),
            TIMESTAMP.encode(),
        )
        self._iter = self._frames()

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        return next(self._iter)

    def take(self, n: int) -> list[bytes]:
        """The next ``n`` frames."""
        it = self._iter
        return [next(it) for _ in range(n)]

    def _frame(self, type_: bytes, payload: bytes) -> bytes:
        self.count += 1
        return b'{"type":"' + type_ + (self._head % self.count) + payload + b"}"

    def _frames(self) -> Iterator[bytes]:
        pool = self._pool
        rng = self._rng
        f = self._frame
        while True:
            t = self.turn_index
            turn_id = str(uuid.UUID(int=rng.getrandbits(128), version=4)).encode()
            yield f(b"session.turn.start", b'{"turn_id":"%s","turn_index":%d}' % (turn_id, t))
            yield f(b"agent.state", b'{"state":"thinking"}')
            think = b"k%d" % t
            for _ in range(4):
                yield f(
                    b"agent.thinking.delta",
                    b'{"block_id":"%s","delta":%s}' % (think, rng.choice(pool)),
                )
            yield f(b"agent.thinking.done", b'{"block_id":"%s"}' % think)
            yield f(b"agent.state", b'{"state":"responding"}')
            block = b"a%d" % t
            for _ in range(30):
                yield f(
                    b"agent.text.delta", b'{"block_id":"%s","delta":%s}' % (block, rng.choice(pool))
                )
            yield f(b"agent.text.done", b'{"block_id":"%s"}' % block)
            yield f(b"agent.state", b'{"state":"tool_calling"}')
            call = b"c%d" % t
            yield f(
                b"tool.invoke.request",
                b'{"call_id":"%s","tool_name":"grep","input":{"pattern":"send\\\\(","path":"relay/"}}'
                % call,
            )
            yield f(
                b"tool.invoke.result",
                b'{"call_id":"%s","status":"ok","output":%s}' % (call, _TOOL_OUTPUT),
            )
            block = b"b%d" % t
            for _ in range(25):
                yield f(
                    b"agent.text.delta", b'{"block_id":"%s","delta":%s}' % (block, rng.choice(pool))
                )
            yield f(b"agent.text.done", b'{"block_id":"%s"}' % block)
            yield f(
                b"session.turn.end",
                b'{"turn_id":"%s","stop_reason":"end_turn","tool_invocation_count":1}' % turn_id,
            )
            yield f(b"session.usage", _USAGE + b',"turn_id":"%s"}' % turn_id)
            self.turn_index += 1


def stamp_ns(frame: bytes, ns: int) -> bytes:
    """``frame`` with an extra envelope key ``"bt": ns`` (relayed untouched)."""
    return b'%s,"bt":%d}' % (frame[:-1], ns)


def read_stamp(data: bytes) -> int | None:
    """The ``"bt"`` stamp of a delivered frame, or None."""
    i = data.rfind(b'"bt":')
    if i < 0:
        return None
    i += 5
    j = i
    n = len(data)
    while j < n and 48 <= data[j] <= 57:
        j += 1
    return int(data[i:j]) if j > i else None


def frame_type(data: bytes) -> bytes:
    """The ``type`` of a frame whose first key is ``type`` (every frame here and the master's)."""
    if data.startswith(b'{"type":"'):
        end = data.find(b'"', 9)
        return data[9:end]
    return b""


def hello(
    session_id: str,
    role: str,
    token: str,
    *,
    participant_id: str | None = None,
    resume: dict[str, Any] | None = None,
    buffer: dict[str, Any] | None = None,
    create: bool = False,
    version: str = "1.0.2",
    presence: bool | None = None,
) -> bytes:
    """A ``connection.hello`` envelope (``presence`` False: declined, docs/protocol.md §5)."""
    payload: dict[str, Any] = {"protocol_version": version, "role": role, "token": token}
    if participant_id:
        payload["participant_id"] = participant_id
    if resume is not None:
        payload["resume"] = resume
    if buffer is not None:
        payload["buffer"] = buffer
    if create:
        payload["create"] = {"name": "bench"}
    if presence is not None:
        payload["presence"] = presence
    return _enc.encode(
        {
            "type": "connection.hello",
            "message_id": str(uuid.uuid4()),
            "session_id": session_id,
            "timestamp": TIMESTAMP,
            "payload": payload,
        }
    )
