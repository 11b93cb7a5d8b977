"""What the ACP interop tests share: a recording RAWP edge, the scripted agent's command line,
the bridge in this process, ``rawp validate --sequence`` on what an edge saw."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION
from acp.client.connection import ClientSideConnection
from acp.connection import StreamEvent
from acp.schema import (
    AllowedOutcome,
    DeniedOutcome,
    PermissionOption,
    RequestPermissionResponse,
    ToolCallUpdate,
)
from acp.stdio import spawn_agent_process

from protocol import codec
from protocol.client import RawpClient
from protocol.client_frames import unpacked
from protocol.frames import Frame, GenericFrame, History
from rawp import cli as rawp_cli
from relay.acp import AcpBridge
from relay.server import Master
from tests.e2e.conftest import API_KEY

__all__ = [
    "AGENT",
    "ROOT",
    "Edge",
    "Editor",
    "agent_command",
    "attached",
    "library_bridge",
    "payloads",
    "records",
    "refused_command",
    "validate_log",
    "validate_sequence",
]

AGENT = Path(__file__).parent / "acp_agent.py"
ROOT = Path(__file__).resolve().parents[2]


def agent_command(tmp_path: Path, *flags: str) -> list[str]:
    """The scripted ACP agent's command line, recording to ``tmp_path/record.jsonl``."""
    return [sys.executable, str(AGENT), "--record", str(tmp_path / "record.jsonl"), *flags]


def records(tmp_path: Path, method: str | None = None) -> list[dict[str, Any]]:
    """What the scripted agent received (``method`` only, when given)."""
    path = tmp_path / "record.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if method is None or r["method"] == method]


class Edge:
    """A RAWP edge that records every frame it is delivered."""

    def __init__(self, master: Master, session_id: str, **options: Any) -> None:
        options.setdefault("from_start", True)
        self.client = RawpClient(master.ws_url, session_id, role="edge", token=API_KEY, **options)
        self.frames: list[Frame | GenericFrame] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Edge:
        await self.client.connect()
        self._task = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.client.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _read(self) -> None:
        async for frame in self.client:
            if isinstance(frame, History) and frame.seq is None:
                # The master's backlog: its log entries, each with its seq, as if live. (A
                # client's history is a log entry of its own and stays whole.)
                self.frames.extend(unpacked(frame))
            else:
                self.frames.append(frame)

    def types(self) -> list[str]:
        """Types of the frames delivered (connection, presence and the master's status frames
        aside: the mapping is what the tests read)."""
        return [
            f.type
            for f in self.frames
            if not f.type.startswith("connection.")
            and f.type not in ("session.presence", "session.status")
        ]

    async def wait(self, predicate: Callable[[list[Frame | GenericFrame]], bool]) -> None:
        """Until ``predicate(frames)``; the timeout only guards a hang."""
        async with asyncio.timeout(60):
            while not predicate(self.frames):
                await asyncio.sleep(0.02)

    async def wait_type(self, frame_type: str, count: int = 1) -> None:
        """Until ``count`` frames of ``frame_type`` arrived."""
        await self.wait(lambda fs: sum(f.type == frame_type for f in fs) >= count)


def payloads(edge: Edge, frame_type: str) -> list[dict[str, Any]]:
    """The payloads of the frames of ``frame_type`` the edge saw, in order."""
    return [
        codec.decode_object(codec.encode(f))["payload"] for f in edge.frames if f.type == frame_type
    ]


@contextlib.asynccontextmanager
async def library_bridge(
    master: Master, session_id: str, command: list[str], **options: Any
) -> AsyncIterator[AcpBridge]:
    """The bridge as the library class, in this process, attached before it yields."""
    bridge = AcpBridge(master.ws_url, session_id, command, token=API_KEY, **options)
    task = asyncio.create_task(bridge.run())
    async with asyncio.timeout(30):
        while not bridge.client.connected:
            if task.done():
                task.result()
            await asyncio.sleep(0.02)
    try:
        yield bridge
    finally:
        bridge.close()
        await asyncio.wait_for(task, 30)
    await validate_log(master, session_id)


