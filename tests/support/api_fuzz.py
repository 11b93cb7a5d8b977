"""Run Schemathesis against a master's generated OpenAPI document (tests and bench)."""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path

__all__ = ["CHECKS", "fuzz_api"]

CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
)
"""What issue 15 asks: no 5xx, and every answer's status, media type and body as documented."""

# An SSE stream never ends by itself (and an AG-UI run ends only when the agent behind the
# session answers): Schemathesis would wait on them; tests/interop covers the AG-UI routes.
_EXCLUDE = "events/stream|ag-ui"


def _cli() -> list[str]:
    found = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "schemathesis.cli"]


async def fuzz_api(
    http_url: str,
    api_key: str,
    *,
    max_examples: int,
    seed: int | None = 1,
    timeout: float = 300.0,
    workdir: Path | None = None,
) -> tuple[int, str]:
    """``schemathesis run`` with :data:`CHECKS`; its exit status and its output."""
    argv = [
        *_cli(),
        "run",
        f"{http_url}/openapi.json",
        "--header",
        f"Authorization: Bearer {api_key}",
        "--checks",
        ",".join(CHECKS),
        "--max-examples",
        str(max_examples),
        "--exclude-path-regex",
        _EXCLUDE,
        "--no-shrink",
        "--request-timeout",
        "10",
    ]
    if seed is not None:
        argv += ["--seed", str(seed)]
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=workdir,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(process.communicate(), timeout)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode(errors="replace")
