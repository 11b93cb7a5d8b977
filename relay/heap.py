"""The cyclic garbage collector's settings for a running master (issue 16).

Started, a master holds tens of thousands of long-lived objects per thousand connections, and
every attach allocates a few hundred more that live for the handshake's milliseconds. With
CPython's default threshold (a young collection every 700 net allocations), a burst of
attaches finds many of those in flight at each young collection: they are promoted, count as
long-lived, and trigger full collections, each of which walks every connection's objects. So
an attach storm spent much of its CPU in the collector (``make bench ARGS=storm``: CPU per
attach 1.9–2.3 ms against 1.3–1.5 ms with the young threshold at 50,000). Collecting the
young generation every 50,000 allocations lets handshake objects die young; the older
generations keep their default ratios (one middle collection per 10 young, one full per 10
middle and no sooner than CPython's 25 % growth rule), so cyclic garbage is still found.
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
