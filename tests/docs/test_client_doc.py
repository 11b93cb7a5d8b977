"""docs/client.md can be run: each Python block is a program, run against a live master."""

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
GUIDE = REPO / "docs" / "client.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(text: str) -> list[str]:
    """The ```python blocks of a Markdown text, in order."""
    return [match.group(1) for match in _BLOCK.finditer(text)]


@pytest.fixture
async def master() -> AsyncIterator[Master]:
    """A master on free loopback ports that accepts the test API key."""
    # Each block is a fresh Python process: on a loaded machine its start-up can take longer
    # than the tests' 2 s reattach window, and the session an earlier block's agent left
    # would expire before the next block reads it.
    started = await start_master(reattach_window_s=60.0)
    yield started
    await started.stop()


def test_the_guide_has_complete_agent_and_edge_examples() -> None:
    """The guide shows an agent (role client) and an edge (role edge) program."""
    blocks = python_blocks(GUIDE.read_text(encoding="utf-8"))
    assert len(blocks) >= 4
    assert any('role="client"' in b and "create=" in b for b in blocks)
    assert any('role="edge"' in b for b in blocks)
    assert all("asyncio.run(main())" in b for b in blocks)


async def test_every_python_block_of_the_guide_runs(master: Master) -> None:
    """Each block exits 0 against the master, in the guide's order (later ones may read the
    sessions earlier ones made)."""
    env = {**os.environ, "RAWP_WS_URL": master.ws_url, "RAWP_API_KEY": API_KEY}
    for index, block in enumerate(python_blocks(GUIDE.read_text(encoding="utf-8")), start=1):
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            block,
            cwd=REPO,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(), 60)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        assert process.returncode == 0, (
            f"block {index} of docs/client.md failed:\n{block}\n--- stdout\n{out.decode()}"
            f"\n--- stderr\n{err.decode()}"
        )


def test_generated_reference_sections_are_current() -> None:
    """docs/protocol.md's frame table and docs/client.md's reference match the code."""
    from protocol.docgen import render_docs

    for path, text in render_docs(REPO).items():
        assert path.read_text(encoding="utf-8") == text, f"{path.name} is stale: make schemas"
