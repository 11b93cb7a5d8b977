"""One WebSocket connection's life in relay/ws.py: fragments, keepalive, close, shutdown."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from bench._wsraw import (
    BINARY,
    CLOSE,
    CONT,
    PING,
    TEXT,
    HandshakeFailed,
    RawWS,
    encode_frame,
    open_raw,
)
from relay.server import Master
from tests.e2e.util import hello, new_session, wait_until
from tests.support.wire import envelope

__all__: list[str] = []


async def _raw_peer(master: Master, session_id: str, **payload: Any) -> RawWS:
    """A raw connection attached to ``session_id`` (its welcome read)."""
    ws = await open_raw("127.0.0.1", master.ws_port)
    ws.send_text(hello(session_id, **payload).encode())
    welcome = json.loads(await ws.recv())
    assert welcome["type"] == "connection.welcome", welcome
    return ws


async def _hello_and_messages(
    master: Master, session_id: str, texts: list[str]
) -> tuple[RawWS, list[dict[str, Any]]]:
    """A new edge's hello and a user.message per text, all in one write (before any welcome)."""
    ws = await open_raw("127.0.0.1", master.ws_port)
    frames = [envelope(session_id, "user.message", {"text": text}) for text in texts]
    ws.send_many(
        [hello(session_id, role="edge").encode(), *(json.dumps(f).encode() for f in frames)]
    )
    return ws, frames


