"""The client library sends frames of types RAWP does not define, marked ignorable (what a
bridge carries that RAWP has no frame for), and only those."""

from __future__ import annotations

import asyncio

import pytest

from protocol import codec
from protocol.client import RawpClient
from protocol.errors import InvalidFrame
from relay.server import Master
from tests.e2e.conftest import API_KEY


async def test_ignorable_frame_is_committed_and_relayed(master: Master) -> None:
    """client.ignorable(type, payload): committed, logged, delivered to the edges untouched."""
    async with (
        RawpClient(master.ws_url, "s-ign-1", role="client", token=API_KEY, create=True) as client,
        RawpClient(master.ws_url, "s-ign-1", role="edge", token=API_KEY) as edge,
    ):
        frame = await client.ignorable("acp.plan", {"entries": [{"content": "é", "n": 1}]})
        seq = await client.committed(frame)
        got = await asyncio.wait_for(anext(aiter(edge)), 10)
        while got.type.startswith("connection.") or got.type == "session.presence":
            got = await asyncio.wait_for(anext(aiter(edge)), 10)
    assert got.type == "acp.plan"
    assert got.seq == seq
    assert got.metadata is not None
    assert got.metadata.ignorable
    assert codec.decode_object(codec.encode(got))["payload"] == {
        "entries": [{"content": "é", "n": 1}]
    }


@pytest.mark.parametrize("frame_type", ["agent.text.delta", "Not A Type", "acp", "x." + "a" * 70])
async def test_ignorable_refuses_known_and_malformed_types(master: Master, frame_type: str) -> None:
    """A RAWP type, or a name outside the type grammar, is refused before it leaves."""
    async with RawpClient(
        master.ws_url, "s-ign-2", role="client", token=API_KEY, create=True
    ) as client:
        with pytest.raises(InvalidFrame):
            await client.ignorable(frame_type, {})
