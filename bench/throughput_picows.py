"""Relay throughput with a server-bound load generator (issue 16), every store.

:mod:`bench.throughput` exactly (same relays, rounds, closed loop, window, frame mix, curve
by number of edges, aims), but the client and edges are picows connections
(``bench._loadgen throughput_picows``, :mod:`bench._stormgen`): frames are parsed in C and
an edge only looks at a frame's first bytes, so the generator's process costs a fraction
of the relay's and the figure is the relay's. The relays: the minimal websockets fan-out
relay (:mod:`bench.baseline_relay`), the master with the memory store, with the SQLite
store (a fresh file per round in a temporary directory) and with the Redis store (a
``redis-server`` this benchmark starts on a free loopback port, AOF fsynced always).
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any, Final

from . import throughput

__all__ = ["DESCRIPTION", "NAME", "markdown", "plot", "run"]

NAME: Final = "throughput_picows"
DESCRIPTION: Final = "throughput as `throughput`, picows generator: memory, sqlite, redis stores"


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure every relay with the picows generator (see the module docstring)."""
    return asyncio.run(throughput._run(args, name=NAME, role="throughput_picows"))


def plot(result: dict[str, Any], directory: Path) -> dict[str, str]:
    """Deliveries/s and frames/s by number of edges, one line per relay."""
    return throughput.plot(result, directory)


def markdown(result: dict[str, Any]) -> str:
    """The result as :mod:`bench.throughput` writes it."""
    return throughput.markdown(result)
