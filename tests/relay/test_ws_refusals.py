"""Refused hellos close cleanly whatever they carried (relay/ws.py ``close_reason``)."""

from __future__ import annotations

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from relay.server import Master
from relay.ws import close_reason
from tests.e2e.util import hello
from tests.protocol.test_names import CONTROLS


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ({"protocol_version": "é" * 200}, 4426),
        ({"protocol_version": "2" + "".join(CONTROLS) * 3}, 4426),
        ({"protocol_version": "\U0001f600" * 100}, 4426),
        ({"role": "é" * 300}, 4400),
    ],
    ids=["latin", "controls", "emoji", "bad-role"],
)
async def test_a_refusal_echoing_long_or_strange_text_still_closes(
    master: Master, payload: dict[str, str], code: int
) -> None:
    """The close reason is one line of at most 123 bytes, so the close itself never fails."""
    async with connect(master.ws_url, subprotocols=["rawp.1"]) as ws:  # type: ignore[list-item]
        await ws.send(hello("s-refused", **payload))
        with pytest.raises(ConnectionClosed):
            await _drain(ws)
    assert ws.close_code == code
    reason = ws.close_reason or ""
    assert len(reason.encode()) <= 123
    assert not [c for c in CONTROLS if c in reason]


async def _drain(ws: ClientConnection) -> None:
    while True:
        await ws.recv()


def test_close_reason_cuts_by_bytes_not_characters() -> None:
    """A multi-byte character cut at the 123-byte bound is dropped, not split."""
    reason = close_reason("x" + "é" * 100)
    assert len(reason.encode()) <= 123
    assert reason == "x" + "é" * 61
