"""The cyclic garbage collector's settings for a running master (issue 16).

Started, a master holds a few hundred long-lived objects per connection, and every attach
allocates a few hundred more that live for the handshake's milliseconds. With CPython's
default threshold (a young collection every 700 net allocations), a burst of attaches finds
many of those in flight at each young collection: they are promoted, count as long-lived and
trigger full collections, each of which walks every connection's objects. Measured on the
100 sessions × 100 edges storm of ``make bench ARGS=storm`` (10,000 connections, collector
time by generation from ``gc.callbacks``): 20 full collections took 11.8 of the master's
47.4 CPU-seconds, and the reconnect itself 23.5 CPU-s; with the young threshold at 50,000,
one full collection (0.04 s), 33.6 CPU-s in all, 14.5 for the reconnect (peak RSS 293 MiB
instead of 238: young garbage waits longer). With 1,000 connections the difference is within
the noise. The older generations keep their default ratios (one middle collection per 10
young, one full per 10 middle and no sooner than CPython's 25 % growth rule), so cyclic
garbage is still found.
"""

from __future__ import annotations

import gc
from typing import Final

__all__ = ["YOUNG_THRESHOLD", "settle"]

YOUNG_THRESHOLD: Final = 50_000


def settle() -> None:
    """Once started: what startup made (modules, app, decoders) lives for good, so it goes out
    of the collector's way (full collections stay short: p99.9 latency, ``make bench
    ARGS=latency``), and young collections run every :data:`YOUNG_THRESHOLD` allocations."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
