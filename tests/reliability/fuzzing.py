"""Malformed input for the master, and an in-process harness that feeds it the real path.

Used by the short fuzz tests (:mod:`tests.reliability.test_fuzz`) and by ``make bench``'s
long run (:mod:`bench.fuzz`, ≥ 1,000,000 inputs).

* :func:`frames` — a Hypothesis strategy of WebSocket messages: envelopes with every field
  of a random JSON type, wrong and unknown types, random bytes and text, deep and huge JSON,
  invalid UTF-8, mutated valid frames (``bytes`` = a binary message when not UTF-8).
* :class:`Mutator` — a seeded, fast mutational fuzzer over a corpus of valid frames (the
  test vectors and a realistic agent stream) and of Hypothesis examples: byte flips,
  truncation, splices, JSON-level type confusion and key removal, keys twice, deep nesting,
  huge strings, invalid UTF-8, foreign session ids — and valid frames, so the state machine moves.
* :class:`InProcessFuzzer` — a :class:`relay.hub.Hub` on a memory store with real
  :class:`relay.ws.Connection` objects on in-memory sockets: every input goes through the
  connection's message path, the codec, the session's inbox, worker, state machine, store and
  fan-out, exactly as from a socket (only the WebSocket framing of what comes in is not
  exercised — the socket fuzz does that). It counts the master's answers, fails on any
  exception that escapes a connection or the worker, checks that the session's state equals
  a replay of its log, and keeps a control session streaming from a client to an edge with
  no gap.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import structlog
from hypothesis import strategies as st

from protocol import codec
from protocol.errors import ProtocolError
from protocol.frames import frame_types
from relay.ws import Connection, WebSocketEndpoint

__all__ = [
    "CONTROL",
    "KNOWN_BUGS",
    "TARGET",
    "FuzzStats",
    "InProcessFuzzer",
    "Mutator",
    "expected_code",
    "frames",
    "known_bug",
    "same_view",
    "valid_corpus",
    "view_key",
]

VECTORS: Final = Path(__file__).resolve().parent.parent / "vectors"
CONTROL: Final = "s-fuzz-control"
TARGET: Final = "s-fuzz-target"  # every fuzzed session has this id (re-created after delete)
TYPES: Final = sorted(frame_types())
_TS: Final = "2026-11-29T09:00:00.123Z"


# --- the corpus ------------------------------------------------------------------------------


def valid_corpus(session_id: str) -> list[bytes]:
    """Valid frames for ``session_id``: every valid test vector and a turn of agent stream."""
    out: list[bytes] = []
    for path in sorted(VECTORS.glob("*/valid-*.json")):
        frame = json.loads(path.read_text())["frame"]
        frame["session_id"] = session_id
        if isinstance(frame.get("payload"), dict) and "session_id" in frame["payload"]:
            frame["payload"]["session_id"] = session_id
        out.append(json.dumps(frame).encode())
    from bench._workload import AgentStream

    out += AgentStream(session_id, prefix="c-" + uuid.uuid4().hex[:6]).take(70)
    return out


def expected_code(message: bytes | str) -> str | None:
    """The session.error code the master must answer ``message`` with after the hello,
    judged by the codec alone (None: it decodes, the state machine decides)."""
    if isinstance(message, bytes):
        return "unsupported_data"
    try:
        codec.decode_received(message.encode())  # as the master decodes what it relays
    except ProtocolError as exc:
        return exc.code
    except Exception as exc:  # the codec itself fails: a known bug or a new one
        return f"crash:{type(exc).__name__}"
    return None


def as_message(data: bytes) -> bytes | str:
    """What a WebSocket peer would deliver: text when ``data`` is UTF-8, else binary."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


# --- Hypothesis ------------------------------------------------------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
json_values = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=16,
)


