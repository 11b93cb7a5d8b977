"""A small black-box WebSocket peer (rawp-notes §2 transport, §5 handshake).

A :class:`Peer` is one connection to the master, playing a client or an edge: connect with the
``rawp.1`` subprotocol, send ``connection.hello``, read ``connection.welcome``, send envelopes,
receive with a deadline, read until a predicate holds, and report how the master closed the
connection. Every frame received is kept (with its raw text, whose UTF-8 length is the size the
buffer rules of notes §15.4 count) so a case can explain what it saw when it fails.

Waiting never outlives the case: each peer shares its case's deadline, and running out of time
fails the case with what it was waiting for.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.typing import Subprotocol

from .case import CaseFailed
from .transcript import Transcript
from .wire import PRESENCE, PROTOCOL_VERSION, STATUS, SUBPROTOCOL, envelope, is_master_ack

__all__ = ["HandshakeRefused", "Peer", "Received", "describe"]

_MAX_MESSAGE = 64 << 20
_MARGIN = 0.05


@dataclass(frozen=True)
class Received:
    """One message from the master: the decoded frame and the text as it arrived."""

    frame: dict[str, Any]
    raw: str

    @property
    def size(self) -> int:
        """Bytes of the envelope as delivered (notes §15.4 counts these)."""
        return len(self.raw.encode())


class HandshakeRefused(Exception):
    """The HTTP upgrade was refused (for example 400 for a foreign subprotocol, notes §15.7)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"the WebSocket handshake was refused with HTTP {status}")
        self.status = status


def describe(frame: dict[str, Any]) -> str:
    """A short one-line description of a frame for failure messages."""
    kind = frame.get("type", "?")
    payload = frame.get("payload")
    bits: list[str] = []
    if isinstance(payload, dict):
        for key in (
            "error_code",
            "state",
            "stop_reason",
            "status",
            "call_id",
            "block_id",
            "reason",
            "deleted_by",
            "name",
        ):
            if key in payload:
                bits.append(f"{key}={payload[key]}")
    if "seq" in frame:
        bits.append(f"seq={frame['seq']}")
    metadata = frame.get("metadata")
    if isinstance(metadata, dict) and metadata.get("synthetic"):
        bits.append("synthetic")
    return f"{kind}({', '.join(bits)})" if bits else str(kind)


def _acked(ack: dict[str, Any]) -> object:
    payload = ack.get("payload")
    return payload.get("last_message_id") if isinstance(payload, dict) else None


