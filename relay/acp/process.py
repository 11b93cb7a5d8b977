"""The ACP agent as a subprocess: started in its own process group, its stdout read as JSON-RPC
through a bounded :class:`~relay.acp.link.NdjsonLink`, its stderr drained (a flood never
blocks the agent nor floods our log: lines are logged at a bounded rate, the last ones kept to
say why it exited), stopped with SIGTERM then SIGKILL for the whole group.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Final

import structlog
from acp import Client, connect_to_agent
from acp.client.connection import ClientSideConnection

from protocol import names

from .link import NdjsonLink

__all__ = ["AgentProcess"]

_log = structlog.get_logger("rawp.acp")
_STDERR_LINES_PER_S: Final = 20
_TAIL_LINES: Final = 20
_LINE_CHARS: Final = 500
# The relay's credential is the bridge's, never the agent's.
_HIDDEN_ENV: Final = ("RAWP_TOKEN", "RAWP_API_KEY")


class AgentProcess:
    """One running ACP agent and the client-side connection to it."""

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        link: NdjsonLink,
        conn: ClientSideConnection,
    ) -> None:
        self.process = process
        self.link = link
        self.conn = conn
        self.stderr_tail: deque[str] = deque(maxlen=_TAIL_LINES)
        self.stderr_lines = 0
        self.exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    async def start(
        cls,
        command: Sequence[str],
        client: Client,
        *,
        cwd: str | None = None,
        max_message_bytes: int,
        on_problem: Callable[[str], None],
        on_cancel_request: Callable[[Any], None],
    ) -> AgentProcess:
        """Start ``command`` and connect to it (OSError when it cannot be started)."""
        env = {k: v for k, v in os.environ.items() if k not in _HIDDEN_ENV}
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
        assert process.stdin is not None
        assert process.stdout is not None
        link = NdjsonLink(
            process.stdout,
            process.stdin,
            max_message_bytes=max_message_bytes,
            on_problem=on_problem,
            on_cancel_request=on_cancel_request,
        )
        conn = connect_to_agent(client, link)
        agent = cls(process, link, conn)
        agent._tasks.append(asyncio.create_task(agent._drain_stderr()))
        agent._tasks.append(asyncio.create_task(agent._wait()))
        return agent

    @property
    def pid(self) -> int:
        """The agent's process id."""
        return self.process.pid

    def describe_exit(self) -> str:
        """How the agent ended, with the last lines it wrote on stderr."""
        code = self.process.returncode
        how = f"exit code {code}" if code is None or code >= 0 else f"signal {-code}"
        tail = " | ".join(list(self.stderr_tail)[-3:])
        return f"the agent exited ({how})" + (f"; its stderr ended: {tail}" if tail else "")

    async def _wait(self) -> None:
        code = await self.process.wait()
        if not self.exited.done():
            self.exited.set_result(code)

    async def _drain_stderr(self) -> None:
        stream = self.process.stderr
        assert stream is not None
        pending = b""
        window_start = time.monotonic()
        logged = suppressed = 0
        while True:
            chunk = await stream.read(1 << 16)
            if not chunk:
                break
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()[-_LINE_CHARS * 4 :]
            for raw in lines:
                line = names.one_line(raw.decode("utf-8", "replace"))[:_LINE_CHARS]
                self.stderr_lines += 1
                self.stderr_tail.append(line)
                now = time.monotonic()
                if now - window_start >= 1.0:
                    if suppressed:
                        _log.info("agent_stderr_suppressed", lines=suppressed)
                    window_start, logged, suppressed = now, 0, 0
                if logged < _STDERR_LINES_PER_S:
                    logged += 1
                    _log.info("agent_stderr", pid=self.pid, line=line)
                else:
                    suppressed += 1
        if pending:
            self.stderr_tail.append(
                names.one_line(pending.decode("utf-8", "replace"))[:_LINE_CHARS]
            )

    async def stop(self, grace: float = 2.0) -> None:
        """Close the agent's input, then SIGTERM and SIGKILL its process group as needed."""
        with contextlib.suppress(Exception):
            await self.conn.close()
        if self.process.returncode is None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.exited), grace)
        for signum in (signal.SIGTERM, signal.SIGKILL):
            if self.process.returncode is not None:
                break
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signum)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.exited), grace)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
