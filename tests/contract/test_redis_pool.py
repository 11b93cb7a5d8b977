"""The redis store's connection pool: a free connection at once, else wait for one given back
(first come first served), refused only after its wait; a waiter that leaves passes it on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError

from relay.store.redis.pool import WaitingPool
from tests.support.redis_server import RedisServer

__all__: list[str] = []

pytestmark = [pytest.mark.redis, pytest.mark.timeout(30)]


@pytest.fixture
async def pool(redis_server: RedisServer) -> AsyncIterator[WaitingPool]:
    """A pool of two connections to our own Redis, waiting at most 1 s."""
    p = WaitingPool.from_url(redis_server.url, max_connections=2, timeout=1.0)
    assert isinstance(p, WaitingPool)
    yield p
    await p.disconnect()


async def test_waiters_get_connections_in_the_order_they_asked(pool: WaitingPool) -> None:
    """With both connections taken, three waiters are served one by one as they come back."""
    held = [await pool.get_connection(), await pool.get_connection()]
    served: list[int] = []

    async def wait_for_one(i: int) -> AbstractConnection:
        connection = await pool.get_connection()
        served.append(i)
        return connection

    waiters = [asyncio.create_task(wait_for_one(i)) for i in range(3)]
    await asyncio.sleep(0.05)
    assert served == []
    await pool.release(held.pop())
    first = await waiters[0]
    await pool.release(held.pop())
    await waiters[1]
    await pool.release(first)
    await waiters[2]
    assert served == [0, 1, 2]
    assert not pool._waiters


async def test_a_pool_that_stays_full_refuses_after_its_wait(pool: WaitingPool) -> None:
    """Nothing comes back within the wait: redis-py's ConnectionError, and no waiter is left."""
    held = [await pool.get_connection(), await pool.get_connection()]
    with pytest.raises(RedisConnectionError, match="No connection available"):
        await pool.get_connection()
    assert not pool._waiters
    for connection in held:
        await pool.release(connection)
    again = await pool.get_connection()  # served at once once given back
    await pool.release(again)


async def test_a_waiter_cancelled_once_woken_passes_the_connection_on(pool: WaitingPool) -> None:
    """A waiter woken for a connection but cancelled before it ran must not strand it."""
    held = [await pool.get_connection(), await pool.get_connection()]
    leaving = asyncio.create_task(pool.get_connection())
    staying = asyncio.create_task(pool.get_connection())
    await asyncio.sleep(0.05)
    await pool.release(held.pop())  # wakes `leaving` ...
    leaving.cancel()  # ... which is cancelled before it runs
    connection = await asyncio.wait_for(staying, 0.5)  # well within the pool's 1 s wait
    with pytest.raises(asyncio.CancelledError):
        await leaving
    await pool.release(connection)
    await pool.release(held.pop())


async def test_commands_through_the_pool_are_answered(pool: WaitingPool) -> None:
    """Forty commands at once through two connections all get their own answers."""
    client = aioredis.Redis.from_pool(pool)
    await asyncio.gather(*(client.set(f"pool-test:{i}", i) for i in range(40)))
    got = await asyncio.gather(*(client.get(f"pool-test:{i}") for i in range(40)))
    assert got == [str(i).encode() for i in range(40)]
