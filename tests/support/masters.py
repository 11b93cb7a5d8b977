"""``rawp serve`` subprocesses for multi-node tests: start, read their URLs, kill -9, stop.

Each master listens on free 127.0.0.1 ports (``--ws-port 0 --http-port 0``) and prints
``RAWP master: ws URL  http URL`` on stdout once it serves; its log goes to a file beside the
test's other artefacts, so a failing test can show what each node did.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from relay.cli import announced_urls

__all__ = ["MasterProcess", "start_all"]

_RAWP = Path(sys.executable).with_name("rawp")


class MasterProcess:
    """One master node as a child process of the test."""

    def __init__(
        self,
        node_id: str,
        store_url: str,
        *,
        api_key: str,
        log_dir: Path,
        cluster: bool = False,
        reattach_window: float | str | None = 5.0,
        heartbeat: float = 0.2,
        dead_after: float = 1.0,
    ) -> None:
        self.node_id = node_id
        self.log_path = log_dir / f"master-{node_id}.log"
        self.argv = [
            str(_RAWP),
            "serve",
            "--host",
            "127.0.0.1",
            "--ws-port",
            "0",
            "--http-port",
            "0",
            "--store",
            store_url,
            "--api-key",
            f"default:{api_key}",
            "--node-id",
            node_id,
            "--node-heartbeat",
            str(heartbeat),
            "--node-dead-after",
            str(dead_after),
            "--log-format",
            "json",
        ]
        if reattach_window is not None:  # None: the store's default
            self.argv += ["--reattach-window", str(reattach_window)]
        if cluster:
            self.argv.append("--redis-cluster")
        self.ws_url = ""
        self.http_url = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def spawn(self) -> None:
        """Start the process (returns at once; :meth:`wait_ready` reads its URLs)."""
        log = self.log_path.open("ab")
        self._log = log
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self._proc = subprocess.Popen(
            self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, env=env
        )

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until the master printed its URLs."""
        proc = self._proc
        assert proc is not None
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.1)
            if ready:
                line = proc.stdout.readline().decode()
                urls = announced_urls(line)
                if urls is not None:
                    self.ws_url, self.http_url = urls
                    return
                if not line:
                    break
            if proc.poll() is not None:
                break
        raise RuntimeError(f"master {self.node_id} did not start:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        """The end of the node's log."""
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    def kill(self) -> None:
        """Crash it: SIGKILL, no shutdown of any kind."""
        self._signal(signal.SIGKILL)

    def stop(self, timeout: float = 10.0) -> None:
        """Ordered shutdown (SIGTERM); SIGKILL if it hangs."""
        self._signal(signal.SIGTERM, timeout)

    def _signal(self, sig: signal.Signals, timeout: float = 10.0) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc is not None and proc.stdout is not None:
            proc.stdout.close()
        if self._log is not None:
            self._log.close()
            self._log = None


def start_all(masters: list[MasterProcess], timeout: float = 60.0) -> None:
    """Start several masters in parallel and wait until each serves."""
    for master in masters:
        master.spawn()
    for master in masters:
        master.wait_ready(timeout)
