"""NdjsonLink: JSON-RPC lines from a hostile peer, bounded and dropped, never a stop."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from relay.acp.link import NdjsonLink


class _Sink:
    """A writer that keeps what is written (the link's peer input)."""

    def __init__(self) -> None:
        self.data = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        return None

    def is_closing(self) -> bool:
        return self.closed

    def can_write_eof(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


def _link(chunks: list[bytes], **options: Any) -> tuple[NdjsonLink, list[str]]:
    reader = asyncio.StreamReader()
    for chunk in chunks:
        reader.feed_data(chunk)
    reader.feed_eof()
    problems: list[str] = []
    link = NdjsonLink(reader, _Sink(), on_problem=problems.append, **options)  # type: ignore[arg-type]
    return link, problems


async def _all(link: NdjsonLink) -> list[dict[str, Any]]:
    out = []
    while (message := await link.receive()) is not None:
        out.append(message)
    return out


async def test_lines_that_are_not_messages_are_dropped_and_reported() -> None:
    """Garbage, JSON that is no JSON-RPC message, deep nesting: each dropped, said once."""
    good = {"jsonrpc": "2.0", "method": "session/update", "params": {"x": 1}}
    lines = [
        b"hello\n",
        b"[1]\n",
        b'{"method": 5}\n',
        b'{"id": [1], "result": 1}\n',
        b'{"id": 1}\n',
        b'{"method": "m", "params": 3}\n',
        b"[" * 100_000 + b"\n",
        b"\n",
        json.dumps(good).encode() + b"\n",
    ]
    link, problems = _link(lines)
    assert await _all(link) == [good]
    assert len(problems) == 7


async def test_a_line_split_anywhere_arrives_whole() -> None:
    """A message cut into single bytes is one message."""
    data = json.dumps({"jsonrpc": "2.0", "id": 3, "result": {"ok": "é"}}).encode() + b"\n"
    link, problems = _link([data[i : i + 1] for i in range(len(data))])
    assert await _all(link) == [{"jsonrpc": "2.0", "id": 3, "result": {"ok": "é"}}]
    assert problems == []


async def test_an_oversized_line_is_dropped_while_it_streams() -> None:
    """A line past the bound is dropped, the link's buffer never holds it, the next one
    arrives; a partial line at the end is reported."""
    big = [b'{"method":"m","params":{"t":"' + b"x" * 10_000] + [b"x" * 65_536] * 40
    after = json.dumps({"jsonrpc": "2.0", "method": "after"}).encode()
    link, problems = _link([*big, b'"}}\n', after + b"\n", b'{"partial'], max_message_bytes=100_000)
    seen = []
    while (message := await link.receive()) is not None:
        seen.append(message["method"])
        assert len(link._buffer) < 100_000 + 70_000
    assert seen == ["after"]
    assert problems == [
        "a message longer than 100000 bytes (dropped)",
        "a partial line at the end of the stream (9 bytes)",
    ]


async def test_cancel_request_goes_to_its_hook() -> None:
    """$/cancel_request is handed to on_cancel_request, not to the connection."""
    cancel = {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 4}}
    ask = {"jsonrpc": "2.0", "id": 9, "method": "session/request_permission", "params": {}}
    link, _ = _link([json.dumps(cancel).encode() + b"\n", json.dumps(ask).encode() + b"\n"])
    seen: list[Any] = []
    link.on_cancel_request = seen.append
    assert await _all(link) == [ask]
    assert seen == [{"requestId": 4}]
    assert list(link.permission_ids) == [9]