class Peer:
    """One WebSocket connection to the master, speaking RAWP as plain JSON."""

    def __init__(
        self,
        ws: ClientConnection,
        label: str,
        deadline: Callable[[], float],
        transcript: Transcript | None = None,
    ) -> None:
        self.ws = ws
        self.label = label
        self._deadline = deadline
        self.transcript = Transcript() if transcript is None else transcript
        self._close_recorded = False
        self.session_id = ""
        self.role = ""
        self.welcome: dict[str, Any] = {}
        self.log: list[Received] = []
        self.acks: list[dict[str, Any]] = []
        """The master's ``connection.ack`` frames to this peer (notes §16.3), in arrival order.

        They are set aside as they arrive and never returned by :meth:`recv`, :meth:`quiet` or
        :meth:`expect_close`: a master acknowledges whenever it committed something of the
        peer's, so no case that reads "every frame" may trip over them. The ack cases read
        them here (``acks_seen`` counts how many arrived before a frame was read).
        """

    # --- connecting ----------------------------------------------------------------------

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        label: str,
        deadline: Callable[[], float],
        subprotocols: Sequence[str] | None = (SUBPROTOCOL,),
        transcript: Transcript | None = None,
    ) -> Peer:
        """Open the WebSocket (no hello yet). Raises :class:`HandshakeRefused` on HTTP errors."""
        offered = None if subprotocols is None else [Subprotocol(s) for s in subprotocols]
        transcript = Transcript() if transcript is None else transcript
        asked = ", ".join(subprotocols) if subprotocols else "none"
        timeout = max(0.1, deadline() - time.monotonic() - _MARGIN)
        try:
            ws = await connect(
                url,
                subprotocols=offered,
                max_size=_MAX_MESSAGE,
                open_timeout=timeout,
                ping_interval=None,
                close_timeout=1.0,
                compression=None,
                proxy=None,
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            transcript.add(
                label,
                "refused",
                f"GET {url} (subprotocols: {asked}): upgrade refused with HTTP {status}",
                http_status=status,
            )
            raise HandshakeRefused(status) from None
        except (OSError, TimeoutError) as exc:
            transcript.add(label, "refused", f"GET {url}: {type(exc).__name__}: {exc}")
            raise
        transcript.add(
            label, "open", f"{url} (subprotocols: {asked}; selected: {ws.subprotocol or 'none'})"
        )
        return cls(ws, label, deadline, transcript)

    async def hello(
        self,
        session_id: str,
        *,
        role: str,
        token: str,
        protocol_version: str = PROTOCOL_VERSION,
        **fields: Any,
    ) -> dict[str, Any]:
        """Send ``connection.hello`` (notes §4); ``fields`` go into the payload when not None."""
        self.session_id = session_id
        self.role = role
        payload: dict[str, Any] = {
            "protocol_version": protocol_version,
            "role": role,
            "token": token,
        }
        payload.update({k: v for k, v in fields.items() if v is not None})
        return await self.send_frame(envelope(session_id, "connection.hello", payload))

    async def read_welcome(self) -> dict[str, Any]:
        """The first frame must be ``connection.welcome``; fails the case otherwise."""
        try:
            frame = await self.recv(what="connection.welcome")
        except CaseFailed:
            if self.close_code is not None:
                raise CaseFailed(
                    f"{self.label}: the master closed the connection with {self.close_code} "
                    f"({self.ws.close_reason or 'no reason'}) instead of sending "
                    "connection.welcome"
                ) from None
            raise
        if frame.get("type") != "connection.welcome":
            raise CaseFailed(
                f"{self.label}: the first frame after hello was {describe(frame)}, "
                "not connection.welcome"
            )
        payload = frame.get("payload")
        if not isinstance(payload, dict):
            raise CaseFailed(f"{self.label}: connection.welcome has no payload object")
        self.welcome = frame
        return frame

    @property
    def participant_id(self) -> str:
        """The participant id from the welcome."""
        return str(self.welcome.get("payload", {}).get("participant_id", ""))

    # --- sending -------------------------------------------------------------------------

    async def send_frame(self, frame: dict[str, Any]) -> dict[str, Any]:
        """Send one envelope as JSON text; returns it."""
        await self.send_raw(json.dumps(frame, separators=(",", ":")))
        return frame

    async def send(self, type_: str, payload: dict[str, Any], **extra: Any) -> dict[str, Any]:
        """Build an envelope for this peer's session and send it; returns it."""
        return await self.send_frame(envelope(self.session_id, type_, payload, **extra))

    async def send_raw(self, message: str | bytes) -> None:
        """Send one WebSocket message as it is (text for str, binary for bytes)."""
        if isinstance(message, bytes):
            self.transcript.add(self.label, "send", f"binary message, {len(message)} bytes")
        else:
            self.transcript.add(self.label, "send", message)
        try:
            await self.ws.send(message)
        except ConnectionClosed:
            self._record_close()
            raise CaseFailed(
                f"{self.label}: cannot send, the master closed the connection ({self.close_code})"
            ) from None

    # --- receiving -----------------------------------------------------------------------

    def _timeout(self, timeout: float | None) -> float:
        left = self._deadline() - time.monotonic() - _MARGIN
        return max(0.0, left if timeout is None else min(timeout, left))

    async def recv_raw(self, *, what: str = "a frame", timeout: float | None = None) -> Received:
        """The next message that is not a master's ``connection.ack`` (those go to :attr:`acks`).

        Fails the case when the deadline passes or the socket closes.
        """
        while True:
            received = await self._recv_any(what=what, timeout=timeout)
            if not self._set_aside(received.frame):
                self.log.append(received)
                return received

    def _set_aside(self, frame: dict[str, Any]) -> bool:
        """Keep a master's ``connection.ack`` in :attr:`acks`; True when ``frame`` was one."""
        if is_master_ack(frame):
            self.acks.append(frame)
            return True
        return False

    async def _recv_any(self, *, what: str, timeout: float | None) -> Received:
        wait = self._timeout(timeout)
        try:
            message = await asyncio.wait_for(self.ws.recv(), wait)
        except TimeoutError:
            raise CaseFailed(
                f"{self.label}: nothing arrived within {wait:.1f}s while waiting for {what}"
            ) from None
        except ConnectionClosed:
            self._record_close()
            raise CaseFailed(
                f"{self.label}: the connection closed ({self.close_code}) while waiting for {what}"
            ) from None
        if isinstance(message, bytes):
            self.transcript.add(self.label, "recv", f"binary message, {len(message)} bytes")
            raise CaseFailed(f"{self.label}: the master sent a binary message (notes §2)")
        self.transcript.add(self.label, "recv", message)
        try:
            frame = json.loads(message)
        except ValueError:
            raise CaseFailed(f"{self.label}: the master sent text that is not JSON") from None
        if not isinstance(frame, dict):
            raise CaseFailed(f"{self.label}: the master sent JSON that is not an object")
        return Received(frame, message)

    async def recv(self, *, what: str = "a frame", timeout: float | None = None) -> dict[str, Any]:
        """The next frame."""
        return (await self.recv_raw(what=what, timeout=timeout)).frame

    async def next_frame(
        self, *, what: str = "a frame", ignore: Sequence[str] = (PRESENCE, STATUS)
    ) -> dict[str, Any]:
        """The next frame whose type is not in ``ignore`` (presence and status by default)."""
        while True:
            frame = await self.recv(what=what)
            if frame.get("type") not in ignore:
                return frame

    async def recv_ack(self, message_id: str, *, what: str) -> list[dict[str, Any]]:
        """Read until a master's ``connection.ack`` names ``message_id`` (notes §16.3).

        Returns the other frames read on the way; the acks are in :attr:`acks`.
        """
        frames: list[dict[str, Any]] = []
        while not any(_acked(a) == message_id for a in self.acks):
            received = await self._recv_any(what=what, timeout=None)
            if not self._set_aside(received.frame):
                self.log.append(received)
                frames.append(received.frame)
        return frames

    async def recv_until(
        self, predicate: Callable[[dict[str, Any]], bool], *, what: str
    ) -> list[dict[str, Any]]:
        """Frames up to and including the first that satisfies ``predicate``."""
        frames: list[dict[str, Any]] = []
        while True:
            frame = await self.recv(what=what)
            frames.append(frame)
            if predicate(frame):
                return frames

    async def recv_raw_until(
        self, predicate: Callable[[dict[str, Any]], bool], *, what: str
    ) -> list[Received]:
        """Like :meth:`recv_until`, keeping each frame's raw text."""
        received: list[Received] = []
        while True:
            item = await self.recv_raw(what=what)
            received.append(item)
            if predicate(item.frame):
                return received

    async def recv_id(self, message_id: str, *, what: str) -> Received:
        """Skip to the frame with ``message_id``."""
        items = await self.recv_raw_until(lambda f: f.get("message_id") == message_id, what=what)
        return items[-1]

    async def recv_type(self, type_: str, *, what: str | None = None) -> dict[str, Any]:
        """Skip to the next frame of ``type_``."""
        frames = await self.recv_until(lambda f: f.get("type") == type_, what=what or type_)
        return frames[-1]

    async def quiet(self, period: float) -> list[dict[str, Any]]:
        """Every frame that arrives within ``period`` seconds (for absence checks)."""
        frames: list[dict[str, Any]] = []
        end = time.monotonic() + min(period, self._timeout(None))
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return frames
            try:
                message = await asyncio.wait_for(self.ws.recv(), left)
            except TimeoutError:
                return frames
            except ConnectionClosed:
                self._record_close()
                return frames
            self._record_message(message)
            if isinstance(message, str):
                try:
                    frame = json.loads(message)
                except ValueError:
                    continue
                if isinstance(frame, dict) and not self._set_aside(frame):
                    self.log.append(Received(frame, message))
                    frames.append(frame)

    async def expect_close(self, *, what: str = "the master to close") -> list[dict[str, Any]]:
        """Read until the master closes the connection; returns the frames read on the way."""
        frames: list[dict[str, Any]] = []
        while True:
            wait = self._timeout(None)
            try:
                message = await asyncio.wait_for(self.ws.recv(), wait)
            except TimeoutError:
                raise CaseFailed(
                    f"{self.label}: the connection was still open after {wait:.1f}s waiting for "
                    f"{what}"
                ) from None
            except ConnectionClosed:
                self._record_close()
                return frames
            self._record_message(message)
            if isinstance(message, str):
                try:
                    frame = json.loads(message)
                except ValueError:
                    continue
                if isinstance(frame, dict) and not self._set_aside(frame):
                    self.log.append(Received(frame, message))
                    frames.append(frame)

    def _record_message(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            self.transcript.add(self.label, "recv", f"binary message, {len(message)} bytes")
        else:
            self.transcript.add(self.label, "recv", message)

    def _record_close(self, *, by: str = "the master") -> None:
        """Record how the socket closed, once."""
        if self._close_recorded:
            return
        self._close_recorded = True
        code = self.ws.close_code
        reason = self.ws.close_reason or ""
        if self.ws.protocol.close_rcvd is None and by == "the master":
            text = f"the connection was lost without a close frame ({code})"
        else:
            text = f"closed by {by}: {code}" + (f" {reason!r}" if reason else "")
        self.transcript.add(self.label, "close", text, close_code=code)

    @property
    def close_code(self) -> int | None:
        """The close code the master sent (None while open, 1006 when the TCP link died)."""
        return self.ws.close_code

    @property
    def subprotocol(self) -> str | None:
        """The subprotocol the master selected in the handshake."""
        return self.ws.subprotocol

    # --- leaving -------------------------------------------------------------------------

    async def close(self) -> None:
        """Close normally (1000)."""
        already = self.ws.close_code is not None
        try:
            await asyncio.wait_for(self.ws.close(), 2.0)
        except (TimeoutError, ConnectionClosed, OSError):
            self.ws.transport.abort()
        self._record_close(by="the master" if already else "the runner")

    def drop(self) -> None:
        """Vanish without a closing handshake, like a lost network (§7.8.1 "WSS error")."""
        if not self._close_recorded:
            self._close_recorded = True
            self.transcript.add(self.label, "close", "dropped by the runner (TCP abort)")
        self.ws.transport.abort()
