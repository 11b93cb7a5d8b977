"""The tests of this folder run on each event loop a master may run on: ``rawp serve`` takes
uvloop when it is installed, whose transports are not asyncio's classes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest
import uvloop

from tests.e2e.conftest import make_master, master

__all__ = ["make_master", "master", "pytest_asyncio_loop_factories"]


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Every test here on the plain asyncio loop and on uvloop."""
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
