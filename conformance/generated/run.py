"""``--generate N``: N random sessions against one master, each judged against the model.

Sessions run one after another, each with its own session id; a failing session is shrunk
(:mod:`.shrink`) and reported as its minimal session's wire transcript with the first
disagreement marked, and the seed and index that reproduce it. Every session becomes a
:class:`~conformance.runner.Result` (a MUST: the model states MUST rules only), so the summary,
``--json``, ``--junit`` and ``--html`` carry generated failures like the hand-written ones.

Transcripts are compared across runs in their *normalized* form (:func:`normalized`): the
session id, the master's URLs, timestamps and every UUID (numbered in order of appearance)
are replaced, so two runs with one seed print the same text.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, TextIO

import aiohttp

from ..case import Case
from ..runner import Result, Target
from ..transcript import Transcript
from .drive import DISAGREEMENT, END_OF_SESSION, Played, play
from .generator import generate
from .shrink import shrink
from .steps import Step

__all__ = [
    "SECTION",
    "Generated",
    "GeneratedProgress",
    "normalized",
    "run_generated",
]

SECTION: Final = "generated"
_SPEC: Final = "generated sessions (reference model: rawp-notes §5–§9, RAWP 1.0.2 §7)"
_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIME: Final = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
_EPOCH: Final = re.compile(r'"epoch":"[^"]*"')
_ACK: Final = '"type":"connection.ack"'
_SECONDS: Final = re.compile(r"\d+\.\d+s\b")


@dataclass
class Generated:
    """One generated session: its steps, its verdict and, when it failed, its minimal form."""

    seed: int
    index: int
    steps: list[Step]
    played: Played
    session_id: str
    minimal: list[Step] = field(default_factory=list)
    minimal_played: Played | None = None
    minimal_session_id: str = ""
    tries: int = 0

    @property
    def case_id(self) -> str:
        """``generated/<seed>-<index>``."""
        return f"{SECTION}/{self.seed}-{self.index}"

    def report(self, target: Target) -> str:
        """The failure as printed: reproduction, minimal steps, normalized marked transcript."""
        played = self.minimal_played or self.played
        steps = self.minimal if self.minimal_played is not None else self.steps
        sid = self.minimal_session_id if self.minimal_played is not None else self.session_id
        lines = [
            f"{self.case_id}: {played.details}",
            f"  reproduce: rawp conformance --generate {self.index + 1} --seed {self.seed}",
            f"  minimal session: {len(steps)} of {len(self.steps)} steps "
            f"({self.tries} runs to shrink)",
        ]
        lines += [f"    {n}. {s.describe()}" for n, s in enumerate(steps, 1)]
        lines.append("  wire transcript (normalized):")
        lines += [
            ("  >>> " if DISAGREEMENT in line else "      ") + line
            for line in normalized(played.transcript, sid, target)
        ]
        return "\n".join(lines)


class GeneratedProgress:
    """Prints a line per tenth of the run, and every session that did not pass in full."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.started = time.perf_counter()
        self.counts: dict[str, int] = {}

    def __call__(self, index: int, total: int, g: Generated, result: Result) -> None:
        self.counts[result.status] = self.counts.get(result.status, 0) + 1
        if result.status != "PASS":
            print(f"{result.status} {result.details}", file=self.stream, flush=True)
        if index == total or index % max(1, total // 10) == 0:
            took = time.perf_counter() - self.started
            counts = ", ".join(f"{n} {s}" for s, n in sorted(self.counts.items()))
            print(
                f"[{index}/{total}] {counts} — {took:.1f}s, {1000 * took / index:.1f} ms a session",
                file=self.stream,
                flush=True,
            )


def normalized(transcript: Transcript, session_id: str, target: Target) -> list[str]:
    """The session's events without what differs between runs: ids, times, ports, the
    master's acks (their batching is its own) and the cleanup after the session."""
    numbers: dict[str, str] = {}

    def number(match: re.Match[str]) -> str:
        return numbers.setdefault(match.group(0), f"<id{len(numbers) + 1}>")

    lines = []
    for event in transcript.events:
        if event.kind == "note" and event.text == END_OF_SESSION:
            break  # the cleanup's closes race the master's: not part of the session
        if event.kind == "recv" and _ACK in event.text:
            continue  # when and how many acks arrive is the master's business (notes §16.3)
        text = event.text.replace(session_id, "<session>")
        text = text.replace(target.ws_url, "<ws-url>").replace(target.http_url, "<http-url>")
        text = _EPOCH.sub('"epoch":"<epoch>"', _TIME.sub("<time>", text))
        text = _SECONDS.sub("<s>", _UUID.sub(number, text))
        code = event.close_code if event.close_code is not None else event.http_status
        mark = f" [{code}]" if code is not None else ""
        lines.append(f"{event.who} {event.kind}{mark} {text}")
    return lines


def _session_id(seed: int, index: int, run: str) -> str:
    return f"gen-{seed}-{index}-{run}"


def _case(g: Generated) -> Case:
    async def body(ctx: object) -> None:  # generated sessions run through play(), not a body
        raise NotImplementedError

    return Case(
        id=g.case_id,
        level="MUST",
        description=f"generated session {g.index} of seed {g.seed} ({len(g.steps)} steps)",
        kill="any difference from the reference model",
        body=body,
        spec=_SPEC,
    )


def result_of(g: Generated, target: Target) -> Result:
    """The runner's :class:`Result` for one generated session."""
    played = g.minimal_played or g.played
    details = g.report(target) if played.status == "FAIL" else played.details
    if played.status == "FAIL" and g.minimal_played is not None:
        played.transcript.add("runner", "note", f"minimal session of {g.case_id}")
    return Result(
        case=_case(g),
        status=played.status,
        details=details,
        duration_s=0.0,
        transcript=played.transcript,
    )


async def run_generated(
    target: Target,
    *,
    count: int,
    seed: int,
    timeout: float,
    read_timeout: float = 5.0,
    shrink_failures: bool = True,
    max_shrink_runs: int = 60,
    concurrency: int = 8,
    stop_on_failure: bool = False,
    on_result: Callable[[int, int, Generated, Result], None] | None = None,
) -> list[Result]:
    """Run sessions ``0 … count-1`` of ``seed``; ``on_result`` after each, in order.

    ``timeout`` bounds one step of a session (the session: its steps + 2 times that);
    ``read_timeout`` bounds the wait for one expected frame or close: a master that sends
    nothing fails the session after it, so it is generous (a loaded machine is slow, not wrong).

    ``stop_on_failure`` ends the run at the first failing session (in index order).
    Up to ``concurrency`` sessions run at once: each has its own session id and sockets, and
    no step of one waits on another, so running them side by side changes no verdict.
    """
    results: list[Result] = []
    async with aiohttp.ClientSession(trust_env=False) as http:
        runner = _Runner(target, http, seed, timeout, read_timeout)

        async def one(index: int) -> tuple[Generated, Result]:
            started = time.perf_counter()
            g = await runner.session(index)
            if g.played.status == "FAIL" and shrink_failures:
                await runner.shrink(g, max_shrink_runs)
            result = result_of(g, target)
            result.duration_s = time.perf_counter() - started
            return g, result

        pending: deque[asyncio.Task[tuple[Generated, Result]]] = deque()
        try:
            for index in range(count + 1):
                while pending and (len(pending) >= max(1, concurrency) or index == count):
                    g, result = await pending.popleft()
                    results.append(result)
                    if on_result is not None:
                        on_result(g.index + 1, count, g, result)
                    if stop_on_failure and result.status == "FAIL":
                        return results
                if index < count and not (stop_on_failure and _failed(results)):
                    pending.append(asyncio.create_task(one(index)))
        finally:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
    return results


def _failed(results: list[Result]) -> bool:
    return bool(results) and results[-1].status == "FAIL"


class _Runner:
    def __init__(
        self,
        target: Target,
        http: aiohttp.ClientSession,
        seed: int,
        timeout: float,
        read_timeout: float,
    ) -> None:
        self.target = target
        self.http = http
        self.seed = seed
        self.timeout = timeout
        self.read_timeout = read_timeout
        self.run = secrets.token_hex(3)

    async def play(self, steps: list[Step], session_id: str) -> Played:
        return await play(
            steps,
            self.target,
            self.http,
            session_id=session_id,
            timeout=self.timeout,
            read_timeout=self.read_timeout,
        )

    async def session(self, index: int) -> Generated:
        steps = generate(self.seed, index)
        sid = _session_id(self.seed, index, self.run)
        return Generated(self.seed, index, steps, await self.play(steps, sid), sid)

    async def shrink(self, g: Generated, max_runs: int) -> None:
        """Make ``g`` minimal: the shortest sub-session found that still fails."""

        async def fails(candidate: list[Step]) -> bool:
            g.tries += 1
            attempt = _session_id(self.seed, g.index, f"{self.run}-s{g.tries}")
            return (await self.play(candidate, attempt)).status == "FAIL"

        minimal = await shrink(g.steps, fails, max_runs=max_runs)
        # Run the minimal session once more for its transcript: a flaky failure keeps the
        # original session's.
        sid = _session_id(self.seed, g.index, f"{self.run}-min")
        played = await self.play(minimal, sid)
        if played.status == "FAIL":
            g.minimal, g.minimal_played, g.minimal_session_id = minimal, played, sid
