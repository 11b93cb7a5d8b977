"""``GET /v1/sessions/{id}/events/stream`` read by a raw HTTP client (no SSE library)."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import struct
from typing import Any
from urllib.parse import urlsplit

import pytest
import structlog

from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.relay.http.conftest import Api, wait_head
from tests.support.presence import refuse_next_presence
from tests.support.wire import Peer, new_turn_id


class RawStream:
    """An SSE stream over a plain socket: request line, headers, then events as they come."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.status = 0
        self.headers: dict[str, str] = {}
        self.comments: list[str] = []
        self._buffer = ""

    @classmethod
    async def open(cls, master: Master, path: str, headers: dict[str, str]) -> RawStream:
        """Send the GET and read the status line and headers."""
        url = urlsplit(master.http_url)
        reader, writer = await asyncio.open_connection(url.hostname, url.port)
        lines = [f"GET {path} HTTP/1.1", f"Host: {url.netloc}", "Accept: text/event-stream"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        await writer.drain()
        stream = cls(reader, writer)
        status_line = (await reader.readline()).decode()
        stream.status = int(status_line.split()[1])
        while (line := (await reader.readline()).decode().strip()) != "":
            name, _, value = line.partition(":")
            stream.headers[name.strip().lower()] = value.strip()
        return stream

    async def _chunks(self) -> str:
        """One chunk of the chunked body ("" at its end)."""
        size_line = await self.reader.readline()
        size = int(size_line.strip() or b"0", 16)
        if size == 0:
            return ""
        data = await self.reader.readexactly(size)
        await self.reader.readexactly(2)
        return data.decode()

    async def next_event(self, timeout: float = 5.0) -> dict[str, Any] | None:
        """The next event as {id, event, data}; None when the stream ended."""
        async with asyncio.timeout(timeout):
            while True:
                while "\n\n" not in self._buffer:
                    chunk = await self._chunks()
                    if chunk == "":
                        return None
                    self._buffer += chunk
                block, self._buffer = self._buffer.split("\n\n", 1)
                event: dict[str, Any] = {}
                for line in block.split("\n"):
                    if line.startswith(":"):
                        self.comments.append(line[1:].strip())
                        continue
                    field, _, value = line.partition(": ")
                    event[field] = value
                if "data" in event:
                    return event

    async def close(self) -> None:
        """Hang up."""
        self.writer.close()
        await self.writer.wait_closed()


def auth(**extra: str) -> dict[str, str]:
    """Headers with the test API key."""
    return {"Authorization": f"Bearer {API_KEY}", **extra}


async def streamed_session(api: Api, master: Master, session_id: str, deltas: int) -> Peer:
    """A session whose client opened a turn and sent ``deltas`` text deltas."""
    client = await Peer.open(master.ws_url, session_id, token=API_KEY, create=True)
    await client.send("session.turn.start", {"turn_id": new_turn_id(), "turn_index": 0})
    for i in range(deltas):
        await client.send("agent.text.delta", {"block_id": "b", "delta": f"{i} "})
    await wait_head(api, session_id, 3 + deltas)  # the turn's session.status (running) too
    return client


async def test_last_event_id_resumes_exactly_after_that_seq(api: Api, master: Master) -> None:
    """With Last-Event-ID: 5 the stream starts at seq 6, every event once, in order."""
    client = await streamed_session(api, master, "s-sse", 8)
    stream = await RawStream.open(
        master, "/v1/sessions/s-sse/events/stream", auth(**{"Last-Event-ID": "5"})
    )
    assert stream.status == 200
    assert stream.headers["content-type"].startswith("text/event-stream")
    events = [await stream.next_event() for _ in range(5)]
    assert [int(e["id"]) for e in events if e] == [6, 7, 8, 9, 10]
    first = events[0]
    assert first is not None
    assert first["event"] == "agent.text.delta"
    envelope = json.loads(first["data"])
    assert envelope["seq"] == 6
    assert envelope["session_id"] == "s-sse"
    assert envelope["sender"]["role"] == "client"
    for i in range(3):
        await client.send("agent.text.delta", {"block_id": "b", "delta": f"live {i}"})
    live = [await stream.next_event() for _ in range(3)]
    assert [int(e["id"]) for e in live if e] == [11, 12, 13]
    await stream.close()
    await client.close()


async def test_after_seq_query_and_default_tail(api: Api, master: Master) -> None:
    """?after_seq=0 replays from seq 1; with no cursor the stream tails from the head."""
    client = await streamed_session(api, master, "s-tail", 2)
    replay = await RawStream.open(master, "/v1/sessions/s-tail/events/stream?after_seq=0", auth())
    got = [await replay.next_event() for _ in range(5)]
    assert [int(e["id"]) for e in got if e] == [1, 2, 3, 4, 5]
    tail = await RawStream.open(master, "/v1/sessions/s-tail/events/stream", auth())
    await client.send("agent.text.delta", {"block_id": "b", "delta": "new"})
    fresh = await tail.next_event()
    assert fresh is not None
    assert int(fresh["id"]) == 6
    for stream in (replay, tail):
        await stream.close()
    await client.close()


async def test_backlog_joins_live_without_gap_or_duplicate(api: Api, master: Master) -> None:
    """Frames committed while the stream reads its backlog appear once, in seq order."""
    client = await streamed_session(api, master, "s-race", 50)

    async def keep_sending() -> None:
        for i in range(100):
            await client.send("agent.text.delta", {"block_id": "b", "delta": f"r{i}"})

    sender = asyncio.create_task(keep_sending())
    stream = await RawStream.open(
        master, "/v1/sessions/s-race/events/stream", auth(**{"Last-Event-ID": "0"})
    )
    ids = []
    while len(ids) < 152:
        event = await stream.next_event()
        assert event is not None
        ids.append(int(event["id"]))
    await sender
    assert ids == list(range(1, 153))
    await stream.close()
    await client.close()


async def test_stream_ends_after_session_deleted(api: Api, master: Master) -> None:
    """A deletion is the last event of the stream."""
    await api.create("s-end")
    stream = await RawStream.open(master, "/v1/sessions/s-end/events/stream", auth())
    assert (await api.delete("/v1/session/s-end")).status == 200
    event = await stream.next_event()
    assert event is not None
    assert event["event"] == "session.status"  # terminated, just before the end (§17.4)
    event = await stream.next_event()
    assert event is not None
    assert event["event"] == "session.deleted"
    assert await stream.next_event() is None
    await stream.close()


async def test_heartbeats_are_comments(make_master: Any) -> None:
    """An idle stream carries ": ping" comments (and a retry hint first)."""
    master = await make_master(heartbeat_interval_s=0.05)
    async with asyncio.timeout(5):
        import aiohttp

        async with aiohttp.ClientSession() as http:
            api = Api(http, master.http_url)
            await api.create("s-beat")
            stream = await RawStream.open(master, "/v1/sessions/s-beat/events/stream", auth())
            while "ping" not in stream.comments:
                chunk = await stream._chunks()
                for line in chunk.split("\n"):
                    if line.startswith(":"):
                        stream.comments.append(line[1:].strip())
                    if line.startswith("retry:"):
                        assert line == "retry: 2000"
            await stream.close()


async def test_stream_credentials(api: Api, master: Master) -> None:
    """No credential: 401 before streaming; ?access_token= works; revocation ends it."""
    created = await api.create("s-cred")
    token = created.body["token"]
    refused = await RawStream.open(master, "/v1/sessions/s-cred/events/stream", {})
    assert refused.status == 401
    await refused.close()
    stream = await RawStream.open(
        master, f"/v1/sessions/s-cred/events/stream?after_seq=0&access_token={token['token']}", {}
    )
    assert stream.status == 200
    assert (await api.delete(f"/v1/tokens/{token['token_id']}")).status == 200
    assert await stream.next_event() is None
    await stream.close()
    bad = await RawStream.open(
        master, "/v1/sessions/s-cred/events/stream", auth(**{"Last-Event-ID": "abc"})
    )
    assert bad.status == 400
    await bad.close()


async def test_stream_ends_at_shutdown(api: Api, master: Master) -> None:
    """Stopping the master ends open streams instead of waiting on them."""
    await api.create("s-stop")
    stream = await RawStream.open(master, "/v1/sessions/s-stop/events/stream", auth())
    assert stream.status == 200
    await master.stop()
    assert await stream.next_event() is None
    await stream.close()


async def test_a_stream_follows_a_session_reloaded_after_a_store_failure_at_once(
    make_master: Any, monkeypatch: Any
) -> None:
    """A store failure unloads the session (one node, docs/protocol.md §12): the stream
    follows the session loaded afresh at once, not at its next ping, every frame once."""
    master = await make_master(heartbeat_interval_s=60.0)  # pings 15 s apart
    client = await Peer.open(master.ws_url, "s-moved", token=API_KEY, create=True)
    stream = await RawStream.open(master, "/v1/sessions/s-moved/events/stream", auth())
    refused = refuse_next_presence(monkeypatch, master.store)
    await Peer.open(master.ws_url, "s-moved", role="edge", token=API_KEY, expect_welcome=False)
    assert await client.closed_with() == 1013  # unloaded with its connections
    assert refused == ["attached"]
    again = await Peer.open(
        master.ws_url, "s-moved", token=API_KEY, participant_id=client.participant_id
    )
    sent = await again.send("agent.state", {"state": "thinking"})
    seen: list[dict[str, Any]] = []
    while not seen or json.loads(seen[-1]["data"])["message_id"] != sent["message_id"]:
        event = await stream.next_event(timeout=5.0)  # the ping would come after 15
        assert event is not None
        seen.append(event)
    ids = [int(e["id"]) for e in seen]
    assert ids == list(range(ids[0], ids[0] + len(ids)))  # in order, none twice
    await stream.close()


async def test_the_agui_tail_follows_a_session_reloaded_after_a_store_failure_at_once(
    make_master: Any, monkeypatch: Any
) -> None:
    """The AG-UI tail, too: a turn the client starts on the reloaded session reaches it at
    once, not at the tail's next ping."""
    master = await make_master(heartbeat_interval_s=60.0)
    client = await Peer.open(master.ws_url, "s-moved-agui", token=API_KEY, create=True)
    stream = await RawStream.open(master, "/v1/sessions/s-moved-agui/ag-ui", auth())
    assert stream.status == 200
    first = await stream.next_event()
    assert first is not None
    refused = refuse_next_presence(monkeypatch, master.store)
    await Peer.open(master.ws_url, "s-moved-agui", role="edge", token=API_KEY, expect_welcome=False)
    assert await client.closed_with() == 1013
    assert refused == ["attached"]
    again = await Peer.open(
        master.ws_url, "s-moved-agui", token=API_KEY, participant_id=client.participant_id
    )
    await again.send("session.turn.start", {"turn_id": new_turn_id(), "turn_index": 0})
    await again.send("agent.text.delta", {"block_id": "b1", "delta": "after the reload"})
    types: list[str] = []
    while "TEXT_MESSAGE_CONTENT" not in types:
        event = await stream.next_event(timeout=5.0)  # the ping would come after 15
        assert event is not None
        types.append(json.loads(event["data"])["type"])
    await stream.close()


@pytest.mark.parametrize(
    "path", ["/v1/sessions/s-reset/events/stream?after_seq=0", "/v1/sessions/s-reset/ag-ui"]
)
async def test_a_reader_that_resets_its_stream_is_logged_at_info(
    api: Api, master: Master, caplog: pytest.LogCaptureFixture, path: str
) -> None:
    """A reader resetting mid-stream (a full window, RST) ends it: no error, no traceback."""
    client = await Peer.open(master.ws_url, "s-reset", token=API_KEY, create=True)
    await client.send("session.turn.start", {"turn_id": new_turn_id(), "turn_index": 0})
    url = urlsplit(master.http_url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window fills fast
    sock.connect((url.hostname, url.port))
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n\r\n".encode()
    )
    caplog.set_level(logging.INFO)
    with structlog.testing.capture_logs() as logs:
        for _ in range(100):  # ~6 MB the reader never takes: the stream waits on its window
            await client.send("agent.text.delta", {"block_id": "b", "delta": "x" * 60_000})
        await wait_head(api, "s-reset", 101)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # RST
        await client.send("agent.text.delta", {"block_id": "b", "delta": "more"})
        async with asyncio.timeout(10):
            while await _open_streams(api):
                await asyncio.sleep(0.02)
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert errors == [], [r.getMessage() for r in errors]
    gone = [e for e in logs if e["event"] == "http_client_gone"]
    assert [e["log_level"] for e in gone] == ["info"]
    await client.close()


async def _open_streams(api: Api) -> float:
    """``rawp_sse_streams`` of the master's /metrics."""
    text = (await api.get("/metrics")).text
    return sum(
        float(line.split()[1]) for line in text.splitlines() if line.startswith("rawp_sse_streams ")
    )


@pytest.mark.parametrize("cursor", [{"Last-Event-ID": "500"}, {"after_seq": "500"}])
async def test_a_cursor_past_the_head_is_reset_to_it_and_the_next_turn_arrives(
    api: Api, master: Master, cursor: dict[str, str]
) -> None:
    """A cursor of 500 on a short log: ``stream.reset`` names its head, then live events come."""
    client = await streamed_session(api, master, "s-ahead", 4)
    head = await master.hub.store.head_seq("s-ahead")
    path, headers = "/v1/sessions/s-ahead/events/stream", auth()
    if "after_seq" in cursor:
        path += "?after_seq=" + cursor["after_seq"]
    else:
        headers.update(cursor)
    stream = await RawStream.open(master, path, headers)
    assert stream.status == 200
    reset = await stream.next_event()
    assert reset is not None
    assert reset["event"] == "stream.reset"
    assert "id" not in reset
    assert json.loads(reset["data"]) == {
        "reason": "cursor_ahead",
        "last_event_id": 500,
        "head_seq": head,
    }
    await client.send("agent.text.delta", {"block_id": "b", "delta": "next"})
    live = await stream.next_event()
    assert live is not None
    assert (live["id"], live["event"]) == (str(head + 1), "agent.text.delta")
    await stream.close()
    await client.close()
