"""``rawp demo``: a master in this process plus a simulated agent producing realistic sessions.

The agent is a :class:`protocol.client.RawpClient` with role ``client`` (the same library a real
agent runtime uses) and speaks RAWP 1.0.2 §7 as a coding agent would (notes §4, §6): each turn
starts from a ``user.message`` (sent by a scripted user edge, or by any real edge such as the
dashboard), thinks (streamed thinking), calls tools with results (one fails now and then),
sometimes asks a person and waits for a ``control.interaction.response`` from an edge (with a
timeout fallback, so the demo never hangs), streams its answer, ends the turn with
``session.usage`` right after it (§7.5.2) and reports an occasional ``session.compacted``
(§7.2.1). A ``control.cancel`` from an edge ends the current turn ``cancelled``. After its
turns it asks to be woken a few seconds later (``session.revisit.request``, notes §17.5: the
session shows ``rescheduling``) and answers the ``session.wake`` with a short turn.

It prints where to watch: the WebSocket and HTTP URLs, the session id, an API key and the
``rawp tail`` command line. ``--turns N`` bounds the number of turns; ``--once`` runs one
bounded session (``--turns``, default 3), deletes it (§7.7) and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime as dt
import json
import random
import secrets
import shlex
import sys
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from protocol.client import Backoff, RawpClient
from protocol.frames import (
    Cancel,
    ContextWindow,
    CreateSpec,
    Deleted,
    InteractionResponse,
    Presence,
    PreservedElements,
    UserMessage,
    Wake,
)

from .auth import new_api_key
from .config import ConfigError, Settings, add_serve_arguments, settings_from_args

__all__ = [
    "DemoAgent",
    "DemoOptions",
    "Task",
    "ToolStep",
    "add_demo_parser",
    "dashboard_link",
    "run_demo",
]

_CONTEXT_CAPACITY: Final = 200_000
_COST_PER_INPUT_TOKEN: Final = 3e-6  # USD
_COST_PER_OUTPUT_TOKEN: Final = 15e-6


# --- the script ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolStep:
    """One tool call and what it returns."""

    tool: str
    input: dict[str, Any]
    output: Any
    status: Literal["ok", "error"] = "ok"


@dataclass(frozen=True)
class Task:
    """One canned user request and how the agent works on it."""

    prompt: str
    thinking: str
    tools: tuple[ToolStep, ...]
    answer: str
    question: tuple[Literal["confirmation", "choice", "input"], str, list[Any] | None] | None = None


TASKS: Final[tuple[Task, ...]] = (
    Task(
        prompt="The CLI ignores --verbose. Can you find out why?",
        thinking=(
            "The flag is probably parsed but never passed to the logger. I should look for "
            "where the arguments are parsed and where logging is configured."
        ),
        tools=(
            ToolStep(
                "grep",
                {"pattern": "verbose", "path": "src/"},
                "src/cli.py:18:    parser.add_argument('--verbose', action='store_true')",
            ),
            ToolStep(
                "read_file",
                {"path": "src/cli.py", "lines": "10-40"},
                "def main(argv):\n    args = parser.parse_args(argv)\n    "
                "configure_logging()\n    run(args)",
            ),
        ),
        answer=(
            "Found it: `--verbose` is parsed in `src/cli.py` but `configure_logging()` is "
            "called without it, so the level stays at INFO. Passing "
            "`level='DEBUG' if args.verbose else 'INFO'` fixes it."
        ),
    ),
    Task(
        prompt="Please fix it and run the tests.",
        thinking=(
            "A one-line change in main(). Editing files needs the user's go-ahead, so I will "
            "ask before applying the patch, then run the test suite."
        ),
        tools=(
            ToolStep("apply_patch", {"path": "src/cli.py", "hunks": 1}, "patched src/cli.py"),
            ToolStep(
                "run_tests",
                {"selector": "tests/test_cli.py"},
                "1 failed: test_verbose_sets_debug (expected DEBUG, got 10)",
                "error",
            ),
            ToolStep(
                "read_file",
                {"path": "tests/test_cli.py", "lines": "30-44"},
                "assert logging.getLogger().level == 'DEBUG'",
            ),
            ToolStep("run_tests", {"selector": "tests/test_cli.py"}, "12 passed in 0.41s"),
        ),
        answer=(
            "Done. The patch passes `--verbose` through to `configure_logging`. One test "
            "compared the level with a string; I fixed the assertion to `logging.DEBUG`, and "
            "all 12 CLI tests pass now."
        ),
        question=("confirmation", "Apply the patch to src/cli.py?", ["yes", "no"]),
    ),
    Task(
        prompt="Summarize what changed for the release notes.",
        thinking="Two changes: the flag fix and the test fix. The notes should mention the flag.",
        tools=(
            ToolStep("git_diff", {"stat": True}, " src/cli.py | 2 +-\n tests/test_cli.py | 2 +-"),
        ),
        answer=(
            "Release notes: *`--verbose` now enables debug logging* (it was parsed but "
            "ignored). Internal: a CLI test compared log levels as strings."
        ),
    ),
    Task(
        prompt="Which Python versions do we support?",
        thinking="pyproject.toml has requires-python; CI has a version matrix. Check both.",
        tools=(
            ToolStep("read_file", {"path": "pyproject.toml"}, 'requires-python = ">=3.11"'),
            ToolStep(
                "read_file",
                {"path": ".github/workflows/ci.yml"},
                "python-version: ['3.11', '3.12', '3.13']",
            ),
        ),
        answer="Python 3.11 and newer; CI tests 3.11, 3.12 and 3.13.",
        question=("choice", "Should I add 3.14 to the CI matrix?", ["yes", "no", "later"]),
    ),
)


# --- options -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DemoOptions:
    """What ``rawp demo`` was told besides the master's settings."""

    session_id: str = field(default_factory=lambda: "demo-" + secrets.token_hex(4))
    turns: int | None = None  # None: until stopped
    once: bool = False
    pace: float = 0.04  # seconds between streamed pieces
    pause: float = 2.0  # seconds between turns
    interaction_timeout: float = 20.0
    wait_for_edge: float = 0.0  # seconds to wait for a watcher before the first turn
    wake_after: float = 5.0  # after the turns, ask to be woken this much later (0: do not)
    seed: int | None = None


