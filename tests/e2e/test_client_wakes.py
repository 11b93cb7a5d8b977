"""The Python client's revisit, cancel_revisit and on_wake against a real master (notes §17.5)."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from protocol import frames as F
from protocol.client import ConnectionStatus, FrameRefused, RawpClient
from protocol.errors import DirectionError
from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.support.clients import wait_until


async def test_wake_after_reattach_fires_once(master: Master) -> None:
    """A revisit 1 s ahead, detached when due: on_wake fires once, after the reattach."""
    woken: list[F.Wake] = []
    agent = RawpClient(
        master.ws_url,
        "s-wake-1",
        role="client",
        token=API_KEY,
        create=True,
        on_wake=woken.append,
    )
    await agent.connect()
    try:
        rid = await agent.revisit(dt.timedelta(seconds=1), "check the build")
        assert agent.view.status == "rescheduling"
        assert list(agent.view.pending_revisits) == [rid]
        agent.abort_connection()  # detached while it comes due
        await asyncio.sleep(1.5)
        await wait_until(lambda: bool(woken), within=15, what="the wake after the reattach")
        await asyncio.sleep(0.5)  # nothing more arrives: once
        assert [w.payload.revisit_id for w in woken] == [rid]
        assert woken[0].payload.reason == "check the build"
        assert woken[0].seq is not None
        assert agent.view.pending_revisits == {}
        assert agent.view.status == "idle"
        agent.abort_connection()  # a second reattach tells nothing twice
        await asyncio.sleep(1.0)
        await agent.wait_status(ConnectionStatus.CONNECTED, timeout=10)
        await asyncio.sleep(0.5)
        assert len(woken) == 1
    finally:
        await agent.close()


async def test_a_new_process_gets_the_wake_it_missed(master: Master) -> None:
    """An agent that closed before the wake came due: the next client of the session (a new
    process, no saved state) is told of it once, on its attach."""
    async with RawpClient(
        master.ws_url, "s-wake-4", role="client", token=API_KEY, create=True
    ) as first:
        rid = await first.revisit(dt.timedelta(seconds=0.5), "resume the job")
    await asyncio.sleep(1.5)  # due while nobody is attached
    woken: list[F.Wake] = []
    async with RawpClient(
        master.ws_url, "s-wake-4", role="client", token=API_KEY, on_wake=woken.append
    ) as second:
        await wait_until(lambda: bool(woken), within=15, what="the missed wake")
        await asyncio.sleep(0.5)
        assert [w.payload.revisit_id for w in woken] == [rid]
        assert second.view.status == "idle"


async def test_live_wake_and_coroutine_callback(master: Master) -> None:
    """An attached client gets the wake live; a coroutine callback runs and may send."""
    answered = asyncio.Event()

    async def on_wake(wake: F.Wake) -> None:
        turn = await agent.turn_start()
        await agent.turn_end(turn.payload.turn_id)
        await agent.usage(input_tokens=1, output_tokens=1)
        answered.set()

    agent = RawpClient(
        master.ws_url, "s-wake-2", role="client", token=API_KEY, create=True, on_wake=on_wake
    )
    seen: list[str] = []
    async with agent:
        remove = agent.add_wake_callback(lambda w: seen.append(w.payload.revisit_id))
        await agent.revisit(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=0.5), revisit_id="soon")
        later = await agent.revisit(dt.timedelta(days=30))
        await asyncio.wait_for(answered.wait(), 15)
        assert seen == ["soon"]
        await agent.cancel_revisit(later)
        await agent.flush(timeout=10)
        assert agent.view.status == "idle"
        remove()


async def test_refusals_reach_the_caller(master: Master) -> None:
    """A time too far ahead is refused invalid_revisit; an edge may not ask at all."""
    async with RawpClient(
        master.ws_url, "s-wake-3", role="client", token=API_KEY, create=True
    ) as agent:
        with pytest.raises(FrameRefused) as refused:
            await agent.revisit(dt.timedelta(days=400))
        assert refused.value.code == "invalid_revisit"
        async with RawpClient(master.ws_url, "s-wake-3", role="edge", token=API_KEY) as edge:
            with pytest.raises(DirectionError):
                await edge.revisit(dt.timedelta(seconds=5))
