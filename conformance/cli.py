"""``rawp conformance``: check any master against RAWP 1.0.2 §7 and rawp-notes, black-box.

::

    rawp conformance --ws-url ws://HOST:PORT/v1/ws --http-url http://HOST:PORT --token KEY
                     [--other-workspace-key KEY] [--json FILE] [--junit FILE] [--html FILE]
                     [--only PATTERN]... [--skip PATTERN]...
                     [--expected-failures FILE] [--timeout SECONDS] [--hello-timeout SECONDS]
                     [--list] [--generate N [--seed S]]

Exit status: 0 when every MUST passed (or is listed in --expected-failures), 1 when a MUST
failed, 2 for usage errors (bad flags, unreadable files, no case selected, master unreachable).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import fnmatch
import os
import secrets
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from websockets.asyncio.client import connect
from websockets.typing import Subprotocol

from protocol.cli_flags import (
    ENV_ATTRIBUTE,
    UsageError,
    add_connection_flags,
    connection,
    described,
)

from .case import Case, all_cases
from .generated.run import GeneratedProgress, run_generated
from .report import Progress, Report, read_expected_failures
from .runner import Prerequisite, Target, run_cases

__all__ = ["USAGE_ERROR", "main_async", "register", "select"]

USAGE_ERROR = 2


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``rawp conformance`` to the ``rawp`` parser."""
    parser = sub.add_parser(
        "conformance",
        help="check a master against RAWP §7 and the wire contract (black-box)",
        description=(
            "Run the RAWP conformance cases against a running master over WebSocket and HTTP. "
            "Exits 1 when a MUST case fails (unless listed in --expected-failures)."
        ),
    )
    add_arguments(parser)
    parser.set_defaults(handler=_handler)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``rawp conformance``."""
    a = parser.add_argument
    add_connection_flags(
        parser,
        ws=None,
        http=None,
        token="an API key of the master",
        token_env=("RAWP_API_KEY",),
        old_flags={"--api-key": "token"},
    )
    other = a(
        "--other-workspace-key",
        default=None,
        metavar="KEY",
        help=described(
            "an API key of another workspace of the master; without it the cross-workspace "
            "case is skipped",
            default="none",
            env=("RAWP_OTHER_WORKSPACE_KEY",),
        ),
    )
    setattr(other, ENV_ATTRIBUTE, ("RAWP_OTHER_WORKSPACE_KEY",))
    a("--json", metavar="FILE", help="write the JSON report to FILE (default: none)")
    a("--junit", metavar="FILE", help="write a JUnit XML report to FILE (default: none)")
    a(
        "--html",
        metavar="FILE",
        help="write a self-contained HTML report (per-section tables, transcripts) to FILE "
        "(default: none)",
    )
    a(
        "--only",
        action="append",
        default=[],
        metavar="PATTERN",
        help="run only cases whose id matches PATTERN (fnmatch; repeatable) (default: all)",
    )
    a(
        "--skip",
        action="append",
        default=[],
        metavar="PATTERN",
        help="do not run cases whose id matches PATTERN (fnmatch; repeatable) (default: none)",
    )
    a(
        "--expected-failures",
        metavar="FILE",
        help="case ids (one per line, # comments) whose failure does not fail the run "
        "(default: none)",
    )
    a(
        "--timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="the longest one case may take (default: 10)",
    )
    a(
        "--hello-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="the master's handshake timeout (notes §5); 4408 is skipped when it does not fit "
        "in --timeout (default: 10)",
    )
    a("--list", action="store_true", help="list the selected cases and exit (default: run them)")
    a(
        "--generate",
        type=int,
        default=0,
        metavar="N",
        help="instead of the hand-written cases, run N random sessions judged against the "
        "reference model; failures are shrunk and printed with their wire transcript "
        "(default: 0, the hand-written cases)",
    )
    a(
        "--seed",
        type=int,
        default=None,
        metavar="S",
        help="the seed of --generate; one seed, one run (default: a random one, printed)",
    )


def select(cases: Sequence[Case], only: Sequence[str], skip: Sequence[str]) -> list[Case]:
    """Cases whose id matches any ``only`` pattern (all when none) and no ``skip`` pattern."""
    chosen = [c for c in cases if not only or any(fnmatch.fnmatchcase(c.id, p) for p in only)]
    return [c for c in chosen if not any(fnmatch.fnmatchcase(c.id, p) for p in skip)]


def _relies(c: Case) -> str:
    """`` [checks F; needs F; uses F]`` for a case that declares features, else ""."""
    parts = [f"checks {c.checks}"] if c.checks else []
    if c.needs:
        parts.append("needs " + ", ".join(c.needs))
    if c.uses:
        parts.append("uses " + ", ".join(c.uses))
    return f"  [{'; '.join(parts)}]" if parts else ""


def _handler(args: argparse.Namespace) -> int:
    return asyncio.run(main_async(args))


async def main_async(
    args: argparse.Namespace, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run ``rawp conformance`` with parsed ``args``; returns the exit status."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    registered = all_cases()
    cases = select(registered, args.only, args.skip)
    if args.generate < 0:
        print("rawp conformance: --generate must be 0 or more", file=err)
        return USAGE_ERROR
    if args.list:
        for c in cases:
            print(f"{c.id:<48} {c.level:<6} {c.description}{_relies(c)}", file=out)
        return 0
    if not cases and not args.generate:
        print("rawp conformance: no case matches --only/--skip", file=err)
        return USAGE_ERROR
    try:
        where = connection(args)
    except UsageError as exc:
        print(exc.line, file=err)
        return USAGE_ERROR
    if args.timeout <= 0:
        print("rawp conformance: --timeout must be positive", file=err)
        return USAGE_ERROR
    expected: frozenset[str] = frozenset()
    if args.expected_failures:
        try:
            expected = read_expected_failures(args.expected_failures)
        except OSError as exc:
            print(f"rawp conformance: cannot read --expected-failures: {exc}", file=err)
            return USAGE_ERROR
    target = Target(
        ws_url=where.ws_url,
        http_url=where.http_url,
        api_key=where.token,
        hello_timeout_s=args.hello_timeout,
        other_api_key=args.other_workspace_key or os.environ.get("RAWP_OTHER_WORKSPACE_KEY"),
    )
    problem = await _reachable(target.ws_url)
    if problem:
        print(f"rawp conformance: cannot reach {target.ws_url}: {problem}", file=err)
        return USAGE_ERROR
    started_at = dt.datetime.now(dt.UTC)
    started = time.perf_counter()
    prerequisites: dict[str, Prerequisite] = {}
    if args.generate:
        seed = args.seed if args.seed is not None else secrets.randbelow(1 << 31)
        print(
            f"RAWP conformance: {args.generate} generated sessions (seed {seed}) against "
            f"{target.ws_url}",
            file=out,
            flush=True,
        )
        results = await run_generated(
            target,
            count=args.generate,
            seed=seed,
            timeout=args.timeout,
            on_result=GeneratedProgress(out),
        )
    else:
        print(f"RAWP conformance: {len(cases)} cases against {target.ws_url}", file=out, flush=True)
        results = await run_cases(
            target,
            cases,
            timeout=args.timeout,
            expected_failures=expected,
            on_result=Progress(out),
            features=prerequisites,
        )
    report = Report(
        target=target,
        results=results,
        started_at=started_at,
        duration_s=time.perf_counter() - started,
        expected_failures=expected,
        registered=frozenset(c.id for c in registered),
        prerequisites=prerequisites,
    )
    print("", file=out)
    print(report.summary(), file=out, flush=True)
    if args.json:
        report.write_json(args.json)
    if args.junit:
        report.write_junit(args.junit)
    if args.html:
        report.write_html(args.html)
    return report.exit_code


async def _reachable(url: str) -> str | None:
    """None when a WebSocket handshake to ``url`` succeeds, else why not."""
    try:
        async with connect(
            url, subprotocols=[Subprotocol("rawp.1")], open_timeout=5, proxy=None
        ) as ws:
            await ws.close()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
