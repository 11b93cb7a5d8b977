"""The collector's settings a started master applies (relay.heap, issue 16)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from relay import heap

__all__: list[str] = []


@pytest.fixture
def restored_gc() -> Iterator[None]:
    """Put the collector's thresholds and frozen objects back after the test."""
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def test_settle_freezes_startup_and_raises_only_the_young_threshold(restored_gc: None) -> None:
    """settle freezes what exists and sets the young threshold, keeping the older ratios."""
    gc.set_threshold(700, 10, 10)
    gc.unfreeze()
    heap.settle()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (heap.YOUNG_THRESHOLD, 10, 10)
