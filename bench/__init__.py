"""Benchmarks of the RAWP master relay: ``python -m bench [NAME ...]`` (``make bench``).

Each benchmark is a module of this package that defines

* ``NAME`` — the name it is run by (``python -m bench validation``);
* ``DESCRIPTION`` — one line for ``--list``;
* ``run(args) -> dict`` — measures, prints nothing, returns a JSON-able result;
* ``markdown(result) -> str`` — the result as a Markdown table (printed and saved).

:mod:`bench.__main__` finds the modules, runs the ones asked for (all by default) and writes
``bench/results/<NAME>.json`` and ``bench/results/<NAME>.md``, then ``summary.md`` with every
headline figure next to its baseline and aim. :func:`measure` is the shared timing loop.

The relay benchmarks (``throughput``, ``latency``, ``reattach``, ``churn``, ``storm``,
``memory``, ``fuzz``, ``faults``) run the relay under test as its own process on 127.0.0.1
and the load as separate, bounded processes that stop by themselves:

* ``_master`` — the master as ``rawp serve`` builds it, plus profiling and a control channel;
* ``baseline_relay`` — the baseline: a minimal websockets fan-out relay;
* ``_loadgen`` — load-generator processes (JSON lines on stdin/stdout); its ``storm`` roles
  (``_stormgen``) use picows clients (bench dependency group), so the generator is not
  the bottleneck of an attach-rate measurement, and so do ``throughput_picows``'s;
* ``_wsraw`` — a minimal RFC 6455 client on raw sockets (cheap enough for 10,000 edges, and
  able to send what a correct client never does); ``_workload`` — the frames;
* ``_procs``, ``_profile``, ``_report`` — processes, py-spy/cProfile summaries, tables.

``lifecycle`` measures what detached sessions cost (RSS, store bytes and rows) and the
expiry sweep of windows that end at once (``--sessions N``, ``--before REF``).

``conformance_determinism`` runs the whole conformance suite against an in-process master,
twenty times, with random delays injected into its connection handling, and reports whether
every case kept one verdict.

Common flags: ``--quick`` (short runs), ``--loop asyncio|uvloop`` (the relays' event loop),
``--no-profile``. Plots are not drawn: matplotlib is not a dependency of this project.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Measurement", "measure"]


@dataclass(frozen=True)
class Measurement:
    """Throughput of one operation: calls per second over several timed rounds."""

    calls_per_round: int
    rounds: list[float]  # calls per second of each round

    @property
    def median(self) -> float:
        """Median calls per second."""
        return statistics.median(self.rounds)

    @property
    def best(self) -> float:
        """Best round's calls per second."""
        return max(self.rounds)


def measure(func: Callable[[], object], *, seconds: float = 1.0, rounds: int = 5) -> Measurement:
    """Time ``func`` in a tight loop, like :mod:`timeit` (garbage collector paused).

    The number of calls per round is calibrated so one round takes about ``seconds``.
    """
    calls = 1
    while True:
        elapsed = _time(func, calls)
        if elapsed >= 0.2 or calls >= 1 << 30:
            break
        calls *= 2 if elapsed > 0.02 else 10
    calls = max(1, int(calls * seconds / max(elapsed, 1e-9)))
    results = [calls / _time(func, calls) for _ in range(rounds)]
    return Measurement(calls_per_round=calls, rounds=results)


def _time(func: Callable[[], object], calls: int) -> float:
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(calls):
            func()
        return time.perf_counter() - start
    finally:
        if enabled:
            gc.enable()
