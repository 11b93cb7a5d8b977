"""JSON-RPC messages over newline-delimited JSON on a pair of byte streams, bounded.

:class:`NdjsonLink` is the message transport the ``agent-client-protocol`` connections take
(``send`` / ``receive`` / ``close``) for both ``rawp bridge acp`` (the agent's stdout and
stdin) and ``rawp acp attach`` (our own stdin and stdout). The package's own stdio framing
keeps a line of any length in memory and stops the connection on a line that is JSON but not
an object; this one never holds more than ``max_message_bytes`` of one line, and drops (and
reports through ``on_problem``) every line that is not one JSON-RPC message: garbage, an
oversized line, a partial line at the end of the stream. ``$/cancel_request`` notifications
are handed to ``on_cancel_request`` (the connection's router does not know them).
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable
from typing import Any, Final

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "NdjsonLink"]

DEFAULT_MAX_MESSAGE_BYTES: Final = 8 << 20
_READ: Final = 1 << 16


def _is_id(value: Any) -> bool:
    return value is None or (isinstance(value, int | str) and not isinstance(value, bool))


def check_message(message: Any) -> str | None:
    """Why ``message`` is not one JSON-RPC 2.0 message (None when it is)."""
    if not isinstance(message, dict):
        return "not a JSON object"
    if "method" in message:
        if not isinstance(message["method"], str):
            return "a method that is not a string"
        if "id" in message and not _is_id(message["id"]):
            return "an id that is neither a number nor a string"
        if message.get("params") is not None and not isinstance(message["params"], dict | list):
            return "params that are neither an object nor an array"
        return None
    if "id" not in message or message["id"] is None or not _is_id(message["id"]):
        return "neither a request, a notification nor a response"
    if "result" not in message and "error" not in message:
        return "a response without result or error"
    if "error" in message and not isinstance(message["error"], dict):
        return "an error that is not an object"
    return None


class NdjsonLink:
    """One JSON-RPC peer on a reader and a writer (see the module's docstring)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        on_problem: Callable[[str], None] | None = None,
        on_cancel_request: Callable[[Any], None] | None = None,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.max_message_bytes = max_message_bytes
        self.on_problem = on_problem
        self.on_cancel_request = on_cancel_request
        self.dropped = 0
        self.permission_ids: deque[Any] = deque(maxlen=1024)
        # Our permission requests' ids by the RAWP interaction they ask (to withdraw them).
        self.sent_permission_ids: dict[str, Any] = {}
        self._buffer = bytearray()
        self._scanned = 0
        self._skipping = False
        self._send_lock = asyncio.Lock()
        self._closed = False

    def _problem(self, what: str) -> None:
        self.dropped += 1
        if self.on_problem is not None:
            self.on_problem(what)

    async def send(self, message: dict[str, Any]) -> None:
        """Write one message (one line); ConnectionError when the peer is gone."""
        if message.get("method") == "session/request_permission" and "id" in message:
            meta = (message.get("params") or {}).get("_meta") or {}
            interaction_id = meta.get("rawp_interaction_id")
            if isinstance(interaction_id, str):
                self.sent_permission_ids[interaction_id] = message["id"]
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        async with self._send_lock:
            if self._closed or self.writer.is_closing():
                raise ConnectionError("the peer's input is closed")
            try:
                self.writer.write(data)
                await self.writer.drain()
            except (OSError, RuntimeError) as exc:
                raise ConnectionError(f"the peer's input is closed: {exc!r}") from None

    async def receive(self) -> dict[str, Any] | None:
        """The next JSON-RPC message; None at the end of the stream."""
        while True:
            line = await self._line()
            if line is None:
                return None
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except (ValueError, RecursionError):
                self._problem(f"a line that is not JSON ({len(line)} bytes)")
                continue
            why = check_message(message)
            if why is not None:
                self._problem(f"a line that is not a JSON-RPC message: {why}")
                continue
            method = message.get("method")
            if method == "$/cancel_request" and "id" not in message:
                if self.on_cancel_request is not None:
                    self.on_cancel_request(message.get("params"))
                continue
            if method == "session/request_permission" and "id" in message:
                self.permission_ids.append(message["id"])
            return message  # type: ignore[no-any-return]

    async def _line(self) -> bytes | None:
        while True:
            end = self._buffer.find(b"\n", self._scanned)
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                self._scanned = 0
                if self._skipping:
                    self._skipping = False  # the tail of a line too long to keep
                    continue
                return line
            self._scanned = len(self._buffer)
            if len(self._buffer) > self.max_message_bytes:
                if not self._skipping:
                    self._problem(f"a message longer than {self.max_message_bytes} bytes (dropped)")
                self._skipping = True
                self._buffer.clear()
                self._scanned = 0
            try:
                chunk = await self.reader.read(_READ)
            except (OSError, ValueError):
                chunk = b""
            if not chunk:
                if self._buffer.strip() and not self._skipping:
                    self._problem(
                        f"a partial line at the end of the stream ({len(self._buffer)} bytes)"
                    )
                self._buffer.clear()
                return None
            self._buffer += chunk

    async def close(self) -> None:
        """Close our side (the peer reads the end of its input)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.writer.can_write_eof():
                self.writer.write_eof()
        except (OSError, RuntimeError):
            pass
        self.writer.close()