def _envelopes(session_id: str) -> st.SearchStrategy[dict[str, Any]]:
    plausible = {
        "type": st.sampled_from(TYPES) | st.text(max_size=30) | json_values,
        "message_id": st.uuids().map(str) | st.text(max_size=300) | json_values,
        "session_id": st.just(session_id) | st.text(max_size=20) | json_values,
        "timestamp": st.just(_TS) | st.text(max_size=40) | json_values,
        "seq": st.integers(min_value=-5, max_value=2**64) | json_values,
        "sender": st.fixed_dictionaries(
            {"role": st.sampled_from(["client", "edge", "master", "x"])}
        )
        | json_values,
        "metadata": st.fixed_dictionaries(
            {}, optional={"synthetic": st.booleans(), "ignorable": st.booleans()}
        )
        | json_values,
        "payload": st.dictionaries(
            st.sampled_from(
                [
                    "block_id",
                    "delta",
                    "turn_id",
                    "turn_index",
                    "call_id",
                    "tool_name",
                    "input",
                    "status",
                    "state",
                    "text",
                    "interaction_id",
                    "kind",
                    "prompt",
                    "name",
                    "renamed_by",
                    "reason",
                    "deleted_by",
                    "error_code",
                    "message",
                    "fatal",
                    "frames",
                    "buffer_status",
                    "protocol_version",
                    "role",
                    "token",
                ]
            ),
            json_values,
            max_size=6,
        )
        | json_values,
    }
    return st.fixed_dictionaries({}, optional=plausible)


def frames(session_id: str) -> st.SearchStrategy[bytes]:
    """WebSocket message bodies, mostly malformed (see the module docstring)."""
    encoded = _envelopes(session_id).map(lambda e: json.dumps(e).encode())
    deep = st.integers(min_value=1, max_value=20_000).map(lambda d: b"[" * d + b"]" * d)
    deep_object = st.integers(min_value=1, max_value=3_000).map(
        lambda d: (
            b'{"type":"agent.text.delta","message_id":"m","session_id":"%s","timestamp":"%s",'
            b'"payload":'
            % (session_id.encode(), _TS.encode())
            + b'{"a":' * d
            + b"1"
            + b"}" * d
            + b"}"
        )
    )
    huge = st.integers(min_value=1_000, max_value=200_000).map(
        lambda n: json.dumps(
            {
                "type": "agent.text.delta",
                "message_id": "h",
                "session_id": session_id,
                "timestamp": _TS,
                "payload": {"block_id": "b", "delta": "x" * n},
            }
        ).encode()
    )
    bad_utf8 = st.binary(min_size=1, max_size=20).map(
        lambda b: (
            b'{"type":"user.message","message_id":"u","session_id":"'
            + b"\xff\xfe"
            + b'","payload":{"text":"'
            + b
            + b'"}}'
        )
    )
    mutated = st.builds(
        lambda seed: Mutator(seed, valid_corpus(session_id)).next(),
        st.integers(min_value=0, max_value=2**32),
    )
    return st.one_of(
        encoded,
        st.binary(max_size=300),
        st.text(max_size=300).map(str.encode),
        deep,
        deep_object,
        huge,
        bad_utf8,
        mutated,
        json_values.map(lambda v: json.dumps(v).encode()),
    )


# --- the fast mutator ----------------------------------------------------------------------

_NASTY: Final = (
    b"\xff",
    b"\xfe",
    b"\xc0\x80",
    b"\xed\xa0\x80",
    b"\x00",
    b'"',
    b"\\",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"NaN",
    b"Infinity",
    b"-0",
    b"1e999",
    b"\\u0000",
    b"\\ud800",
    b"null",
)


