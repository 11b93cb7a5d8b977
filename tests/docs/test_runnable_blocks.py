"""Every shell block of README.md and docs/*.md marked ``<!-- runnable -->`` runs: each as one
``bash -eu`` script, against a master this test starts (``RAWP_WS_URL``, ``RAWP_HTTP_URL`` and
``RAWP_API_KEY`` point at it, the checkout's ``rawp`` first on PATH), and must exit 0.

Mark only blocks that are safe and quick: they run in a scratch directory, on loopback."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.support.clients import start_master

REPO = Path(__file__).resolve().parents[2]
MARKER = "<!-- runnable -->"
_BLOCK = re.compile(rf"^{re.escape(MARKER)}\n```(?:sh|bash)\n(.*?)^```", re.S | re.M)


def runnable_blocks() -> list[tuple[str, str]]:
    """(where, script) of every marked block, in document order."""
    found: list[tuple[str, str]] = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for number, match in enumerate(_BLOCK.finditer(text), start=1):
            found.append((f"{path.relative_to(REPO)}#{number}", match.group(1)))
        marked = text.count(MARKER)
        assert marked == len(_BLOCK.findall(text)), f"{path.name}: a marker not before ```sh"
    return found


BLOCKS = runnable_blocks()


def test_blocks_are_found() -> None:
    """The README's and the HTTP guide's blocks are marked (the walk is not vacuous)."""
    where = {name.split("#")[0] for name, _ in BLOCKS}
    assert {"README.md", "docs/http-api.md"} <= where


@pytest.fixture
async def master() -> AsyncIterator[Master]:
    """A master on free loopback ports that accepts the test API key."""
    started = await start_master()
    yield started
    await started.stop()


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("where", "script"), BLOCKS, ids=[name for name, _ in BLOCKS])
async def test_the_block_runs(where: str, script: str, master: Master, tmp_path: Path) -> None:
    """The block exits 0 against a live master."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAWP_")}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        RAWP_WS_URL=master.ws_url,
        RAWP_HTTP_URL=master.http_url,
        RAWP_API_KEY=API_KEY,
    )
    process = await asyncio.create_subprocess_exec(
        "bash", "-euo", "pipefail", "-c", script,
        cwd=tmp_path, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), 240)
    assert process.returncode == 0, f"{where} exited {process.returncode}:\n{out.decode()}"
