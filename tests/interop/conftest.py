"""Fixtures for the AG-UI interop tests: the Node harness (real ``@ag-ui/client``), a master."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import API_KEY, make_master, master

__all__ = ["API_KEY", "HARNESS_DIR", "make_master", "master", "node_harness", "run_harness"]

HARNESS_DIR = Path(__file__).parent / "agui"


@pytest.fixture(scope="session")
def node_harness() -> Path:
    """The harness folder with its locked packages installed (``npm ci`` when missing)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        reason = "node/npm are not on PATH: the @ag-ui/client interop tests are SKIPPED"
        warnings.warn(reason, stacklevel=2)
        pytest.skip(reason)
    marker = HARNESS_DIR / "node_modules" / "@ag-ui" / "client" / "package.json"
    lock = HARNESS_DIR / "package-lock.json"
    if not marker.exists() or marker.stat().st_mtime < lock.stat().st_mtime:
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=HARNESS_DIR,
            check=True,
            timeout=300,
        )
    return HARNESS_DIR


async def run_harness(harness: Path, scenario: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """Run ``harness.mjs`` on ``scenario``; its JSON report (stderr shown on failure)."""
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(scenario))
    process = await asyncio.create_subprocess_exec(
        "node",
        str(harness / "harness.mjs"),
        str(path),
        cwd=harness,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(60):
            out, err = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode == 0, err.decode()
    report: dict[str, Any] = json.loads(out)
    report["stderr"] = err.decode()
    return report
