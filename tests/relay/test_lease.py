"""relay/lease.py: a REST write goes ahead only under a current, recently confirmed lease.

Against our own redis-server (tests/conftest.py); the clock checks use the node's monotonic
clock as the lease does.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from protocol.errors import StoreUnavailableError
from relay.lease import WriteLease
from relay.store.redis import NodeFencedError, RedisStore
from tests.contract.test_store_contract import entry, new_session
from tests.support.redis_server import RedisServer

__all__: list[str] = []

pytestmark = pytest.mark.redis


@pytest.fixture
async def store(redis_server: RedisServer) -> AsyncIterator[RedisStore]:
    """A registered node's store (a first lease epoch)."""
    opened = RedisStore(redis_server.url, node_id=f"lease-{time.monotonic_ns()}")
    await opened.node_heartbeat(opened.node_id, new_epoch=True)
    yield opened
    await opened.close()


async def test_a_lease_never_confirmed_writes_nothing(store: RedisStore) -> None:
    """Before any heartbeat was answered, a write is refused and nothing is held."""
    lease = WriteLease(store, dead_after_s=5.0)
    s = await new_session(store)
    with pytest.raises(StoreUnavailableError, match="not confirmed"):
        async with lease.writing(s):
            pass
    assert await store.held_sessions(store.node_id) == []


async def test_a_stale_confirmation_writes_nothing(store: RedisStore) -> None:
    """A confirmation older than most of dead-after (a pause) refuses the write."""
    lease = WriteLease(store, dead_after_s=2.0)
    lease.confirmed(time.monotonic() - 1.6)
    s = await new_session(store)
    with pytest.raises(StoreUnavailableError, match="not confirmed"):
        async with lease.writing(s):
            pass


async def test_a_request_is_served_under_the_lease_it_arrived_under(store: RedisStore) -> None:
    """A request that arrived under a lease the node has since replaced is refused."""
    lease = WriteLease(store, dead_after_s=5.0)
    lease.arrived()
    await store.node_heartbeat(store.node_id, new_epoch=True)  # a new lease meanwhile
    lease.confirmed(time.monotonic())
    s = await new_session(store)
    with pytest.raises(StoreUnavailableError, match="declared dead"):
        async with lease.writing(s):
            pass


async def test_a_fresh_lease_holds_the_session_while_writing(store: RedisStore) -> None:
    """Under a fresh lease the session is held during the write (a sweep would fence it),
    the write carries the lease, and the hold ends with it."""
    lease = WriteLease(store, dead_after_s=5.0)
    lease.confirmed(time.monotonic())
    s = await new_session(store)
    async with lease.writing(s):
        assert await store.held_sessions(store.node_id) == [s]
        assert store.write_epoch() == store.lease_epoch
        await store.append(s, [entry("written")])
    assert await store.held_sessions(store.node_id) == []
    assert [e.message_id for e in await store.read(s)] == ["written"]


async def test_a_sweep_during_the_write_fences_it(
    store: RedisStore, redis_server: RedisServer
) -> None:
    """Declared dead and swept while the write is in progress: the store refuses it."""
    sweeper = RedisStore(redis_server.url, node_id="lease-sweeper")
    try:
        lease = WriteLease(store, dead_after_s=5.0)
        lease.confirmed(time.monotonic())
        s = await new_session(store)
        async with lease.writing(s):
            epoch = await sweeper.claim_node(
                store.node_id, dead_after_ms=0, lease_ms=5000, token="t"
            )
            assert epoch == store.lease_epoch
            for held in await sweeper.held_sessions(store.node_id):
                assert await sweeper.fence_node(held, store.node_id, epoch)
            with pytest.raises(NodeFencedError):
                await store.append(s, [entry("late")])
        assert await store.read(s) == []
    finally:
        await sweeper.close()