async def validate_log(master: Master, session_id: str) -> None:
    """``rawp validate --sequence`` passes on the session's whole log as the master stored it
    (every bridged session's log is checked this way on the way out)."""
    entries = await master.store.read(session_id)
    if not entries:
        return
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "log.jsonl"
        path.write_bytes(b"".join(e.data + b"\n" for e in entries))
        await _validate_file(path)


async def validate_sequence(frames: list[Frame | GenericFrame], tmp_path: Path) -> None:
    """``rawp validate --sequence`` passes on the frames (JSON Lines)."""
    path = tmp_path / "frames.jsonl"
    path.write_bytes(b"".join(codec.encode(f) + b"\n" for f in frames))
    await _validate_file(path)


async def _validate_file(path: Path) -> None:
    """``rawp validate PATH --sequence`` (its entry point, in a thread: no interpreter to start)
    exits 0; its report is the assertion's message otherwise."""

    def run() -> tuple[int, str]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = rawp_cli.main(["validate", str(path), "--sequence"])
        return code, out.getvalue()

    code, report = await asyncio.to_thread(run)
    assert code == 0, report


async def refused_command(master: Master, *args: str, token: str = API_KEY) -> tuple[int, str]:
    """``rawp ARGS`` against ``master`` with ``token``, its stdin an open pipe (an editor that
    says nothing): its exit status and stderr."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAWP_TOKEN", "RAWP_API_KEY")}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rawp.cli",
        *args,
        env={**env, "RAWP_WS_URL": master.ws_url, "RAWP_API_KEY": token},
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        _, err = await asyncio.wait_for(process.communicate(), 60)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return process.returncode, err.decode()


class Editor:
    """An ACP client (what an editor implements): records updates and permission requests;
    answers them with ``choose`` (an option id), or waits until the agent withdraws them."""

    def __init__(self, choose: str | None = None) -> None:
        self.choose = choose
        self.updates: list[Any] = []
        self.asked: list[tuple[ToolCallUpdate, list[PermissionOption]]] = []
        self.withdrawn: list[Any] = []
        self.asking = asyncio.Event()
        self._withdrawal = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        self.updates.append(update)

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **_: Any
    ) -> RequestPermissionResponse:
        self.asked.append((tool_call, options))
        self.asking.set()
        if self.choose is not None:
            return RequestPermissionResponse(
                outcome=AllowedOutcome(outcome="selected", option_id=self.choose)
            )
        await self._withdrawal.wait()
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    def observe(self, event: StreamEvent) -> None:
        """Every raw message: the ``$/cancel_request`` the package's router does not route."""
        if event.message.get("method") == "$/cancel_request":
            self.withdrawn.append(event.message["params"]["requestId"])
            self._withdrawal.set()

    def kinds(self) -> list[str]:
        return [u.session_update for u in self.updates]

    def texts(self, kind: str = "agent_message_chunk") -> list[str]:
        return [u.content.text for u in self.updates if u.session_update == kind]

    async def wait(self, predicate: Any) -> None:
        async with asyncio.timeout(60):
            while not predicate(self):
                await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def attached(
    master: Master, session: str, editor: Editor
) -> AsyncIterator[tuple[ClientSideConnection, asyncio.subprocess.Process]]:
    """``rawp acp attach SESSION`` as a subprocess, the editor's connection to it initialized."""
    env = {
        "RAWP_API_KEY": API_KEY,
        "RAWP_WS_URL": master.ws_url,
        "PYTHONPATH": str(ROOT),
    }
    async with spawn_agent_process(
        editor,
        sys.executable,
        "-m",
        "rawp.cli",
        "acp",
        "attach",
        session,
        env=env,
        cwd=ROOT,
        observers=[editor.observe],
    ) as (conn, process):
        init = await asyncio.wait_for(conn.initialize(protocol_version=PROTOCOL_VERSION), 60)
        assert init.agent_capabilities is not None
        assert init.agent_capabilities.load_session is True
        yield conn, process
