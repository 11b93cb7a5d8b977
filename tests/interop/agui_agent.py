"""A scripted AG-UI agent server: ``ag-ui-protocol``'s models and encoder on aiohttp, no model.

Each POST takes the next script: a list of AG-UI events, ``Hold`` (wait until the test
releases it) or ``bytes`` (written as they are, to break the stream on purpose). Every
``RunAgentInput`` received is kept in ``inputs``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ag_ui.core import RunAgentInput
from ag_ui.core.events import BaseEvent
from ag_ui.encoder import EventEncoder
from aiohttp import web

__all__ = ["Hold", "ScriptedAgent"]


@dataclass
class Hold:
    """Stop streaming here until ``release`` is set (a run that is still going)."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    reached: asyncio.Event = field(default_factory=asyncio.Event)


Step = BaseEvent | Hold | bytes


class ScriptedAgent:
    """The AG-UI agent: start it, give it scripts, read what it was sent."""

    def __init__(self) -> None:
        self.scripts: deque[list[Step]] = deque()
        self.inputs: list[RunAgentInput] = []
        self.headers: list[dict[str, str]] = []
        self.holds: list[Hold] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Serve on a free 127.0.0.1 port."""
        app = web.Application()
        app.router.add_post("/agent", self._run)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server: Any = site._server
        port = server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/agent"

    async def stop(self) -> None:
        """Release every hold and stop the server."""
        for hold in self.holds:
            hold.release.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _run(self, request: web.Request) -> web.StreamResponse:
        self.inputs.append(RunAgentInput.model_validate_json(await request.read()))
        self.headers.append(dict(request.headers))
        script = self.scripts.popleft() if self.scripts else []
        encoder = EventEncoder(accept=request.headers.get("Accept", ""))
        response = web.StreamResponse(headers={"Content-Type": encoder.get_content_type()})
        await response.prepare(request)
        try:
            for step in script:
                if isinstance(step, Hold):
                    self.holds.append(step)
                    step.reached.set()
                    await step.release.wait()
                elif isinstance(step, bytes):
                    await response.write(step)
                else:
                    await response.write(encoder.encode(step).encode())
        except (ConnectionResetError, asyncio.CancelledError):
            return response
        await response.write_eof()
        return response
