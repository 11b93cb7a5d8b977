"""The contract suite's fixtures: one ``store`` per backend (memory, redis, redis-cluster)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from relay.store.base import Store
from relay.store.memory import MemoryStore
from tests.support.redis_server import RedisCluster, RedisServer

__all__ = ["Backend", "backend", "store"]

# redis ones carry the project's ``redis`` marker, so ``-m "not redis"`` leaves them out
BACKENDS = [
    "memory",
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("redis-cluster", marks=pytest.mark.redis),
]


class Backend:
    """Opens stores of one backend over one shared data set, and closes them after the test."""

    def __init__(self, name: str, server: RedisServer | RedisCluster | None) -> None:
        self.name = name
        self.server = server
        self._opened: list[Store] = []

    @property
    def durable(self) -> bool:
        """Whether the data outlives the process that wrote it."""
        return self.server is not None

    def open(self, **opts: Any) -> Store:
        """A new store; for redis a new client on the same server (so the same data)."""
        store: Store
        if self.server is None:
            store = MemoryStore(**opts)
        else:
            from relay.store.redis import RedisStore

            store = RedisStore(
                self.server.url, cluster=isinstance(self.server, RedisCluster), **opts
            )
        self._opened.append(store)
        return store

    def reopen(self, store: Store) -> Store:
        """A second view of ``store``'s data: a fresh connection (memory: the same object)."""
        return store if self.server is None else self.open()

    def flush(self) -> None:
        """Empty the server(s) so each test starts from nothing."""
        nodes = self.server.nodes if isinstance(self.server, RedisCluster) else [self.server]
        for node in nodes:
            if node is not None:
                with contextlib.closing(node.client()) as c:
                    c.flushall()

    async def aclose(self) -> None:
        """Close every store this backend opened."""
        for store in self._opened:
            await store.close()


@pytest.fixture(params=BACKENDS)
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    """The backend under test; redis ones get their own server (see tests/conftest.py)."""
    server: RedisServer | RedisCluster | None = None
    if request.param == "redis":
        server = request.getfixturevalue("redis_server")
    elif request.param == "redis-cluster":
        server = request.getfixturevalue("redis_cluster")
    b = Backend(request.param, server)
    if server is not None:
        b.flush()
    try:
        yield b
    finally:
        await b.aclose()


@pytest.fixture
def store(backend: Backend) -> Store:
    """A store of the backend under test, over an empty data set."""
    return backend.open()