class Mutator:
    """Seeded mutations of a corpus (see the module docstring)."""

    def __init__(
        self,
        seed: int,
        corpus: list[bytes],
        *,
        session_id: str = TARGET,
        other_session: str = CONTROL,
    ) -> None:
        from bench._workload import AgentStream

        self.rng = random.Random(seed)
        self.corpus = corpus
        self.objects = [json.loads(f) for f in corpus]
        self.other_session = other_session
        self.count = 0
        self.stream = AgentStream(session_id, seed=seed, prefix=f"fz{seed}")

    def __iter__(self) -> Iterator[bytes]:
        while True:
            yield self.next()

    def next(self) -> bytes:
        self.count += 1
        rng = self.rng
        base = rng.choice(self.corpus)
        op = rng.randrange(16)
        if op == 0:
            b = bytearray(base)
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            return bytes(b)
        if op == 1:
            return base[: rng.randrange(len(base))]
        if op == 2:
            i = rng.randrange(len(base) + 1)
            return base[:i] + rng.choice(_NASTY) * rng.randint(1, 3) + base[i:]
        if op == 3:
            i = rng.randrange(len(base))
            j = min(len(base), i + rng.randint(1, 20))
            return base[:i] + base[j:]
        if op == 4:
            other = rng.choice(self.corpus)
            return base[: rng.randrange(len(base))] + other[rng.randrange(len(other)) :]
        if op in (5, 6, 7):
            return self._json_mutation()
        if op == 8 and rng.random() < 0.3:
            # A key twice: validated with one value, read with the other by some parsers.
            key = rng.choice((b"payload", b"type", b"message_id", b"seq", b"sender"))
            return base[:-1] + b',"' + key + b'":' + rng.choice((b"{}", b"null", b'"x"')) + b"}"
        if op == 8:
            depth = rng.choice((10, 100, 1000, 5000, 50_000))
            return base[:-1] + b',"deep":' + b"[" * depth + b"]" * depth + b"}"
        if op == 9:
            obj = dict(rng.choice(self.objects))
            obj["message_id"] = str(uuid.UUID(int=rng.getrandbits(128)))
            payload = dict(obj.get("payload") or {})
            payload[rng.choice(("delta", "text", "zz"))] = "y" * rng.choice((1000, 60_000, 300_000))
            obj["payload"] = payload
            return json.dumps(obj).encode()
        if op == 10:
            return base.replace(b'"type":"', b'"type":"' + rng.choice(_NASTY[:5]), 1)
        if op == 11:
            obj = dict(rng.choice(self.objects))
            obj["session_id"] = self.other_session
            obj["message_id"] = str(uuid.UUID(int=rng.getrandbits(128)))
            return json.dumps(obj).encode()
        if op == 12:
            obj = dict(rng.choice(self.objects))
            obj["type"] = rng.choice([*TYPES, "x.unknown", "", "agent.text"])
            obj["message_id"] = str(uuid.UUID(int=rng.getrandbits(128)))
            if rng.random() < 0.3:
                obj["metadata"] = {"ignorable": True}
            return json.dumps(obj).encode()
        # 13-15: a valid frame, so the state machine moves: the next of an agent stream in
        # order (turns, blocks, tools, usage), or any valid frame with a fresh id
        if op != 15:
            return next(self.stream)
        obj = dict(rng.choice(self.objects))
        obj["message_id"] = str(uuid.UUID(int=rng.getrandbits(128)))
        return json.dumps(obj).encode()

    def _json_mutation(self) -> bytes:
        rng = self.rng
        obj = json.loads(json.dumps(rng.choice(self.objects)))  # a deep copy
        obj["message_id"] = str(uuid.UUID(int=rng.getrandbits(128)))
        holder, key = self._pick(obj)
        action = rng.randrange(4)
        if action == 0 and isinstance(holder, dict):
            holder.pop(key, None)
        elif action == 1:
            holder[key] = self._value()
        elif action == 2 and isinstance(holder, dict):
            holder["x" + str(rng.randrange(100))] = self._value()
        else:
            holder[key] = rng.choice(
                [None, True, -1, 2**64, 1.5, "", "x" * 300, [], {}, [None], {"a": None}]
            )
        return json.dumps(obj).encode()

    def _pick(self, obj: dict[str, Any]) -> tuple[Any, Any]:
        holder: Any = obj
        key: Any = self.rng.choice(list(obj)) if obj else "type"
        for _ in range(self.rng.randint(0, 3)):
            child = holder.get(key) if isinstance(holder, dict) else None
            if isinstance(child, dict) and child:
                holder, key = child, self.rng.choice(list(child))
            else:
                break
        return holder, key

    def _value(self) -> Any:
        rng = self.rng
        kind = rng.randrange(8)
        return [
            None,
            rng.random() < 0.5,
            rng.randint(-(2**40), 2**40),
            rng.random() * 1e6,
            "".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(rng.randint(0, 12))),
            [rng.randint(0, 9)],
            {"k": rng.randint(0, 9)},
            str(uuid.uuid4()),
        ][kind]


