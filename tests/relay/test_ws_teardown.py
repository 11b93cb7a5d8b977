"""A closed connection is freed when it closes, not left in a cycle for the collector (issue 16)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from relay.server import Master
from tests.e2e.util import detached, new_session, wait_until


@pytest.fixture
def no_collector() -> Iterator[None]:
    """The cyclic collector off: what is freed here was freed by reference counting."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.usefixtures("no_collector")
async def test_a_detached_edge_leaves_nothing_for_the_collector(master: Master) -> None:
    """The edge's participant, outbox and server connection are freed once it detaches."""
    client, (edge,) = await new_session(master, "s-teardown")
    session = master.hub.sessions["s-teardown"]
    participant = session.participants[edge.participant_id]
    gone = [weakref.ref(o) for o in (participant, participant.outbox, participant.sink)]
    del participant
    await edge.ws.close()
    await detached(master, "s-teardown", edge)
    # The connection's handler task ends a loop step or two after the detach.
    await wait_until(lambda: all(ref() is None for ref in gone))
    await client.ws.close()
