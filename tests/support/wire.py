"""Building frames and talking to a master over real sockets, for the end-to-end tests."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import uuid
from collections.abc import Callable
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

__all__ = ["Peer", "envelope", "new_turn_id", "usage_payload"]


def envelope(session_id: str, type_: str, payload: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A complete envelope with a fresh message_id and the current time."""
    frame = {
        "type": type_,
        "message_id": str(uuid.uuid4()),
        "session_id": session_id,
        "timestamp": dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z"),
        "payload": payload,
    }
    frame.update(extra)
    return frame


def new_turn_id() -> str:
    """A UUID v4 turn id."""
    return str(uuid.uuid4())


def usage_payload(turn_id: str | None = None) -> dict[str, Any]:
    """A valid §7.3.1 session.usage payload."""
    payload: dict[str, Any] = {
        "token_usage": {"input_tokens": 10, "output_tokens": 20},
        "cost_usage": {"limit": -1, "used": 0.01, "unit": "USD"},
        "message_usage": {"limit": 100, "used": 1, "unit": "COUNT"},
        "time_to_reset": "PT5H",
    }
    if turn_id is not None:
        payload["turn_id"] = turn_id
    return payload


class Peer:
    """One WebSocket connection speaking RAWP (a client or an edge) in a test."""

    def __init__(self, ws: ClientConnection, session_id: str, *, acks: bool = False) -> None:
        self.ws = ws
        self.session_id = session_id
        # The master's producer acks (notes §16.3) are kept aside unless asked for, so a test
        # reading "the next frame" sees session frames only.
        self.show_acks = acks
        self.acks: list[dict[str, Any]] = []
        # The master's session.status frames (notes §17.4) are kept aside the same way, unless
        # asked for: most tests follow the frames their peers send.
        self.show_status = False
        self.statuses: list[dict[str, Any]] = []
        self.welcome: dict[str, Any] = {}
        self.received: list[dict[str, Any]] = []
        self.raw: list[str] = []  # the exact text of every received message, in order

    @classmethod
    async def open(
        cls,
        url: str,
        session_id: str,
        *,
        role: str = "client",
        token: str,
        create: bool | dict[str, Any] = False,
        participant_id: str | None = None,
        resume: dict[str, Any] | None = None,
        buffer: dict[str, Any] | None = None,
        presence: bool | None = None,
        expect_welcome: bool = True,
        acks: bool = False,
        accepts_input_during_turn: bool | None = None,
        **connect_args: Any,
    ) -> Peer:
        """Connect, send hello and (by default) wait for the welcome."""
        ws = await connect(url, subprotocols=["rawp.1"], **connect_args)  # type: ignore[list-item]
        peer = cls(ws, session_id, acks=acks)
        payload: dict[str, Any] = {"protocol_version": "1.0.2", "role": role, "token": token}
        if create:
            payload["create"] = create if isinstance(create, dict) else {"name": "test"}
        if participant_id:
            payload["participant_id"] = participant_id
        if resume is not None:
            payload["resume"] = resume
        if buffer is not None:
            payload["buffer"] = buffer
        if presence is not None:
            payload["presence"] = presence
        if accepts_input_during_turn is not None:
            payload["accepts_input_during_turn"] = accepts_input_during_turn
        await peer.send_frame(envelope(session_id, "connection.hello", payload))
        if expect_welcome:
            peer.welcome = await peer.recv()
            assert peer.welcome["type"] == "connection.welcome", peer.welcome
        return peer

    @property
    def participant_id(self) -> str:
        """The participant id the master gave this connection."""
        return str(self.welcome["payload"]["participant_id"])

    async def send_frame(self, frame: dict[str, Any]) -> dict[str, Any]:
        """Send one envelope; returns it."""
        await self.ws.send(json.dumps(frame))
        return frame

    async def send(self, type_: str, payload: dict[str, Any], **extra: Any) -> dict[str, Any]:
        """Build and send one envelope of this connection's session."""
        return await self.send_frame(envelope(self.session_id, type_, payload, **extra))

    async def recv(self, timeout: float = 5.0) -> dict[str, Any]:
        """The next frame (fails the test after ``timeout``)."""
        async with asyncio.timeout(timeout):
            while True:
                message = await self.ws.recv()
                frame: dict[str, Any] = json.loads(message)
                kind = frame.get("type")
                if kind == "session.status" and not self.show_status:
                    self.statuses.append(frame)
                    continue
                if self.show_acks or kind != "connection.ack":
                    break
                self.acks.append(frame)
        self.received.append(frame)
        self.raw.append(str(message))
        return frame

    async def recv_until(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 5.0
    ) -> list[dict[str, Any]]:
        """Frames up to and including the first that satisfies ``predicate``."""
        frames: list[dict[str, Any]] = []
        async with asyncio.timeout(timeout):
            while True:
                frame = await self.recv(timeout)
                frames.append(frame)
                if predicate(frame):
                    return frames

    async def recv_type(self, type_: str, timeout: float = 5.0) -> dict[str, Any]:
        """Skip to the next frame of ``type_``."""
        return (await self.recv_until(lambda f: f["type"] == type_, timeout))[-1]

    async def no_frame(self, within: float = 0.3) -> bool:
        """True when nothing arrives within ``within`` seconds."""
        try:
            await self.recv(within)
        except TimeoutError:
            return True
        return False

    async def closed_with(self, timeout: float = 5.0) -> int | None:
        """Wait for the master to close; returns the close code."""
        async with asyncio.timeout(timeout):
            try:
                while True:
                    frame = json.loads(await self.ws.recv())
                    kind = frame.get("type")
                    if kind == "session.status" and not self.show_status:
                        self.statuses.append(frame)
                    elif self.show_acks or kind != "connection.ack":
                        self.received.append(frame)
                    else:
                        self.acks.append(frame)
            except Exception:
                pass
        await self.ws.wait_closed()
        return self.ws.close_code

    async def close(self) -> None:
        """Close normally."""
        await self.ws.close()