# --- the in-process target -------------------------------------------------------------------


class _MemoryTransport:
    """What :class:`relay.ws.Connection` uses of picows' transport and of the asyncio transport
    beneath it, in memory."""

    def __init__(self, owner: FakeConnection) -> None:
        self.owner = owner
        self.underlying_transport = self
        self.request: Any = None  # no HTTP upgrade in memory
        self.response: Any = None
        self.close_handshake: Any = None
        self.is_close_frame_sent = False
        self.reading = asyncio.Event()
        self.reading.set()

    # the asyncio transport's part
    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.owner.written(bytes(data))

    def pause_reading(self) -> None:
        self.reading.clear()

    def resume_reading(self) -> None:
        self.reading.set()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """Nothing is buffered in memory."""

    def get_write_buffer_size(self) -> int:
        return 0

    # picows' part
    def send_close(self, code: int, reason: str = "") -> None:
        self.is_close_frame_sent = True
        self.owner.close_sent(int(code), reason)

    def send(self, kind: object, data: bytes) -> None:
        """Only the echo of a close without a code is sent this way."""

    def send_ping(self) -> None:
        """The keepalive: this peer always answers (nothing to do in memory)."""

    def disconnect(self, graceful: bool = True) -> None:
        self.owner.disconnect()


class FakeConnection:
    """A real :class:`relay.ws.Connection` on an in-memory socket: messages are fed to it as
    the socket would (one at a time, not while it does not read), what it writes is read back
    frame by frame, its close answered at once."""

    def __init__(self, endpoint: WebSocketEndpoint) -> None:
        self.inbox: asyncio.Queue[bytes | str | None] = asyncio.Queue()
        self.sent: list[bytes] = []
        self.keep = 0  # how many sent messages to keep (0: count only)
        self.sent_count = 0
        self.close_code: int | None = None
        self.close_reason = ""
        self.errors: Counter[str] = Counter()
        self.read = 0  # messages the connection took (the hello included)
        self.disconnected = False
        self._unread = b""  # written bytes not yet a whole frame
        self._parts: list[bytes] = []  # a fragmented message so far
        self.transport = _MemoryTransport(self)
        self.connection = Connection(endpoint)
        self.connection.on_ws_connected(self.transport)  # type: ignore[arg-type]
        self.task = asyncio.get_running_loop().create_task(self._pump())

    @property
    def alive(self) -> bool:
        return self.close_code is None and not self.disconnected

    async def _pump(self) -> None:
        while True:
            item = await self.inbox.get()
            if item is None:
                break
            await self.transport.reading.wait()
            if self.disconnected:
                break
            self.read += 1
            if isinstance(item, str):
                self.connection.message(item.encode(), True)
            else:
                self.connection.message(item, False)
        self.disconnect()

    def written(self, data: bytes) -> None:
        """Server frames (unmasked, RFC 6455 §5.2) back into messages."""
        data = self._unread + data
        while len(data) >= 2:
            first, size, at = data[0], data[1] & 0x7F, 2
            if size == 126:
                size, at = int.from_bytes(data[2:4]), 4
            elif size == 127:
                size, at = int.from_bytes(data[2:10]), 10
            if len(data) < at + size:
                break
            self._parts.append(data[at : at + size])
            data = data[at + size :]
            if first & 0x80:  # FIN
                self._message(b"".join(self._parts))
                self._parts.clear()
        self._unread = data

    def _message(self, data: bytes) -> None:
        self.sent_count += 1
        if data.startswith(b'{"type":"session.error"') and b'"role":"master"' in data:
            self.errors[json.loads(data)["payload"]["error_code"]] += 1
        if self.keep:
            self.sent.append(data)
            if len(self.sent) > self.keep:
                del self.sent[: -self.keep]

    def close_sent(self, code: int, reason: str) -> None:
        if self.close_code is None:
            self.close_code = code
            self.close_reason = reason
        # the peer answers with its own close at once, and the socket closes
        asyncio.get_running_loop().call_soon(self.disconnect)

    def disconnect(self) -> None:
        if not self.disconnected:
            self.disconnected = True
            self.transport.reading.set()
            self.connection.on_ws_disconnected(self.transport)  # type: ignore[arg-type]
            self.inbox.put_nowait(None)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """The peer closes: what it sent before is still read, then the socket closes."""
        self.inbox.put_nowait(None)
        await asyncio.wait_for(asyncio.shield(self.task), 10)


