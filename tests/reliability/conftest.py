"""Masters for the reliability suites: in this process, free loopback ports, test keys.

The settings come from the end-to-end suite (:func:`tests.e2e.conftest.test_settings`); the
reliability suites change only what each one is about (limits, windows).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from relay.server import Master
from tests.e2e.conftest import test_settings

__all__ = ["make_master", "master"]


@pytest.fixture
async def make_master() -> AsyncIterator[Callable[..., Any]]:
    """Start masters with given settings; all are stopped at the end of the test."""
    masters: list[Master] = []

    async def start(**changes: Any) -> Master:
        started = Master(test_settings(**changes))
        await started.start()
        masters.append(started)
        return started

    yield start
    for started in masters:
        await started.stop()


@pytest.fixture
async def master(make_master: Callable[..., Any]) -> Master:
    """A master with the test settings."""
    started: Master = await make_master()
    return started