# --- the agent -----------------------------------------------------------------------------


class DemoAgent:
    """A scripted agent on a :class:`RawpClient` (role client)."""

    def __init__(self, client: RawpClient, options: DemoOptions) -> None:
        self.client = client
        self.options = options
        self.prompts: asyncio.Queue[str] = asyncio.Queue()
        self.answers: dict[str, asyncio.Future[Any]] = {}
        self.cancelled = asyncio.Event()
        self.ended = asyncio.Event()
        self.edges: set[str] = set()
        self.edge_attached = asyncio.Event()
        self.ignore_edges: set[str] = set()
        self.turns_done = 0
        self.wakes: asyncio.Queue[Wake] = asyncio.Queue()
        client.add_wake_callback(self.wakes.put_nowait)
        self._rng = random.Random(options.seed)
        self._cost = 0.0
        self._context = 12_000
        self._ids = 0

    def _id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}{self._ids}"

    async def listen(self) -> None:
        """Read what the master relays: prompts, answers, cancels, presence, the end."""
        async for frame in self.client:
            if isinstance(frame, UserMessage):
                await self.prompts.put(frame.payload.text)
            elif isinstance(frame, InteractionResponse):
                waiting = self.answers.pop(frame.payload.interaction_id, None)
                if waiting is not None and not waiting.done():
                    waiting.set_result(frame.payload.response)
            elif isinstance(frame, Cancel):
                self.cancelled.set()
            elif isinstance(frame, Presence):
                for change in frame.payload.all_changes():  # coalesced: several
                    if change.role != "edge":
                        continue
                    if change.state == "attached":
                        self.edges.add(change.participant_id)
                    else:
                        self.edges.discard(change.participant_id)
                if self.edges - self.ignore_edges:
                    self.edge_attached.set()
            elif isinstance(frame, Deleted):
                break
        self.ended.set()

    async def _pace(self, factor: float = 1.0) -> None:
        if self.options.pace > 0:
            await asyncio.sleep(self.options.pace * factor)

    async def _stream(self, kind: Literal["text", "thinking"], text: str) -> str:
        block = self._id("t" if kind == "text" else "k")
        words = text.split(" ")
        for index, word in enumerate(words):
            piece = word if index == 0 else " " + word
            if kind == "text":
                await self.client.text_delta(block, piece)
            else:
                await self.client.thinking_delta(block, piece)
            await self._pace()
            if self.cancelled.is_set():
                break
        return block

    async def run_turn(self, prompt: str, task: Task, index: int) -> str:
        """One whole turn for ``prompt``; returns its stop reason."""
        c = self.client
        self.cancelled.clear()
        turn = await c.turn_start(mode="code")
        turn_id = turn.payload.turn_id
        calls = 0
        stop: Literal["end_turn", "cancelled"] = "end_turn"
        open_call: str | None = None
        try:
            await c.agent_state("thinking")
            block = await self._stream("thinking", task.thinking)
            await c.thinking_done(block)
            if self.cancelled.is_set():
                raise _Cancelled
            preface = ""
            if task.question is not None:  # ask before acting, as a careful agent does
                preface = await self._ask(task.question)
            await c.agent_state("tool_calling")
            for step in task.tools:
                open_call = self._id("call-")
                await c.tool_request(open_call, step.tool, step.input)
                calls += 1
                await self._pace(4)
                if self.cancelled.is_set():
                    raise _Cancelled
                await c.tool_result(open_call, step.status, step.output)
                open_call = None
            answer = preface + task.answer
            if self.cancelled.is_set():
                raise _Cancelled
            await c.agent_state("responding")
            block = await self._stream("text", answer)
            await c.text_done(block, None if self.cancelled.is_set() else answer)
            if self.cancelled.is_set():
                raise _Cancelled
        except _Cancelled:
            stop = "cancelled"
            if open_call is not None:
                await c.tool_result(open_call, "cancelled", "cancelled by the user")
        await c.turn_end(turn_id, stop, tool_invocation_count=calls)
        await self._usage(turn_id, prompt, answer=task.answer)
        await c.agent_state("idle")
        if index % 4 == 2:
            await self._compact()
        self.turns_done += 1
        return stop

    async def revisit_and_answer(self, seconds: float, say: Callable[[str], None]) -> None:
        """Ask to be woken ``seconds`` from now, wait for the wake, answer it with a turn."""
        await self.client.revisit(
            dt.timedelta(seconds=seconds), "check whether CI passed on the --verbose fix"
        )
        say(f"the agent asked to be woken in {seconds:g} s (status: rescheduling)")
        wake = await asyncio.wait_for(self.wakes.get(), seconds + 60)
        say(f"the agent was woken ({wake.payload.reason})")
        c = self.client
        turn = await c.turn_start(mode="code")
        turn_id = turn.payload.turn_id
        await c.agent_state("tool_calling")
        call = self._id("call-")
        await c.tool_request(call, "ci_status", {"branch": "fix-verbose"})
        await self._pace(4)
        await c.tool_result(call, "ok", "passed: 3.11, 3.12, 3.13")
        answer = "I'm back as I said I would be: CI passed on 3.11, 3.12 and 3.13. The fix is done."
        await c.agent_state("responding")
        block = await self._stream("text", answer)
        await c.text_done(block, answer)
        await c.turn_end(turn_id, "end_turn", tool_invocation_count=1)
        await self._usage(turn_id, "wake", answer=answer)
        await c.agent_state("idle")
        self.turns_done += 1

    async def _ask(
        self, question: tuple[Literal["confirmation", "choice", "input"], str, list[Any] | None]
    ) -> str:
        kind, prompt, options = question
        iid = self._id("ask-")
        waiting: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.answers[iid] = waiting
        await self.client.agent_state("awaiting_input")
        await self.client.interaction_request(iid, kind, prompt, options)
        try:
            response = await asyncio.wait_for(waiting, self.options.interaction_timeout)
        except TimeoutError:
            self.answers.pop(iid, None)
            # notes §16.4: withdraw the question, so the session leaves requires_action and
            # the dashboard drops its buttons
            await self.client.interaction_cancel(
                iid, f"no answer within {self.options.interaction_timeout:g} s"
            )
            default = options[0] if options else "ok"
            return (
                f"(No answer within {self.options.interaction_timeout:g} s, so I went with "
                f"{_shown(default)}.) "
            )
        return f"(You answered {_shown(response)}.) "

    async def _usage(self, turn_id: str, prompt: str, *, answer: str) -> None:
        input_tokens = self._context + len(prompt) // 4 + self._rng.randint(200, 900)
        output_tokens = len(answer) // 4 + self._rng.randint(50, 300)
        thinking_tokens = self._rng.randint(80, 400)
        self._context = min(_CONTEXT_CAPACITY, self._context + output_tokens + 1500)
        self._cost += input_tokens * _COST_PER_INPUT_TOKEN
        self._cost += (output_tokens + thinking_tokens) * _COST_PER_OUTPUT_TOKEN
        await self.client.usage(
            turn_id=turn_id,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            thinking_tokens=thinking_tokens,
            cache_read_tokens=self._context // 2,
            cost_used=round(self._cost, 6),
            cost_limit=25.0,
            cost_unit="USD",
            messages_used=self.turns_done + 1,
            messages_limit=500,
            time_to_reset="PT4H30M",
            context_window=ContextWindow(
                capacity=_CONTEXT_CAPACITY,
                used=self._context,
                utilization=round(self._context / _CONTEXT_CAPACITY, 4),
            ),
        )

    async def _compact(self) -> None:
        previous = self._context
        self._context = max(4_000, previous // 5)
        await self.client.compacted(
            "Investigated the ignored --verbose flag in src/cli.py, patched configure_logging "
            "to honour it and fixed a CLI test that compared log levels as strings.",
            previous,
            self._context,
            trigger="auto",
            preserved_elements=PreservedElements(
                files_modified=["src/cli.py", "tests/test_cli.py"],
                decisions_made=["pass the level explicitly instead of reading a global"],
                active_todos=[{"task": "mention the fix in the release notes", "done": False}],
            ),
        )


class _Cancelled(Exception):
    """An edge asked to stop the current turn."""


# --- running it ----------------------------------------------------------------------------


async def run_demo(
    settings: Settings,
    options: DemoOptions,
    *,
    out: Callable[[str], None] | None = None,
) -> int:
    """Start a master and the simulated agent; returns the exit status."""
    from .server import Master

    say = out or _print
    api_key = settings.api_keys[0].rpartition(":")[2]
    master = Master(settings)
    await master.start()
    try:
        return await _drive(master.ws_url, master.http_url, api_key, options, say)
    finally:
        await master.stop()


def dashboard_link(http_url: str, token: str, session_id: str | None = None) -> str:
    """A dashboard URL that signs in with ``token`` (removed from the address bar on load)
    and opens ``session_id``."""
    link = f"{http_url.rstrip('/')}/?{urllib.parse.urlencode({'token': token})}"
    if session_id:
        link += f"#/s/{urllib.parse.quote(session_id, safe='')}"
    return link


async def _drive(
    ws_url: str, http_url: str, api_key: str, options: DemoOptions, say: Callable[[str], None]
) -> int:
    sid = options.session_id
    tail = shlex.join(["rawp", "tail", sid, "--ws-url", ws_url, "--token", api_key, "--from-start"])
    say("RAWP demo: a master and a simulated agent in this process")
    say(f"  WebSocket  {ws_url}")
    say(f"  HTTP       {http_url}   (REST)")
    say(f"  dashboard  {dashboard_link(http_url, api_key, sid)}")
    say(f"  session    {sid}")
    say(f"  API key    {api_key}")
    say(f"  follow it  {tail}")
    backoff = Backoff(initial=0.1, maximum=2.0)
    agent_client = RawpClient(
        ws_url,
        sid,
        role="client",
        token=api_key,
        create=CreateSpec(name="Demo: the ignored --verbose flag", agent_id="rawp-demo-agent"),
        backoff=backoff,
    )
    user = RawpClient(ws_url, sid, role="edge", token=api_key, backoff=backoff)
    await agent_client.connect()
    agent = DemoAgent(agent_client, options)
    listener = asyncio.get_running_loop().create_task(agent.listen())
    try:
        await user.connect()
        if user.participant_id:
            agent.ignore_edges.add(user.participant_id)
        if options.wait_for_edge > 0:
            say(f"waiting up to {options.wait_for_edge:g} s for a watcher to attach …")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(agent.edge_attached.wait(), options.wait_for_edge)
        turns = options.turns if options.turns is not None else (3 if options.once else None)
        index = 0
        while turns is None or index < turns:
            if agent.ended.is_set():
                break
            task = TASKS[index % len(TASKS)]
            if agent.prompts.empty():
                await user.user_message(task.prompt)  # the scripted user asks
            prompt = await asyncio.wait_for(agent.prompts.get(), 30)
            if prompt != task.prompt:  # a real person typed something: answer that instead
                task = dataclasses.replace(
                    task, prompt=prompt, answer=f"You asked: {_shown(prompt)}. " + task.answer
                )
            stop = await agent.run_turn(prompt, task, index)
            say(f"turn {index + 1} done ({stop})")  # numbered from 1, as tail and dashboard
            index += 1
            if turns is None and index == 1 and options.wake_after > 0:
                await agent.revisit_and_answer(options.wake_after, say)  # runs for ever: now
            if turns is None or index < turns:
                await asyncio.sleep(options.pause)
        if turns is not None and options.wake_after > 0 and not agent.ended.is_set():
            await agent.revisit_and_answer(options.wake_after, say)
        if options.once:
            await agent_client.delete("user_request")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(agent.ended.wait(), 10)
            say(f"session {sid} deleted; bye")
            return 0
        say("the agent is idle; the master keeps serving (Ctrl-C to stop)")
        await asyncio.Event().wait()
        return 0
    finally:
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener
        await user.close()
        await agent_client.close()


def _shown(value: Any) -> str:
    """A value as a person reads it in the transcript: JSON (true, "text"), not a repr."""
    return json.dumps(value, ensure_ascii=False)


def _print(text: str) -> None:
    print(text, flush=True)


# --- argparse ------------------------------------------------------------------------------


# The demo's own output is what to read; and a demo is throwaway: in memory (Settings'
# default) unless --store says otherwise.
_DEMO_SETTINGS = Settings(log_level="warning")


def add_demo_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``demo`` to the ``rawp`` command."""
    demo = sub.add_parser(
        "demo",
        help="run a master with a simulated agent producing a realistic session",
        description="Start a master in this process and a simulated agent (role client) "
        "that works through realistic turns: thinking, streamed text, tool calls with results, "
        "an interaction waiting for an edge's answer, usage after every turn, an occasional "
        "compaction. Prints the URLs, the session id, an API key and the rawp tail command.",
    )
    add_serve_arguments(demo, base=_DEMO_SETTINGS)
    demo.set_defaults(handler=_demo)
    demo.add_argument("--session", default=None, help="session id (default: demo-<random>)")
    demo.add_argument(
        "--turns", type=int, default=None, metavar="N", help="stop after N turns (default: never)"
    )
    demo.add_argument(
        "--once",
        action="store_true",
        help="one bounded session (--turns, else 3 turns), then delete it and exit "
        "(default: run until stopped)",
    )
    demo.add_argument(
        "--pace",
        type=float,
        default=0.04,
        metavar="SECONDS",
        help="pause between streamed deltas (default: %(default)s)",
    )
    demo.add_argument(
        "--pause",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="pause between turns (default: %(default)s)",
    )
    demo.add_argument(
        "--interaction-timeout",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="how long a question waits for an edge's answer before the agent withdraws it "
        "and goes on (default: %(default)s)",
    )
    demo.add_argument(
        "--wait-for-edge",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="before the first turn, wait up to SECONDS for a watcher (edge) to attach "
        "(default: %(default)s: do not wait)",
    )
    demo.add_argument(
        "--wake-after",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="after its turns the agent asks to be woken SECONDS later and answers the wake "
        "with a short turn (default: %(default)s; 0: it does not)",
    )
    demo.add_argument(
        "--seed", type=int, default=None, help="seed for the simulated numbers (default: random)"
    )


def _demo(args: argparse.Namespace) -> int:
    from .logs import configure_logging

    try:
        settings = settings_from_args(args, base=_DEMO_SETTINGS)
    except ConfigError as exc:
        print(f"rawp demo: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_format, settings.log_level)
    if not settings.api_keys:
        settings = dataclasses.replace(settings, api_keys=(f"default:{new_api_key()}",))
    options = DemoOptions(
        turns=args.turns,
        once=args.once,
        pace=max(0.0, args.pace),
        pause=max(0.0, args.pause),
        interaction_timeout=max(0.0, args.interaction_timeout),
        wait_for_edge=max(0.0, args.wait_for_edge),
        wake_after=max(0.0, args.wake_after),
        seed=args.seed,
        **({"session_id": args.session} if args.session else {}),
    )
    try:
        return asyncio.run(run_demo(settings, options))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a readable line, not a traceback, for a demo
        print(f"rawp demo: {exc}", file=sys.stderr)
        return 1