KNOWN_BUGS: Final[dict[str, str]] = {
    # signature in the crash text -> a description of the bug; empty while none is known
}


def known_bug(crash: str) -> str | None:
    """The known bug a crash text matches, if any."""
    for signature in KNOWN_BUGS:
        if signature in crash:
            return signature
    return None


class FuzzStats:
    """What the master answered, over a whole run."""

    def __init__(self) -> None:
        self.inputs = 0
        self.binary = 0
        self.errors: Counter[str] = Counter()
        self.closes: Counter[int] = Counter()
        self.sessions = 0
        self.crashes: list[str] = []
        self.control_frames = 0
        self.control_gaps = 0
        self.replay_mismatches = 0
        self.mismatch_examples: list[str] = []
        self.log_entries = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "inputs": self.inputs,
            "binary_messages": self.binary,
            "sessions": self.sessions,
            "error_answers": dict(self.errors.most_common()),
            "closes": {str(k): v for k, v in self.closes.most_common()},
            "crashes": [c for c in self.crashes if known_bug(c) is None][:10],
            "crash_count": sum(1 for c in self.crashes if known_bug(c) is None),
            "known_bug_hits": dict(Counter(known_bug(c) for c in self.crashes if known_bug(c))),
            "control_frames": self.control_frames,
            "control_gaps": self.control_gaps,
            "replay_mismatches": self.replay_mismatches,
            "mismatch_examples": self.mismatch_examples,
            "log_entries": self.log_entries,
        }


