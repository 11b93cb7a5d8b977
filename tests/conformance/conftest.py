"""Masters for the conformance tests: in this process, short reattach window and hello timeout."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from conformance.runner import Target
from relay.config import Settings
from relay.server import Master

API_KEY = "rk_conformance_test_key"
OTHER_WORKSPACE_KEY = "rk_conformance_other_workspace"
REATTACH_WINDOW_S = 0.5
HELLO_TIMEOUT_S = 0.5


def conformance_settings(**changes: Any) -> Settings:
    """A master the whole suite can run against: ephemeral ports, short window and timeout."""
    base: dict[str, Any] = {
        "host": "127.0.0.1",
        "ws_port": 0,
        "http_port": 0,
        "api_keys": (f"default:{API_KEY}", f"other:{OTHER_WORKSPACE_KEY}"),
        "reattach_window_s": REATTACH_WINDOW_S,
        "hello_timeout_s": HELLO_TIMEOUT_S,
        "shutdown_timeout_s": 2.0,
        "node_id": "m-conformance",
    }
    base.update(changes)
    return Settings(**base)


def target_of(master: Master) -> Target:
    """The runner's view of an in-process master."""
    return Target(
        ws_url=master.ws_url,
        http_url=master.http_url,
        api_key=API_KEY,
        hello_timeout_s=HELLO_TIMEOUT_S,
        other_api_key=OTHER_WORKSPACE_KEY,
    )


@pytest.fixture
async def start_master(
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Callable[[], Awaitable[Master]]]:
    """Start masters (after any kill is applied); stopped before the patches are undone."""
    masters: list[Master] = []

    async def start() -> Master:
        master = Master(conformance_settings())
        await master.start()
        masters.append(master)
        return master

    yield start
    for master in masters:
        await master.stop()
