"""The fault tests' cluster: two real nodes and a redis-server of the test module's own."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.faults.harness import FaultCluster
from tests.support.redis_server import redis_server_binary


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[FaultCluster]:
    """Two nodes and a redis-server, proxies between them, one per test module (each test
    heals it and uses a session of its own)."""
    if redis_server_binary() is None:
        pytest.skip("redis-server is not on PATH")
    started = FaultCluster(tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]))
    try:
        await started.start()
        yield started
    finally:
        await started.stop()