class InProcessFuzzer:
    """The real endpoint, connections, hub, sessions and memory store, on in-memory sockets."""

    def __init__(self, **settings: Any) -> None:
        from relay.config import Settings
        from relay.hub import Hub
        from relay.store.memory import MemoryStore

        base = dict(
            api_keys=("default:rk_fuzz",),
            node_id="m-fuzz",
            reattach_window_s=600.0,
            rate_frames_per_s=1e9,
            rate_bytes_per_s=1e12,
            max_edges_per_session=10_000,
        )
        base.update(settings)
        self.settings = Settings(**base)  # type: ignore[arg-type]
        self.hub = Hub(self.settings, MemoryStore())
        self.endpoint = WebSocketEndpoint(self.hub, allowed_origins=frozenset())
        self.stats = FuzzStats()
        self._tasks: list[asyncio.Task[None]] = []
        self._control: tuple[FakeConnection, FakeConnection] | None = None
        self._control_last = 0
        self._control_prefix = uuid.uuid4().hex[:8]

    async def __aenter__(self) -> InProcessFuzzer:
        await self.hub.start()
        client = await self._connect(CONTROL, "client", create=True)
        edge = await self._connect(CONTROL, "edge")
        edge.keep = 10_000
        self._control = (client, edge)
        # both attached and everything of their attaches written (welcome, backlog, presence):
        # a fixed number of loop rounds is not enough on a loaded machine
        async with asyncio.timeout(10):
            while len(getattr(self.hub.sessions.get(CONTROL), "participants", ())) < 2:
                await self._settle(1)
            for participant in self.hub.sessions[CONTROL].participants.values():
                await participant.outbox.drain(5)
        await self._settle()
        self._control_last = await self.hub.store.head_seq(CONTROL)
        edge.sent.clear()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for conn in self._conns():
            await conn.close(1000)
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.hub.stop()

    def _conns(self) -> list[FakeConnection]:
        return list(self._control or ())

    async def _connect(self, session_id: str, role: str, *, create: bool = False) -> FakeConnection:
        conn = FakeConnection(self.endpoint)
        conn.keep = 1
        payload: dict[str, Any] = {"protocol_version": "1.0.2", "role": role, "token": "rk_fuzz"}
        if create:
            payload["create"] = {"name": "fuzz"}
        hello = {
            "type": "connection.hello",
            "message_id": str(uuid.uuid4()),
            "session_id": session_id,
            "timestamp": _TS,
            "payload": payload,
        }
        conn.inbox.put_nowait(json.dumps(hello))
        conn.task.add_done_callback(self._crashed)
        self._tasks.append(conn.task)
        return conn

    def _crashed(self, task: asyncio.Task[None]) -> None:
        # A crash: what the socket's reads run must never raise.
        if not task.cancelled() and task.exception() is not None:
            self.stats.crashes.append(f"handler raised {task.exception()!r}")

    @staticmethod
    async def _settle(rounds: int = 3) -> None:
        for _ in range(rounds):
            await asyncio.sleep(0)
        await asyncio.sleep(0.001)

    async def _quiesce(self, session_id: str, conns: Sequence[FakeConnection]) -> None:
        """Until nothing is on its way into the session's state or log: every input taken,
        the inbox empty, no append in flight, the log's head the session's — a few loop
        rounds in a row. A fixed number of rounds is not enough on a loaded machine, and the
        state may only be compared with a replay of the log once they agree (the pipeline
        folds a batch before its append lands)."""
        steady = 0
        async with asyncio.timeout(10):
            while steady < 3:
                await self._settle()
                session = self.hub.sessions.get(session_id)
                if session is None or session.terminated:
                    return
                idle = (
                    all(c.inbox.empty() for c in conns)
                    and not session.pipeline.queued
                    and not session.pipeline.in_flight
                    and await self.hub.store.head_seq(session_id) == session.head
                )
                steady = steady + 1 if idle else 0

    async def feed(self, inputs: list[bytes]) -> FuzzStats:
        """Feed exactly these inputs (one session) and check; for Hypothesis examples."""
        with structlog.testing.capture_logs() as logs:
            await self._one_session(iter(inputs), len(inputs))
            await self._control_check()
            for entry in logs:
                if entry.get("log_level") in ("error", "exception", "critical"):
                    self.stats.crashes.append(f"logged {entry.get('event')}: {entry}"[:500])
        return self.stats

    async def run(self, inputs: Iterator[bytes], count: int, *, chunk: int = 2000) -> FuzzStats:
        """Feed ``count`` inputs, up to ``chunk`` into one session (a new one after that, or
        when the session was deleted or a connection closed)."""
        stats = self.stats
        with structlog.testing.capture_logs() as logs:
            while stats.inputs < count:
                await self._one_session(inputs, min(chunk, count - stats.inputs))
                await self._control_check()
                bad = [e for e in logs if e.get("log_level") in ("error", "exception", "critical")]
                for entry in bad:
                    stats.crashes.append(f"logged {entry.get('event')}: {entry}"[:500])
                logs.clear()
        return stats

    async def _one_session(self, inputs: Iterator[bytes], n: int) -> None:
        stats = self.stats
        sid = TARGET
        stats.sessions += 1
        client = await self._connect(sid, "client", create=True)
        edge = await self._connect(sid, "edge")
        await self._settle()
        conns = (client, edge)
        for i in range(n):
            conn = conns[i % 2] if i % 7 == 0 else client
            if not conn.alive:
                break
            message = as_message(next(inputs))
            if isinstance(message, bytes):
                stats.binary += 1
            conn.inbox.put_nowait(message)
            if i % 64 == 63:
                await self._settle(1)
        await self._quiesce(sid, conns)
        stats.inputs += sum(max(0, c.read - 1) for c in conns)
        session = self.hub.sessions.get(sid)
        if session is not None and not session.terminated:
            from relay.session import rebuild_state

            log = await self.hub.store.read(sid)
            stats.log_entries += len(log)
            async with session.lock:
                replayed = rebuild_state(log, session.header.name)
                if not same_view(replayed, session.state):
                    stats.replay_mismatches += 1
                    if len(stats.mismatch_examples) < 3:
                        stats.mismatch_examples.append(_state_diff(replayed, session.state, log))
        for conn in conns:
            stats.errors.update(conn.errors)
            if conn.close_code is not None:
                stats.closes[conn.close_code] += 1
            await conn.close(1000)
        await self._settle()
        if session is not None and not session.terminated:
            with contextlib.suppress(Exception):
                await self.hub.delete(sid, reason="master_request", deleted_by="master")

    async def _control_check(self) -> None:
        """The control session's client sends one frame; its edge must get it as head + 1."""
        assert self._control is not None
        client, edge = self._control
        n = self.stats.control_frames
        frame = {
            "type": "agent.state",
            "message_id": f"ctl-{self._control_prefix}-{n}",
            "session_id": CONTROL,
            "timestamp": _TS,
            "payload": {"state": "thinking" if n % 2 else "responding"},
        }
        client.inbox.put_nowait(json.dumps(frame))
        for _ in range(200):
            await self._settle(1)
            got = [m for m in edge.sent if b'"sender":{"role":"client"' in m]
            if got:
                break
        self.stats.control_frames += 1
        got = [m for m in edge.sent if b'"sender":{"role":"client"' in m]
        seqs = [_seq(m) for m in edge.sent]
        if len(got) != 1 or (seqs and seqs[0] != self._control_last + 1):
            self.stats.control_gaps += 1
        if seqs:
            self._control_last = seqs[-1]
        edge.sent.clear()


