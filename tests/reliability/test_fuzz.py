"""Fuzzing the master (short run; ``make bench ARGS=fuzz`` runs ≥ 1,000,000 inputs).

A master and an in-process fuzz harness run on an event loop in a background thread for the
whole module, with a control session whose client streams to its edge over real sockets.
Hypothesis draws malformed frames, wrong types, huge and deep JSON, invalid UTF-8, binary
messages, first frames and hellos; each goes (a) through the real endpoint handler, session
worker, state machine and store in process, and (b) over a socket. The master must answer
every input with a ``session.error`` or a close code, never raise, keep its state equal to a
replay of its log, keep answering ``/healthz`` — and the control stream must flow with no
gap the whole time (checked last, :func:`test_zz_master_survived_and_control_stream_had_no_gap`).

Crashes that match a known, reported bug (:data:`tests.reliability.fuzzing.KNOWN_BUGS`)
are tolerated here and pinned by a strict xfail, so the suite turns red when a new crash
appears and when the known bug is fixed (then delete its entry).
"""

from __future__ import annotations

import asyncio
import json
import struct
import threading
import time
import urllib.request
import uuid
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from bench._wsraw import CLOSE, CONT, PING, TEXT, RawWS, encode_frame, open_raw
from protocol import codec
from protocol.errors import ProtocolError
from relay.config import Settings
from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.reliability.fuzzing import (
    TARGET,
    InProcessFuzzer,
    Mutator,
    as_message,
    expected_code,
    frames,
    known_bug,
    valid_corpus,
)
from tests.support.wire import envelope

T = TypeVar("T")

# Answers a hello may get: the welcome, or one of these close codes (1009: over the size
# limit, 1007: invalid UTF-8, 1002: broken framing; 1000 after a fuzzed delete request).
HANDSHAKE_CLOSES = {4400, 4401, 4403, 4404, 4408, 4409, 4410, 4426, 1009}
KNOWN_CRASH_CLOSE = 1011  # what the known codec bug looks like from the socket


