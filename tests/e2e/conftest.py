"""A master per test, in this process, on free loopback ports, with a known API key."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import pytest

from relay.config import Settings
from relay.server import Master

API_KEY = "rk_test_key"
OTHER_KEY = "rk_other_workspace"


def test_settings(**changes: Any) -> Settings:
    """Settings for a test master: ephemeral ports, short timeouts."""
    base = Settings(
        host="127.0.0.1",
        ws_port=0,
        http_port=0,
        api_keys=(f"default:{API_KEY}", f"other:{OTHER_KEY}"),
        reattach_window_s=2.0,
        hello_timeout_s=1.0,
        shutdown_timeout_s=2.0,
        node_id="m-test",
    )
    return replace(base, **changes)


@pytest.fixture
async def make_master() -> AsyncIterator[Callable[..., Any]]:
    """Start masters with given settings; all are stopped at the end of the test."""
    masters: list[Master] = []

    async def start(**changes: Any) -> Master:
        master = Master(test_settings(**changes))
        await master.start()
        masters.append(master)
        return master

    yield start
    for master in masters:
        await master.stop()


@pytest.fixture
async def master(make_master: Callable[..., Any]) -> Master:
    """A master with default test settings."""
    started: Master = await make_master()
    return started