def view_key(state: Any, *, nested: bool = False) -> Any:
    """A session state as a comparable value, without what differs only by who folded it.

    The master folds its own frames before the store stamps them (no ``seq``/``sender`` yet),
    so its live state marks its finalization "local" and records those frames unstamped,
    while a replay of the log has them stamped; ``plan_history`` reads the flag only for a
    master's backlog, so the two behave the same. Those are projected away here, and so is
    the name inside the pre-finalization snapshot: ``relay.session.rebuild_state`` seeds a
    replay with the header's *current* name, so a rename logged after the finalization shows
    up in the replayed snapshot but not in the live one (unfinalizing re-applies the rename
    either way).
    """
    if state is None:
        return None
    fields = dict(vars(state))
    fields.pop("finalized_locally", None)
    fields["since_finalization"] = [
        (frame.message_id, role) for frame, role in state.since_finalization
    ]
    fields["before_finalization"] = view_key(state.before_finalization, nested=True)
    if nested:
        fields.pop("name", None)
    return fields


def same_view(a: Any, b: Any) -> bool:
    """Two session states agree (see :func:`view_key`)."""
    return bool(a == b or view_key(a) == view_key(b))


def _state_diff(replayed: Any, live: Any, log: list[Any]) -> str:
    a, b = view_key(replayed), view_key(live)
    fields = []
    for k in b:
        if a.get(k) != b.get(k):
            if isinstance(a.get(k), dict) and isinstance(b.get(k), dict):
                inner = [
                    f"{k}.{j}: replay={a[k].get(j)!r:.150} live={b[k].get(j)!r:.150}"
                    for j in b[k]
                    if a[k].get(j) != b[k].get(j)
                ]
                fields += inner or [f"{k}: one side is None"]
            else:
                fields.append(f"{k}: replay={a.get(k)!r:.150} live={b.get(k)!r:.150}")
    tail = [f"{e.seq}:{e.type}/{e.sender_role}" for e in log[-12:]]
    return "; ".join(fields) + f" | log tail {tail}"


def _seq(data: bytes) -> int:
    i = data.rfind(b'"seq":')
    if i < 0:
        return 0
    j = i + 6
    while data[j : j + 1].isdigit():
        j += 1
    return int(data[i + 6 : j])
