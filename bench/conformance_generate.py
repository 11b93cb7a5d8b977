"""Generated conformance: its speed against our master, and the hand-written kills it finds.

``python -m bench conformance_generate [--quick]`` (``make bench ARGS=conformance_generate``):

1. **speed** — our master (in its own process, a 30 s reattach window) and ``--generate``'s
   runner: N sessions of seed 1 (1,000; 200 with ``--quick``), the time per 1,000 sessions and
   the verdicts (every one must PASS). The full aim is ``rawp conformance --generate 10000``.
2. **kills** — for every hand-written case's kill (``tests/conformance/kills.py``) the
   generator can reach, our master with that kill applied and ``--generate 500`` (100 with
   ``--quick``) of seed 1, stopping at the first failing session: found (by which session, and
   the first disagreement) or not. The kills the generator cannot reach are listed with why
   (:data:`UNREACHABLE`): they break what generated sessions never do (a malformed handshake,
   an HTTP route, the clock, presence, a client's own history…).
"""

from __future__ import annotations

import argparse
import asyncio
import fnmatch
import time
from collections import Counter
from typing import Any, Final

from conformance.generated.run import run_generated
from conformance.runner import Target
from tests.conformance.conftest import API_KEY
from tests.conformance.kill_master import killed_master
from tests.conformance.kills import KILLS

__all__ = ["DESCRIPTION", "NAME", "RARE", "UNREACHABLE", "markdown", "run"]

NAME: Final = "conformance_generate"
DESCRIPTION: Final = "generated conformance: time per 1,000 sessions, kills found with 500"

UNREACHABLE: Final[dict[str, str]] = {
    "notes-2/*": "WebSocket transport (subprotocol, binary, frame size): sessions send valid text",
    "notes-15.7/*": "handshake variants (no subprotocol, patch versions): one valid hello shape",
    "notes-5/4400-*": "malformed hellos are not generated",
    "notes-5/4401-*": "one valid API key: no bad credential",
    "notes-5/4403-*": "no session tokens",
    "notes-5/4404-*": "every session is created by its client's first hello",
    "notes-5/4408-*": "every connection says hello at once (the hello timeout is the clock's)",
    "notes-5/4426-*": "one protocol version",
    "notes-5/presence*": "generated participants decline presence; presence is not judged",
    "notes-5/edge-expiry-presence": "expiry is the clock's, and presence is not judged",
    "notes-5/reattach-within-window": "window expiry is the clock's: never waited for",
    "7.5.3/cleanup-order-expiry": "window expiry is the clock's: never waited for",
    "notes-15.4/no-own-presence": "presence is not judged",
    "7.7.1/deleted-last-before-close": "its kill adds a presence frame, which is not judged",
    "notes-10/malformed-requests-problem-json": "no malformed HTTP request",
    "notes-10/rename-over-http": "no rename over HTTP",
    "notes-10/server-header-no-version": "HTTP headers are not judged",
    "notes-10/session-tokens-over-http": "no session tokens",
    "notes-11/*": "one workspace",
    "notes-16.1/archived-delete-purges": "no DELETE after a session ended",
    "notes-16.6/*": "no session tokens (every credential may delete)",
    "notes-16.9/*": "no revoked tokens",
    "notes-16.7/*": "ids and types follow the grammar",
    "notes-16.3/ack-*": "the master's acks are set aside, not judged",
    "notes-7/ack-cursor": "generated participants never send connection.ack",
    "notes-7/dedupe-*": "no message_id is sent twice",
    "7.1.1/*": "the client never sends its own session.history",
    "7.8.3/*": "the client never sends its own session.history",
    "7.6.1/rename-by-master": "no rename over HTTP",
    "notes-15.3/head-seq": "head_seq counts presence entries, which are not modelled",
}


RARE: Final[dict[str, str]] = {
    "notes-16.4/cancel-leaves-requires-action": (
        "reachable but rare: it needs two interactions pending at once, the client withdrawing "
        "one, then an edge answering the other (or a new participant reading the welcome's "
        "status) before the turn moves on"
    ),
}
"""Why a reachable kill may go unfound in a run: the sessions that show it are rare."""


def _unreachable(case_id: str) -> str | None:
    for pattern, why in UNREACHABLE.items():
        if fnmatch.fnmatchcase(case_id, pattern):
            return why
    return None


async def _speed(count: int) -> dict[str, Any]:
    async with killed_master("none") as (ws_url, http_url):
        target = Target(ws_url=ws_url, http_url=http_url, api_key=API_KEY)
        started = time.perf_counter()
        results = await run_generated(target, count=count, seed=1, timeout=20.0)
        took = time.perf_counter() - started
    return {
        "sessions": count,
        "seconds": round(took, 2),
        "seconds_per_1000": round(took * 1000 / count, 2),
        "verdicts": dict(Counter(r.status for r in results)),
    }


async def _kill(case_id: str, count: int) -> dict[str, Any]:
    async with killed_master(case_id) as (ws_url, http_url):
        target = Target(ws_url=ws_url, http_url=http_url, api_key=API_KEY)
        started = time.perf_counter()
        results = await run_generated(
            target,
            count=count,
            seed=1,
            timeout=5.0,
            read_timeout=1.0,
            shrink_failures=False,
            stop_on_failure=True,
        )
    failed = [r for r in results if r.status == "FAIL"]
    return {
        "found": bool(failed),
        "by_session": len(results) if failed else None,
        "first_disagreement": failed[0].details.splitlines()[0] if failed else "",
        "seconds": round(time.perf_counter() - started, 1),
    }


async def _run(quick: bool) -> dict[str, Any]:
    speed = await _speed(200 if quick else 1000)
    per_kill = 100 if quick else 500
    kills: dict[str, Any] = {}
    for case_id in sorted(KILLS):
        why = _unreachable(case_id)
        if why is not None:
            kills[case_id] = {"found": None, "why_not": why}
            continue
        kills[case_id] = await _kill(case_id, per_kill)
        print(f"  {case_id}: {kills[case_id]}", flush=True)
    return {"speed": speed, "sessions_per_kill": per_kill, "kills": kills}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure the speed, then run every reachable kill."""
    return asyncio.run(_run(bool(getattr(args, "quick", False))))


def markdown(result: dict[str, Any]) -> str:
    """The result as Markdown."""
    speed = result["speed"]
    kills = result["kills"]
    found = [k for k, v in kills.items() if v["found"]]
    missed = [k for k, v in kills.items() if v["found"] is False]
    unreachable = [k for k, v in kills.items() if v["found"] is None]
    lines = [
        "# Generated conformance",
        "",
        f"- {speed['sessions']} sessions of seed 1 against our master: {speed['seconds']} s, "
        f"**{speed['seconds_per_1000']} s per 1,000 sessions**; verdicts {speed['verdicts']}",
        f"- kills of the hand-written cases, `--generate {result['sessions_per_kill']}` each: "
        f"{len(found)} found, {len(missed)} not found, {len(unreachable)} out of the "
        "generator's reach",
        "",
        "| kill of | found by session | first disagreement |",
        "|---|---|---|",
    ]
    for case_id in found:
        entry = kills[case_id]
        lines.append(f"| `{case_id}` | {entry['by_session']} | {entry['first_disagreement']} |")
    for case_id in missed:
        lines.append(f"| `{case_id}` | not found | {RARE.get(case_id, '')} |")
    lines += ["", "Out of reach (never generated):", ""]
    lines += [f"- `{case_id}`: {kills[case_id]['why_not']}" for case_id in unreachable]
    return "\n".join(lines) + "\n"
