"""Our master with one conformance kill applied, served from its own process.

``python -m tests.conformance.kill_master CASE_ID FILE`` applies the kill of ``CASE_ID``
(:data:`tests.conformance.kills.KILLS`; ``none`` for the master as it is), starts a master on
ephemeral ports with a 30 s reattach window and a 10 s hello timeout and writes its URLs (JSON)
to FILE; it serves until it is terminated. Generated conformance needs the master in another
process: its reference model folds frames with ``protocol.state``'s table, which some kills
patch — in one process the model would be broken by the same kill and agree with the master.
:func:`killed_master` starts one and stops it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

__all__ = ["GENERATED_WINDOW_S", "killed_master"]

GENERATED_WINDOW_S = 30.0
_ROOT = Path(__file__).resolve().parents[2]


def _write_urls(path: str, urls: dict[str, str]) -> None:
    partial = Path(f"{path}.partial")
    partial.write_text(json.dumps(urls))
    partial.rename(path)  # whole or absent, never half written


def _read_urls(path: Path) -> dict[str, str] | None:
    return json.loads(path.read_text()) if path.exists() else None  # type: ignore[no-any-return]


async def _serve(case_id: str, urls_file: str) -> None:
    from relay.server import Master
    from tests.conformance.conftest import conformance_settings
    from tests.conformance.kills import KILLS

    mp = pytest.MonkeyPatch()
    if case_id != "none":
        KILLS[case_id](mp)
    master = Master(
        conformance_settings(reattach_window_s=GENERATED_WINDOW_S, hello_timeout_s=10.0)
    )
    await master.start()
    _write_urls(urls_file, {"ws": master.ws_url, "http": master.http_url})
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await master.stop()


@asynccontextmanager
async def killed_master(case_id: str) -> AsyncIterator[tuple[str, str]]:
    """Start the master with ``case_id``'s kill in a child process; yields its URLs."""
    env = {**os.environ, "PYTHONPATH": str(_ROOT)}
    with tempfile.TemporaryDirectory() as scratch:
        urls_file = Path(scratch) / "urls.json"
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.conformance.kill_master",
            case_id,
            str(urls_file),
            cwd=_ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            async with asyncio.timeout(120):
                while (urls := _read_urls(urls_file)) is None:
                    if process.returncode is not None:
                        raise RuntimeError(f"the master with the kill of {case_id} exited")
                    await asyncio.sleep(0.05)
            yield urls["ws"], urls["http"]
        finally:
            if process.returncode is None:
                process.terminate()
                try:
                    async with asyncio.timeout(10):
                        await process.wait()
                except TimeoutError:
                    process.kill()
                    await process.wait()


if __name__ == "__main__":
    asyncio.run(_serve(sys.argv[1], sys.argv[2]))
