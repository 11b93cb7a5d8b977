"""The conformance suite, run again and again against our master with random delays injected.

``python -m bench conformance_determinism [--quick]``: runs every conformance case
(``rawp conformance``'s registry) against one in-process master per run, ``--runs`` times
(20; 5 with ``--quick``), each with a fresh seed for the delays injected into the master's
connection handling (:func:`inject_delays`): before each frame a connection hands to its
session, before each attach and before each detach is handled, the master sleeps a random
0–``max_delay_ms`` (15 ms); and a frame queued for a socket that is already closed, but whose
close the master has not handled yet, counts as written (the participant's cursor includes
it), as in a correct master that writes to the dying socket. That changes how fast one
connection is processed relative to another — what a case must not depend on (issue: a
conformance runner a third party can trust). The result: per case, the verdicts seen across
the runs; the suite is deterministic when each case has one verdict.
``tests/conformance/test_determinism.py`` runs a few of these runs on every ``make test``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import pytest

from conformance.case import all_cases
from conformance.runner import Target, run_cases
from relay.config import Settings
from relay.fanout import Outbox
from relay.hub import Hub
from relay.server import Master
from relay.session import Session
from relay.ws import Connection

__all__ = [
    "DESCRIPTION",
    "NAME",
    "inject_delays",
    "markdown",
    "run",
    "run_suite_with_delays",
]

NAME: Final = "conformance_determinism"
DESCRIPTION: Final = "the conformance suite N times with random delays in connection handling"

_API_KEY: Final = "rk_conformance_determinism"
_MAX_DELAY_S: Final = 0.015
_CASE_TIMEOUT_S: Final = 5.0


def inject_delays(mp: pytest.MonkeyPatch, rng: random.Random, max_delay_s: float) -> None:
    """Make our master sleep a random 0–``max_delay_s`` before each step of a connection.

    The steps: a message or a close handed from the socket to its connection
    (``Connection.message``, ``Connection.peer_closed``: those of one connection stay in
    order, connections drift apart), an attach (``Hub.attach``) and a detach
    (``Session.detach``: the master notices a close later). Until the detach is handled,
    frames posted to the closed socket count as sent (``Outbox.post``), so the participant's
    cursor includes them — what a master that writes to a dying socket rightly does.
    """
    post = Outbox.post

    def post_to_dying_socket(self: Outbox, data: bytes, seq: int = 0) -> bool:
        queued = post(self, data, seq)
        if queued and seq and getattr(self._sink, "close_code", None) is not None:
            self._on_sent(seq)
        return queued

    mp.setattr(Outbox, "post", post_to_dying_socket)

    def delayed(owner: type[Any], name: str) -> None:
        original = getattr(owner, name)

        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(rng.uniform(0.0, max_delay_s))
            return await original(*args, **kwargs)

        mp.setattr(owner, name, wrapper)

    # What a socket brings (its messages, its close) reaches the connection later, in order;
    # its end comes after them (at once when nothing is waiting: a close the master sent
    # completes on time, only the detach that follows is late).
    message, closed = Connection.message, Connection.peer_closed
    gone = Connection.on_ws_disconnected
    queues: dict[Connection, asyncio.Queue[tuple[Any, ...]]] = {}
    waiting: Counter[Connection] = Counter()  # its events queued or being handled
    tasks: set[asyncio.Task[None]] = set()  # ended with the run's loop

    async def read_later(connection: Connection, queue: asyncio.Queue[tuple[Any, ...]]) -> None:
        while True:
            event = await queue.get()
            if event[0] == "gone":
                gone(connection, event[1])
                return
            await asyncio.sleep(rng.uniform(0.0, max_delay_s))
            if event[0] == "message":
                message(connection, event[1], event[2])
            else:
                closed(connection, event[1])
            waiting[connection] -= 1

    def later(connection: Connection, *event: Any) -> None:
        queue = queues.get(connection)
        if queue is None:
            queue = queues[connection] = asyncio.Queue()
            tasks.add(asyncio.get_running_loop().create_task(read_later(connection, queue)))
        waiting[connection] += 1
        queue.put_nowait(event)

    def gone_after_the_rest(self: Connection, transport: Any) -> None:
        if not waiting[self]:
            gone(self, transport)
        else:
            queues[self].put_nowait(("gone", transport))

    mp.setattr(Connection, "message", lambda self, data, text: later(self, "message", data, text))
    mp.setattr(Connection, "peer_closed", lambda self, code: later(self, "close", code))
    mp.setattr(Connection, "on_ws_disconnected", gone_after_the_rest)
    delayed(Session, "detach")
    delayed(Hub, "attach")


def _settings() -> Settings:
    return Settings(
        host="127.0.0.1",
        ws_port=0,
        http_port=0,
        api_keys=(f"default:{_API_KEY}",),
        reattach_window_s=0.5,
        hello_timeout_s=0.5,
        shutdown_timeout_s=2.0,
        node_id="m-determinism",
    )


async def _one_run(seed: int, max_delay_s: float) -> dict[str, str]:
    with _patched() as mp:
        inject_delays(mp, random.Random(seed), max_delay_s)
        master = Master(_settings())
        await master.start()
        try:
            target = Target(
                ws_url=master.ws_url,
                http_url=master.http_url,
                api_key=_API_KEY,
                hello_timeout_s=0.5,
            )
            results = await run_cases(target, all_cases(), timeout=_CASE_TIMEOUT_S)
        finally:
            await master.stop()
    return {r.case.id: r.status for r in results}


@contextmanager
def _patched() -> Iterator[pytest.MonkeyPatch]:
    mp = pytest.MonkeyPatch()
    try:
        yield mp
    finally:
        mp.undo()


def run_suite_with_delays(seed: int, max_delay_s: float = _MAX_DELAY_S) -> dict[str, str]:
    """One run of every case with delays seeded by ``seed``: case id → status."""
    return asyncio.run(_one_run(seed, max_delay_s))


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the suite ``runs`` times (5 with ``--quick``, else 20) and collect the verdicts."""
    runs = 5 if getattr(args, "quick", False) else 20
    verdicts: dict[str, Counter[str]] = {}
    durations: list[float] = []
    for seed in range(runs):
        started = time.perf_counter()
        statuses = run_suite_with_delays(seed)
        durations.append(time.perf_counter() - started)
        for case_id, status in statuses.items():
            verdicts.setdefault(case_id, Counter())[status] += 1
    unstable = {c: dict(v) for c, v in verdicts.items() if len(v) > 1}
    return {
        "runs": runs,
        "max_delay_ms": _MAX_DELAY_S * 1000,
        "cases": len(verdicts),
        "run_seconds": [round(d, 2) for d in durations],
        "deterministic": not unstable,
        "unstable_cases": unstable,
        "verdicts": {c: dict(v) for c, v in verdicts.items()},
    }


def markdown(result: dict[str, Any]) -> str:
    """The result as Markdown."""
    seconds = result["run_seconds"]
    lines = [
        f"# Conformance determinism: {result['runs']} runs, delays 0–{result['max_delay_ms']:g} ms",
        "",
        f"- cases: {result['cases']}",
        f"- deterministic (one verdict per case across every run): **{result['deterministic']}**",
        f"- seconds per run: min {min(seconds):.1f}, max {max(seconds):.1f}",
    ]
    totals: Counter[str] = Counter()
    for verdict in result["verdicts"].values():
        totals.update(verdict)
    lines.append(f"- verdicts over all runs: {dict(totals)}")
    if result["unstable_cases"]:
        lines += ["", "| case | verdicts |", "|---|---|"]
        for case_id, seen in result["unstable_cases"].items():
            lines.append(f"| `{case_id}` | {seen} |")
    return "\n".join(lines) + "\n"
