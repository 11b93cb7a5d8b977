"""The outbox: posted frames go out in order on flush, straight from the caller when it can."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from websockets.asyncio.client import ClientConnection, connect

from relay.config import Settings
from relay.fanout import Outbox
from relay.server import Master
from relay.ws import Connection
from tests.e2e import conftest

__all__: list[str] = []


@asynccontextmanager
async def connected() -> AsyncIterator[tuple[Connection, ClientConnection]]:
    """A real WebSocket pair on 127.0.0.1: the master's side of a connection that has not
    said hello yet (the outbox's sink) and the client."""
    settings: Settings = conftest.test_settings(hello_timeout_s=60.0)
    master = Master(settings)
    await master.start()
    try:
        async with connect(master.ws_url, compression=None, max_size=None) as client:
            async with asyncio.timeout(5):
                while not master.ws_connections:
                    await asyncio.sleep(0.001)
            (ws,) = master.ws_connections
            yield ws, client
    finally:
        await master.stop()


def frame(i: int, size: int = 40) -> bytes:
    return (b'{"n":%d,"pad":"' % i).ljust(size - 2, b"x") + b'"}'


async def test_flush_writes_posted_frames_in_order_from_the_caller() -> None:
    """An idle writer is not woken: flush itself writes, and the cursor moves before it returns."""
    async with connected() as (ws, client):
        sent: list[int] = []
        outbox = Outbox(ws, limit_bytes=1 << 20, on_sent=sent.append, on_overflow=lambda: None)
        outbox.start()
        await asyncio.sleep(0.01)  # the writer is idle, waiting for work
        for i in range(1, 6):
            assert outbox.post(frame(i), seq=i)
        assert sent == []  # posting alone writes nothing
        outbox.flush()
        assert sent == [5]
        assert outbox.queued_bytes == 0
        got = [await asyncio.wait_for(client.recv(decode=False), 5) for _ in range(5)]
        assert got == [frame(i) for i in range(1, 6)]
        outbox.close()


async def test_a_paused_transport_leaves_the_rest_to_the_writer() -> None:
    """When the socket stops taking bytes, flush stops; the writer finishes once it drains."""
    async with connected() as (ws, client):
        sent: list[int] = []
        outbox = Outbox(ws, limit_bytes=64 << 20, on_sent=sent.append, on_overflow=lambda: None)
        outbox.start()
        await asyncio.sleep(0.01)
        count, size = 4000, 4096  # 16 MiB: far more than the socket buffers take unread
        for i in range(1, count + 1):
            outbox.post(frame(i, size), seq=i)
        outbox.flush()
        assert outbox.queued_bytes > 0  # paused part-way: not everything fit
        assert ws.paused
        got = [await asyncio.wait_for(client.recv(decode=False), 10) for _ in range(count)]
        assert got == [frame(i, size) for i in range(1, count + 1)]
        assert await outbox.drain(5)
        assert sent[-1] == count
        outbox.close()


async def test_posting_past_the_bound_closes_the_outbox_as_a_slow_consumer() -> None:
    """A post that takes the queue past its byte bound is refused and reports the overflow."""
    async with connected() as (ws, _client):
        overflows: list[bool] = []
        outbox = Outbox(
            ws, limit_bytes=1000, on_sent=lambda _: None, on_overflow=lambda: overflows.append(True)
        )
        outbox.start()
        assert outbox.post(frame(1, 600), seq=1)
        assert not outbox.post(frame(2, 600), seq=2)
        assert overflows == [True]
        assert outbox.closed
        assert not outbox.post(frame(3), seq=3)
        outbox.flush()  # nothing left to write, nothing raised
        assert outbox.queued_bytes == 0


async def test_an_idle_outbox_holds_no_writer_task() -> None:
    """Started and written to while the socket takes everything, an outbox creates no task."""
    async with connected() as (ws, client):
        before = asyncio.all_tasks()
        outbox = Outbox(ws, limit_bytes=1 << 20, on_sent=lambda _: None, on_overflow=lambda: None)
        outbox.put(frame(1))  # the welcome, queued before the start
        outbox.start()
        outbox.put(frame(2))
        assert asyncio.all_tasks() == before
        got = [await asyncio.wait_for(client.recv(decode=False), 5) for _ in range(2)]
        assert got == [frame(1), frame(2)]
        assert await outbox.drain(1)
        outbox.close()


async def test_a_writer_cancelled_before_it_ran_does_not_stop_later_writes() -> None:
    """A writer task cancelled from outside is forgotten: the next put writes what is queued."""
    async with connected() as (ws, client):
        outbox = Outbox(ws, limit_bytes=64 << 20, on_sent=lambda _: None, on_overflow=lambda: None)
        outbox.start()
        before = asyncio.all_tasks()
        ws.paused = True  # the transport said "stop writing" (pause_writing)
        outbox.put(frame(1))
        await asyncio.sleep(0)  # the put's flush runs, finds the socket paused: a writer
        writers = asyncio.all_tasks() - before
        assert len(writers) == 1
        (writer,) = writers
        writer.cancel()  # before its first step
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        ws.paused = False
        outbox.put(frame(2))
        got = [await asyncio.wait_for(client.recv(decode=False), 5) for _ in range(2)]
        assert got == [frame(1), frame(2)]
        outbox.close()


async def test_frames_put_in_one_loop_step_go_out_in_one_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Several puts of one step (errors answering a burst) are one socket write, in order."""
    async with connected() as (ws, client):
        outbox = Outbox(ws, limit_bytes=1 << 20, on_sent=lambda _: None, on_overflow=lambda: None)
        outbox.start()
        await asyncio.sleep(0.01)
        writes: list[bytes] = []
        write = Connection.write

        def counted(self: Connection, data: bytes) -> None:
            writes.append(data)
            write(self, data)

        monkeypatch.setattr(Connection, "write", counted)
        for i in range(1, 4):
            outbox.put(frame(i))
        assert writes == []  # at the next loop step
        got = [await asyncio.wait_for(client.recv(decode=False), 5) for _ in range(3)]
        assert got == [frame(1), frame(2), frame(3)]
        assert len(writes) == 1
        outbox.close()


class _ClosingSink:
    """A sink that takes one write, pauses, and is closed while the outbox waits."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.open = True
        self.writable = False  # paused from the start: the writer task writes

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    async def drain(self) -> None:
        self.open = False  # a close frame went out meanwhile

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.open = False


async def test_a_large_message_stops_at_a_sink_closed_between_its_fragments() -> None:
    """Nothing follows a close: the fragments left of a backlog are not written, nor counted."""
    sink = _ClosingSink()
    sent: list[int] = []
    outbox = Outbox(sink, limit_bytes=64 << 20, on_sent=sent.append, on_overflow=lambda: None)
    outbox.start()
    outbox.put(b"x" * (3 << 20), seq=7)  # three 1 MiB slices' worth: 48 fragments
    await asyncio.sleep(0.05)
    assert len(sink.writes) == 2  # the first fragment's header and payload only
    assert sent == []
    assert outbox.closed
