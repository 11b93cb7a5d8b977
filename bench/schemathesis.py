"""HTTP API fuzzing, long run: Schemathesis against a master from its generated OpenAPI document.

A master process (``bench._master``, memory store) serves ``GET /openapi.json``
(:mod:`relay.http.openapi`, generated from the route table and the msgspec models);
Schemathesis runs every phase (examples, coverage, fuzzing, stateful) on every operation but
the SSE stream, with 500 examples per operation (``--quick``: 50) and the checks of
:data:`tests.support.api_fuzz.CHECKS`: no 5xx, and every answer's status, media type and body
as documented. ``make test`` runs the same with 8 examples (tests/relay/http/test_openapi.py).
Aim: 0 failures, the master still healthy at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Final

from ._procs import API_KEY, UNTHROTTLED, start_master
from ._report import environment, figure, figures_table, now_iso

__all__ = ["DESCRIPTION", "NAME", "markdown", "run"]

NAME: Final = "schemathesis"
DESCRIPTION: Final = "Schemathesis fuzzes the HTTP API from /openapi.json (no 5xx, as documented)"


def _healthy(http_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{http_url}/healthz", timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    from tests.support.api_fuzz import CHECKS, fuzz_api

    examples = 50 if args.quick else 500
    env = environment()
    server = await start_master(UNTHROTTLED, loop=getattr(args, "loop", "asyncio"))
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="rawp-st-") as tmp:
            code, output = await fuzz_api(
                server.http_url, API_KEY, max_examples=examples, seed=None,
                timeout=3600, workdir=Path(tmp),
            )  # fmt: skip
        healthy = _healthy(server.http_url)
    finally:
        await server.stop()
    seconds = time.perf_counter() - started
    generated = re.search(r"(\d[\d,]*) generated", output)
    cases = int(generated.group(1).replace(",", "")) if generated else 0
    failures = re.findall(r"^_{3,} (.+?) _{3,}$", output, re.M)
    return {
        "name": NAME,
        "when": now_iso(),
        "environment": env,
        "command": 'make bench ARGS="schemathesis' + (" --quick" if args.quick else "") + '"',
        "checks": list(CHECKS),
        "examples_per_operation": examples,
        "test_cases": cases,
        "seconds": round(seconds, 1),
        "exit_code": code,
        "failures": failures,
        "healthy_after": healthy,
        "output_tail": output[-4000:],
        "figures": [
            figure("failures", len(failures), "", aim="0", met=code == 0 and not failures),
            figure("test cases", cases, ""),
            figure("master healthy after", 1 if healthy else 0, "", aim="1", met=healthy),
        ],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run Schemathesis once against a fresh master (see the module docstring)."""
    return asyncio.run(_run(args))


def markdown(result: dict[str, Any]) -> str:
    """The result as Markdown."""
    lines = [
        "# HTTP API fuzzing (Schemathesis)",
        "",
        figures_table(result["figures"]),
        f"{result['test_cases']:,} test cases in {result['seconds']} s, "
        f"{result['examples_per_operation']} examples per operation; checks: "
        + ", ".join(result["checks"])
        + ".",
        "",
    ]
    if result["failures"]:
        lines += ["Failing operations:", "", *[f"- {f}" for f in result["failures"]], ""]
    lines += ["```", result["output_tail"].strip()[-2000:], "```", "", f"`{result['command']}`"]
    return "\n".join(lines) + "\n"