def _fragments(data: bytes, parts: int) -> list[tuple[int, bytes, bool]]:
    """``data`` as a text message in ``parts`` fragments: (opcode, payload, fin)."""
    size = -(-len(data) // parts)
    pieces = [data[i : i + size] for i in range(0, len(data), size)]
    return [
        (TEXT if i == 0 else CONT, piece, i == len(pieces) - 1) for i, piece in enumerate(pieces)
    ]


async def test_a_fragmented_message_is_relayed_as_one_frame(master: Master) -> None:
    """Fragments (RFC 6455 §5.4) are one message: logged once, relayed whole."""
    _client, (edge,) = await new_session(master, "s-conn-frag")
    frame = envelope("s-conn-frag", "user.message", {"text": "é" * 3000})
    data = json.dumps(frame).encode()
    ws = await _raw_peer(master, "s-conn-frag", role="edge")
    for opcode, piece, fin in _fragments(data, 4):
        ws.write_frame(opcode, piece, fin=fin)
    got = await edge.recv_until(lambda f: f["type"] == "user.message")
    assert got[-1]["message_id"] == frame["message_id"]
    assert got[-1]["payload"]["text"] == "é" * 3000
    await ws.close()


async def test_fragments_over_max_frame_bytes_close_1009(make_master: Any) -> None:
    """The limit is the message's, not each fragment's: 3 × 2,000 bytes over 4,096 close 1009."""
    master: Master = await make_master(max_frame_bytes=4096)
    await new_session(master, "s-conn-big")
    ws = await _raw_peer(master, "s-conn-big", role="edge")
    for opcode, piece, fin in _fragments(b"x" * 6000, 3):
        ws.write_frame(opcode, piece, fin=fin)
    assert await ws.wait_closed(timeout=10) == 1009


async def test_a_message_started_inside_a_fragmented_one_closes_1002(master: Master) -> None:
    """A new text frame before the last fragment of the one in progress is a protocol error."""
    await new_session(master, "s-conn-nested")
    ws = await _raw_peer(master, "s-conn-nested", role="edge")
    ws.write_frame(TEXT, b'{"type":', fin=False)
    ws.write_frame(TEXT, b"{}")
    assert await ws.wait_closed(timeout=10) == 1002


async def test_a_silent_peer_that_answers_pings_stays_attached(make_master: Any) -> None:
    """A quiet connection is pinged after the heartbeat interval; answering keeps it attached."""
    master: Master = await make_master(heartbeat_interval_s=0.2, heartbeat_timeout_s=0.2)
    client, _ = await new_session(master, "s-conn-quiet", edges=0)
    ws = await _raw_peer(master, "s-conn-quiet", role="edge")
    before = ws.bytes_received
    await asyncio.sleep(1.5)  # several intervals without a byte from the edge
    assert ws.bytes_received > before  # pings reached it (RawWS answers each with a pong)
    assert ws.open
    assert len(master.hub.sessions["s-conn-quiet"].participants) == 2
    await ws.close()
    await client.close()


async def test_a_peer_that_does_not_answer_pings_is_closed_1011_and_detached(
    make_master: Any,
) -> None:
    """No pong within the heartbeat timeout: closed 1011 (RFC 6455 §7.4.1), then detached."""
    master: Master = await make_master(heartbeat_interval_s=0.2, heartbeat_timeout_s=0.2)
    client, _ = await new_session(master, "s-conn-deaf", edges=0)
    ws = await _raw_peer(master, "s-conn-deaf", role="edge")
    participants = master.hub.sessions["s-conn-deaf"].participants
    assert len(participants) == 2
    ws.pause_reading()  # reads nothing, so answers nothing
    gone = await client.recv_until(
        lambda f: f["type"] == "session.presence" and f["payload"]["state"] == "detached", 10
    )
    assert gone[-1]["payload"]["role"] == "edge"
    assert len(participants) == 1
    ws.resume_reading()
    assert await ws.wait_closed(timeout=10) in (1011, 1006)  # 1006: cut before it read it


async def test_a_close_from_the_peer_is_echoed_and_detaches(master: Master) -> None:
    """The peer's close code comes back in the master's close frame; the peer detaches."""
    client, _ = await new_session(master, "s-conn-echo", edges=0)
    ws = await _raw_peer(master, "s-conn-echo", role="edge")
    assert await ws.close(4000) == 4000
    await client.recv_until(
        lambda f: f["type"] == "session.presence" and f["payload"]["state"] == "detached"
    )


async def test_shutdown_closes_every_connection_1001_and_detaches_it(make_master: Any) -> None:
    """Stopping the master closes each connection 1001 and waits for the detaches."""
    master: Master = await make_master()
    await new_session(master, "s-conn-stop", edges=0)
    ws = await _raw_peer(master, "s-conn-stop", role="edge")
    session = master.hub.sessions["s-conn-stop"]
    await master.stop()
    assert await ws.wait_closed(timeout=5) == 1001
    assert not master.ws_connections
    assert not session.participants  # detached before stop() returned


async def test_frames_read_while_attaching_follow_the_attach_in_order(master: Master) -> None:
    """Frames sent right behind the hello, before the welcome, are kept and handled in order."""
    client, (edge,) = await new_session(master, "s-conn-early")
    ws, frames = await _hello_and_messages(master, "s-conn-early", [f"m{i}" for i in range(80)])
    got = await edge.recv_until(
        lambda f: f.get("message_id") == frames[-1]["message_id"], timeout=10
    )
    texts = [f["payload"]["text"] for f in got if f["type"] == "user.message"]
    assert texts == [f"m{i}" for i in range(80)]
    await wait_until(lambda: len(master.hub.sessions["s-conn-early"].participants) == 3)
    await ws.close()
    await client.close()


async def test_what_a_peer_sent_before_closing_while_attaching_is_kept(master: Master) -> None:
    """Hello, frames and a close in one write: the frames are logged, then the peer detaches."""
    client, (edge,) = await new_session(master, "s-conn-brief")
    ws, frames = await _hello_and_messages(master, "s-conn-brief", ["b0", "b1", "b2"])
    ws.write_frame(CLOSE, (1000).to_bytes(2, "big"))
    got = await edge.recv_until(lambda f: f.get("message_id") == frames[-1]["message_id"])
    assert [f["payload"]["text"] for f in got if f["type"] == "user.message"] == ["b0", "b1", "b2"]
    await wait_until(lambda: len(master.hub.sessions["s-conn-brief"].participants) == 2)
    await client.close()


async def test_a_peer_breaking_the_framing_is_logged_as_info_not_error(
    master: Master, caplog: pytest.LogCaptureFixture
) -> None:
    """A peer's broken frame is the peer's fault: info in the log, never an error line."""
    caplog.set_level(logging.INFO, logger="rawp.ws.wire")
    ws = await open_raw("127.0.0.1", master.ws_port)
    ws.write_raw(encode_frame(TEXT, b"{}", mask=False))
    assert await ws.wait_closed(timeout=10) == 1002
    wire = [r for r in caplog.records if r.name == "rawp.ws.wire"]
    assert any("un-masked" in r.getMessage() and r.levelno == logging.INFO for r in wire)
    assert not [r for r in wire if r.levelno >= logging.ERROR]


async def test_pings_from_a_peer_that_does_not_read_do_not_grow_the_write_buffer(
    master: Master,
) -> None:
    """Pongs are written only while the peer takes what is written: a ping flood from a peer
    that reads nothing leaves the master's write buffer near its limit, not growing with it."""
    await new_session(master, "s-conn-pings", edges=0)
    ws = await open_raw("127.0.0.1", master.ws_port, rcvbuf=4096)
    ws.send_text(hello("s-conn-pings", role="edge").encode())
    await wait_until(lambda: len(master.hub.sessions["s-conn-pings"].participants) == 2)
    (connection,) = [
        c
        for c in master.ws_connections
        if c.participant is not None and c.participant.role == "edge"
    ]
    ws.pause_reading()
    batch = b"".join(encode_frame(PING, b"p" * 125) for _ in range(1000))  # 127 KB of pongs owed
    for _ in range(400):  # until the kernel's buffers are full and the transport pauses
        ws.write_raw(batch)
        await asyncio.sleep(0.005)
        if connection.paused:
            break
    assert connection.paused  # the peer's window and the kernel's buffers are full
    for _ in range(40):  # 5 MB more of pings, none of them answered now
        ws.write_raw(batch)
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.2)
    assert connection.buffered <= 64 * 1024
    ws.abort()


async def test_an_upgrade_while_the_master_shuts_down_is_refused_503(master: Master) -> None:
    """Once the shutdown has begun, an upgrade gets HTTP 503 rather than a connection."""
    endpoint = master._ws_endpoint
    assert endpoint is not None
    endpoint.closing = True
    with pytest.raises(HandshakeFailed) as refused:
        await open_raw("127.0.0.1", master.ws_port)
    assert refused.value.status == 503
    endpoint.closing = False


async def test_binary_messages_count_against_the_rate_limit(make_master: Any) -> None:
    """A flood of binary messages is rate limited like text ones, and closed 1008."""
    master: Master = await make_master(
        rate_frames_per_s=2.0, rate_burst_s=1.0, rate_strikes_to_close=3
    )
    await new_session(master, "s-conn-binary", edges=0)
    ws = await _raw_peer(master, "s-conn-binary", role="edge")
    for _ in range(50):
        ws.write_frame(BINARY, b"\x00\x01")
    assert await ws.wait_closed(timeout=10) == 1008
    codes = [json.loads(m)["payload"]["error_code"] for m in ws.messages]
    assert codes.count("unsupported_data") <= 2  # the burst's; then rate_limited, then 1008
    assert "rate_limited" in codes
