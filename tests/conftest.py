"""Fixtures shared by every suite: test-owned Redis servers (never the machine's 6379)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest

from tests.support.redis_server import RedisCluster, RedisServer, redis_server_binary

__all__ = ["redis_cluster", "redis_server"]


def _need_redis() -> None:
    if redis_server_binary() is None:
        reason = "redis-server is not on PATH: every redis store test is SKIPPED (install redis)"
        warnings.warn(reason, stacklevel=2)
        pytest.skip(reason)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """Our own redis-server on a free 127.0.0.1 port, AOF fsynced on every write."""
    _need_redis()
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """Our own 3-primary Redis Cluster on free 127.0.0.1 ports."""
    _need_redis()
    cluster = RedisCluster(tmp_path_factory.mktemp("redis-cluster"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.kill()
