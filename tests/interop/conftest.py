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

__all__ = [
    "ACP_NPM_DIR",
    "API_KEY",
    "HARNESS_DIR",
    "acp_npm",
    "make_master",
    "master",
    "node_harness",
    "run_harness",
]

HARNESS_DIR = Path(__file__).parent / "agui"
ACP_NPM_DIR = Path(__file__).parent / "acp_npm"


def _installed(folder: Path, package: str) -> Path:
    """``folder`` with its locked packages installed (``npm ci`` when missing or stale);
    skipped, loudly, only when node/npm are not on PATH."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        reason = f"node/npm are not on PATH: the {package} interop tests are SKIPPED"
        warnings.warn(reason, stacklevel=3)
        pytest.skip(reason)
    marker = folder / "node_modules" / package / "package.json"
    lock = folder / "package-lock.json"
    if not marker.exists() or marker.stat().st_mtime < lock.stat().st_mtime:
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=folder,
            check=True,
            timeout=300,
        )
    return folder


@pytest.fixture(scope="session")
def node_harness() -> Path:
    """The AG-UI harness folder with its locked packages installed."""
    return _installed(HARNESS_DIR, "@ag-ui/client")


@pytest.fixture(scope="session")
def acp_npm() -> Path:
    """The ACP npm folder (``@agentclientprotocol/sdk``) with its locked packages installed."""
    return _installed(ACP_NPM_DIR, "@agentclientprotocol/sdk")


async def run_harness(
    harness: Path, scenario: dict[str, Any], tmp_path: Path, script: str = "harness.mjs"
) -> dict[str, Any]:
    """Run ``script`` (in ``harness``) on ``scenario``; its JSON report (stderr shown on
    failure)."""
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(scenario))
    process = await asyncio.create_subprocess_exec(
        "node",
        str(harness / script),
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
