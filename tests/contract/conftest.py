"""The contract suite's fixtures: one ``store`` per backend (memory, sqlite, redis, cluster)."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from relay.store.base import Store
from relay.store.memory import MemoryStore
from relay.store.sqlite import SqliteStore
from tests.support.redis_server import RedisCluster, RedisServer

__all__ = ["Backend", "backend", "store"]

# redis ones carry the project's ``redis`` marker, so ``-m "not redis"`` leaves them out
BACKENDS = [
    "memory",
    "sqlite",
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("redis-cluster", marks=pytest.mark.redis),
]


class Backend:
    """Opens stores of one backend over one shared data set, and closes them after the test."""

    def __init__(
        self, name: str, server: RedisServer | RedisCluster | None, directory: Path
    ) -> None:
        self.name = name
        self.server = server
        self.directory = directory
        self._opened: list[Store] = []
        self._files = itertools.count()

    @property
    def durable(self) -> bool:
        """Whether the data outlives the process that wrote it."""
        return self.server is not None or self.name == "sqlite"

    def open(self, **opts: Any) -> Store:
        """A new store; for redis a new client on the same server (so the same data); for
        sqlite a new database file (one process owns a file: see :meth:`crash`)."""
        store: Store
        if self.name == "sqlite":
            sqlite = SqliteStore(self.directory / f"rawp-{next(self._files)}.db", **opts)
            sqlite.open_blocking()
            store = sqlite
        elif self.server is None:
            store = MemoryStore(**opts)
        else:
            from relay.store.redis import RedisStore

            store = RedisStore(
                self.server.url, cluster=isinstance(self.server, RedisCluster), **opts
            )
        self._opened.append(store)
        return store

    def reopen(self, store: Store) -> Store:
        """A second view of ``store``'s data: a fresh connection (memory, sqlite: the same
        object, since one process owns a database file)."""
        return store if self.server is None else self.open()

    async def crash(self, store: Store) -> Store:
        """Lose the process state behind ``store`` and return a store over what survived:
        redis is SIGKILLed and restarted; sqlite's file is reopened by a new store after the
        old one let go of it (the kill -9 of a real process is tests/e2e/test_durable.py)."""
        if isinstance(store, SqliteStore):
            await store.close()
            again = SqliteStore(store.path)
            again.open_blocking()
            self._opened.append(again)
            return again
        assert self.server is not None
        self.server.restart(crash=True)
        return self.open()

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
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """The backend under test; redis ones get their own server (see tests/conftest.py)."""
    server: RedisServer | RedisCluster | None = None
    if request.param == "redis":
        server = request.getfixturevalue("redis_server")
    elif request.param == "redis-cluster":
        server = request.getfixturevalue("redis_cluster")
    b = Backend(request.param, server, tmp_path)
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
