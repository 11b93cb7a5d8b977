"""``rawp keys``: a store that cannot be opened ends the command with one line, not a traceback."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rawp.cli import main
from relay.auth import digest
from relay.startup import EXIT_STORE_REFUSED, EXIT_STORE_UNKNOWN, EXIT_STORE_UNREACHABLE
from relay.store import open_store

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _keys(*args: str) -> tuple[int, list[str], str]:
    """``rawp keys ARGS`` in its own process: exit status, stderr lines, stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAWP_")}
    done = subprocess.run(
        [sys.executable, "-m", "rawp.cli", "keys", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stderr.splitlines(), done.stdout


def test_a_sqlite_file_a_running_master_owns_is_one_line_with_exit_7(tmp_path: Path) -> None:
    """keys create on the file of a running master: one line naming the file and the owner."""
    db = tmp_path / "rawp.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAWP_")}
    serve = subprocess.Popen(
        [sys.executable, "-m", "rawp.cli", "serve", "--store", f"sqlite:{db}", "--host",
         "127.0.0.1", "--ws-port", "0", "--http-port", "0"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert serve.stdout is not None
        deadline = time.monotonic() + 60
        while not serve.stdout.readline().startswith("RAWP master:"):
            assert serve.poll() is None, "the master exited"
            assert time.monotonic() < deadline, "the master did not start"
        code, lines, out = _keys("create", "--store", f"sqlite:{db}")
        assert code == EXIT_STORE_REFUSED
        assert len(lines) == 1, lines
        assert str(db) in lines[0]
        assert f"pid {serve.pid}" in lines[0]
        assert out == ""  # no key printed that was never registered
        assert serve.poll() is None  # the master is undisturbed
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(30)
    # Once the master is gone the same command registers the key in its file.
    code, lines, out = _keys("create", "--workspace", "w", "--store", f"sqlite:{db}")
    assert code == 0, lines
    key = out.strip()

    async def registered() -> str | None:
        store = open_store(f"sqlite:{db}")
        await store.start()
        try:
            record = await store.get_credential(digest(key))
            return None if record is None else record.workspace
        finally:
            await store.close()

    assert asyncio.run(registered()) == "w"


def test_an_unreachable_redis_is_one_line_with_exit_4() -> None:
    """keys revoke against a Redis nobody answers on: one line naming the URL, exit 4."""
    url = f"redis://127.0.0.1:{_free_port()}/0"
    code, lines, _ = _keys("revoke", "rk_nothing", "--store", url)
    assert code == EXIT_STORE_UNREACHABLE
    assert len(lines) == 1, lines
    assert url in lines[0]


def test_an_unknown_store_url_is_one_line_with_exit_5(capsys: pytest.CaptureFixture[str]) -> None:
    """keys create with a store URL of no known scheme: one line, exit 5 (in-process too)."""
    with pytest.raises(SystemExit) as info:
        main(["keys", "create", "--store", "mongo://x"])
    assert info.value.code == EXIT_STORE_UNKNOWN
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert "mongo://x" in lines[0]