class Background:
    """An event loop in a thread: the master, the fuzz harness, the control stream."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.master: Master | None = None
        self.fuzzer: InProcessFuzzer | None = None
        self.control_sent = 0
        self.control_seen = 0
        self.control_gaps: list[str] = []
        self.known_hits: list[str] = []
        self._stop = asyncio.Event()
        self._control: asyncio.Future[None] | None = None

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> None:
        self.thread.start()
        self.run(self._start())

    async def _start(self) -> None:
        self._stop = asyncio.Event()
        base = Settings(
            host="127.0.0.1",
            ws_port=0,
            http_port=0,
            api_keys=(f"default:{API_KEY}",),
            reattach_window_s=60.0,
            hello_timeout_s=2.0,
            node_id="m-fuzz",
            max_frame_bytes=256 * 1024,
            rate_frames_per_s=1e6,
            rate_bytes_per_s=1e10,
        )
        self.master = Master(base)
        await self.master.start()
        self.fuzzer = InProcessFuzzer()
        await self.fuzzer.__aenter__()
        ready = asyncio.Event()
        self._control = asyncio.ensure_future(self._control_stream(ready))
        await asyncio.wait_for(ready.wait(), 10)

    async def _control_stream(self, ready: asyncio.Event) -> None:
        """Client → edge in session s-fuzz-sock-control, 100 frames/s, every seq checked."""
        assert self.master is not None
        sid = "s-fuzz-sock-control"

        def hello(role: str, **p: Any) -> bytes:
            body = {"protocol_version": "1.0.2", "role": role, "token": API_KEY, **p}
            return json.dumps(envelope(sid, "connection.hello", body)).encode()

        client = await open_raw("127.0.0.1", self.master.ws_port)
        client.send_text(hello("client", create={"name": "control"}))
        await client.recv()
        last = [0]

        def on_edge(data: bytes) -> None:
            frame = json.loads(data)
            if frame["type"] == "session.presence":
                last[0] = frame["seq"]
                return
            self.control_seen += 1
            if frame["seq"] != last[0] + 1:
                self.control_gaps.append(f"seq {frame['seq']} after {last[0]}")
            last[0] = frame["seq"]

        edge = await open_raw("127.0.0.1", self.master.ws_port)
        edge.send_text(hello("edge"))
        welcome = json.loads(await edge.recv())
        last[0] = welcome["payload"]["session"]["head_seq"] + 1  # its own presence: not sent
        edge.on_message = on_edge
        ready.set()
        while not self._stop.is_set():
            frame = envelope(sid, "agent.state", {"state": "thinking"})
            client.send_text(json.dumps(frame).encode())
            self.control_sent += 1
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        await client.close()
        await edge.close()

    def stop(self) -> None:
        async def _stop() -> None:
            self._stop.set()
            if self._control is not None:
                await self._control
            if self.fuzzer is not None:
                await self.fuzzer.__aexit__(None, None, None)
            if self.master is not None:
                await self.master.stop()

        try:
            self.run(_stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


@pytest.fixture(scope="module")
def bg() -> Iterator[Background]:
    background = Background()
    background.start()
    try:
        yield background
    finally:
        background.stop()


def _check_fuzz_stats(bg: Background) -> None:
    assert bg.fuzzer is not None
    stats = bg.fuzzer.stats
    unknown = [c for c in stats.crashes if known_bug(c) is None]
    bg.known_hits += [c for c in stats.crashes if known_bug(c) is not None]
    stats.crashes.clear()
    assert not unknown, unknown
    assert stats.replay_mismatches == 0, stats.mismatch_examples
    assert stats.control_gaps == 0


# --- in process: the real handler, worker, state machine and store ---------------------------


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(inputs=st.lists(frames(TARGET), min_size=1, max_size=25))
def test_hypothesis_frames_through_the_session_path(bg: Background, inputs: list[bytes]) -> None:
    """Every Hypothesis input goes through the endpoint handler and the session worker."""
    assert bg.fuzzer is not None
    bg.run(bg.fuzzer.feed(inputs))
    _check_fuzz_stats(bg)


def test_mutated_frames_through_the_session_path(bg: Background) -> None:
    """20,000 seeded mutations of valid frames (the bench runs 1,000,000)."""
    assert bg.fuzzer is not None
    mutator = Mutator(20261129, valid_corpus(TARGET))
    before = bg.fuzzer.stats.inputs
    bg.run(bg.fuzzer.run(iter(mutator), before + 20_000), timeout=120)
    assert bg.fuzzer.stats.inputs - before >= 20_000
    assert sum(bg.fuzzer.stats.errors.values()) > 1000  # the master answered them
    _check_fuzz_stats(bg)


def test_codec_raises_only_protocol_errors() -> None:
    """codec.decode on raw bytes (invalid UTF-8 included) raises nothing but ProtocolError."""
    mutator = Mutator(7, valid_corpus(TARGET))
    escaped: dict[str, int] = {}
    for _ in range(20_000):
        data = mutator.next()
        try:
            codec.decode(data)
        except ProtocolError:
            pass
        except Exception as exc:
            escaped[type(exc).__name__] = escaped.get(type(exc).__name__, 0) + 1
    unknown = {k: v for k, v in escaped.items() if known_bug(k) is None}
    assert not unknown, unknown


def test_unknown_type_with_malformed_json_is_invalid_frame() -> None:
    """An unknown type followed by malformed JSON is invalid_frame, not an escaped DecodeError."""
    with pytest.raises(ProtocolError):
        codec.decode(b'{"type":"x.unknown","message_id":"m" garbage')


# --- over a socket -----------------------------------------------------------------------------


def _connect(bg: Background) -> ClientConnection:
    assert bg.master is not None
    return connect(bg.master.ws_url, subprotocols=["rawp.1"], max_size=None, open_timeout=5)  # type: ignore[list-item]


def _hello(session_id: str, role: str = "client", **payload: Any) -> str:
    body = {"protocol_version": "1.0.2", "role": role, "token": API_KEY, **payload}
    return json.dumps(envelope(session_id, "connection.hello", body))


def _next_error(ws: ClientConnection) -> dict[str, Any]:
    while True:
        frame: dict[str, Any] = json.loads(ws.recv(timeout=5))
        if frame["type"] == "session.error" and frame["sender"]["role"] == "master":
            return frame


def _drain(ws: ClientConnection) -> None:
    while True:
        ws.recv(timeout=5)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(inputs=st.lists(frames("s-fuzz-sock"), min_size=1, max_size=12))
def test_hypothesis_frames_over_a_socket(bg: Background, inputs: list[bytes]) -> None:
    """After a hello, every input the codec refuses is answered with its session.error code
    (frames that decode are judged by the state machine: any answer, or none), or the
    connection is closed with a code."""
    from collections import Counter

    sid = f"s-fz-{uuid.uuid4().hex[:10]}"
    owed: Counter[str] = Counter()
    got: Counter[str] = Counter()
    with _connect(bg) as ws:
        ws.send(_hello(sid, create={"name": "fuzz"}))
        assert json.loads(ws.recv(timeout=5))["type"] == "connection.welcome"
        try:
            for data in inputs:
                message = as_message(data.replace(b"s-fuzz-sock", sid.encode()))
                code = expected_code(message)
                ws.send(message)
                if code is not None and code.startswith("crash:"):
                    assert known_bug(code), code
                    with pytest.raises(ConnectionClosed):
                        _drain(ws)
                    assert ws.close_code == KNOWN_CRASH_CLOSE
                    bg.known_hits.append(code)
                    return
                if code is not None:
                    owed[code] += 1
            # Drain every answer: quiet for 0.3 s after the last one.
            while True:
                try:
                    frame = json.loads(ws.recv(timeout=0.3))
                except TimeoutError:
                    break
                if frame["type"] == "session.error" and frame["sender"]["role"] == "master":
                    got[frame["payload"]["error_code"]] += 1
        except ConnectionClosed:
            # 1009: over max_frame_bytes; 1000: the fuzz asked to delete the session.
            assert ws.close_code in (1000, 1009), ws.close_code
            return
    assert not owed - got, f"unanswered: {owed - got} (answers {got})"


_versions = st.sampled_from(
    ["1.0.2", "1.0.0", "1.0.99", "1.1.0", "2.0.0", "0.9", "1", ""]
) | st.text(max_size=12)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    first=st.one_of(
        frames("s-fuzz-hs"),
        st.builds(
            lambda v, r, t, c: _hello(
                "s-fuzz-hs", role=r, protocol_version=v, token=t, **c
            ).encode(),
            _versions,
            st.sampled_from(["client", "edge", "master", ""]),
            st.sampled_from([API_KEY, "rk_nope", "st_nope", "x" * 300]),
            st.sampled_from([{}, {"create": {"name": "hs"}}, {"participant_id": "p-x"}]),
        ),
    ),
    again=st.integers(min_value=0, max_value=3),
)
def test_handshake_abuse_over_a_socket(bg: Background, first: bytes, again: int) -> None:
    """Garbage first frames, wrong versions, bad credentials, repeated hellos: answered."""
    with _connect(bg) as ws:
        ws.send(as_message(first))
        try:
            reply = json.loads(ws.recv(timeout=5))
        except ConnectionClosed:
            if ws.close_code == KNOWN_CRASH_CLOSE:
                bg.known_hits.append("handshake 1011")
                return
            assert ws.close_code in HANDSHAKE_CLOSES, ws.close_code
            return
        assert reply["type"] == "connection.welcome"
        for _ in range(again):  # a second hello on an attached connection
            ws.send(first.decode())
            assert _next_error(ws)["payload"]["error_code"] == "invalid_frame"


def _raw(bg: Background, write: bytes | None, *, hello_first: bool = True) -> int | None:
    async def go() -> int | None:
        assert bg.master is not None
        ws: RawWS = await open_raw("127.0.0.1", bg.master.ws_port)
        if hello_first:
            ws.send_text(_hello(f"s-raw-{uuid.uuid4().hex[:8]}", create={}).encode())
            await ws.recv()
        if write is not None:
            ws.write_raw(write)
        code = await ws.wait_closed(timeout=10)
        return code

    return bg.run(go())


RAW_CASES = {
    "invalid UTF-8 in a text frame": (encode_frame(TEXT, b'{"type":"\xff\xfe"}'), 1007),
    "reserved opcode 0x3": (encode_frame(0x3, b"x"), 1002),
    "RSV1 without an extension": (encode_frame(TEXT, b"{}", rsv=4), 1002),
    "unmasked client frame": (encode_frame(TEXT, b"{}", mask=False), 1002),
    "continuation without a start": (encode_frame(CONT, b"x"), 1002),
    "fragmented ping": (encode_frame(PING, b"x", fin=False), 1002),
    "ping over 125 bytes": (encode_frame(PING, b"x" * 200), 1002),
    "close with an invalid code": (encode_frame(CLOSE, struct.pack("!H", 999)), 1002),
    "a frame over max_frame_bytes": (encode_frame(TEXT, b"x" * (300 * 1024)), 1009),
}


@pytest.mark.parametrize("case", list(RAW_CASES))
def test_broken_framing_is_closed_with_its_code(bg: Background, case: str) -> None:
    """What the websockets client cannot send: each closes with the RFC 6455 code."""
    data, code = RAW_CASES[case]
    assert _raw(bg, data) == code


@pytest.mark.parametrize(
    ("request_text", "status"),
    [
        (b"GARBAGE\r\n\r\n", None),  # not HTTP: the connection is just closed
        (
            b"GET /elsewhere HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
            404,
        ),
        (b"GET /v1/ws HTTP/1.1\r\nHost: x\r\n\r\n", 426),
        (
            b"GET /v1/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Version: 13\r\n\r\n",
            400,
        ),
        (
            b"GET /v1/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
            b"Sec-WebSocket-Protocol: other.2\r\n\r\n",
            400,
        ),
    ],
)
def test_handshake_requests_are_refused_with_a_status(
    bg: Background, request_text: bytes, status: int | None
) -> None:
    """Broken upgrade requests get an HTTP error status (or a close), never a hang."""

    async def go() -> bytes:
        assert bg.master is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", bg.master.ws_port)
        writer.write(request_text)
        head = await asyncio.wait_for(reader.read(200), 5)
        writer.close()
        return head

    head = bg.run(go())
    if status is None:
        assert head == b"" or head.startswith(b"HTTP/1.1 4"), head[:60]
    else:
        assert head.startswith(b"HTTP/1.1 %d" % status), head[:60]


def test_zz_master_survived_and_control_stream_had_no_gap(bg: Background) -> None:
    """Last: /healthz answers, the control stream flowed throughout with no gap."""
    assert bg.master is not None
    with urllib.request.urlopen(bg.master.http_url + "/healthz", timeout=5) as response:
        assert response.status == 200
    time.sleep(0.2)
    assert bg.control_sent > 0
    assert bg.control_seen >= bg.control_sent - 5  # the last few may still be in flight
    assert not bg.control_gaps, bg.control_gaps[:5]
    _check_fuzz_stats(bg)
    # No crash at all: every input got an error code or a close code.
    assert not bg.known_hits, bg.known_hits[:5]
