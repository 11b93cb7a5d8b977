"""``rawp bridge ag-ui``: put an AG-UI agent behind a RAWP session (docs/ag-ui.md)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys

from ..bridges import bridge_kinds
from ..logs import configure_logging
from .bridge import AguiBridge

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``bridge`` (with its ``ag-ui`` kind) to the ``rawp`` parser."""
    agui = bridge_kinds(sub).add_parser(
        "ag-ui",
        help="an AG-UI agent (HTTP endpoint streaming AG-UI events) as the session's client",
        description="Attach to the relay as the session's client; for every user message "
        "from the edges, POST a RunAgentInput to the AG-UI agent and relay its events as "
        "RAWP frames. The credential comes from --token or $RAWP_TOKEN / $RAWP_API_KEY.",
    )
    agui.add_argument("--agent-url", required=True, help="the AG-UI agent's HTTP endpoint")
    agui.add_argument("--session", required=True, help="the RAWP session id")
    agui.add_argument(
        "--relay-url",
        default=os.environ.get("RAWP_URL", "ws://127.0.0.1:8765/v1/ws"),
        help="the master's WebSocket URL (default: $RAWP_URL or ws://127.0.0.1:8765/v1/ws)",
    )
    agui.add_argument("--token", default=None, help="API key or session token (client grant)")
    agui.add_argument(
        "--state", default=None, metavar="FILE", help="persist the client here (resume on restart)"
    )
    agui.add_argument(
        "--no-create", action="store_true", help="attach only to a session that exists"
    )
    agui.add_argument(
        "--run-timeout", type=float, default=300.0, metavar="SECONDS", help="bound of one run"
    )
    agui.add_argument(
        "--agent-header",
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help="an HTTP header for the agent's requests (repeatable), e.g. 'Authorization: Bearer …'",
    )
    agui.add_argument("--log-level", default="info", help="debug, info, warning, error")
    agui.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    configure_logging("console", args.log_level)
    token = args.token or os.environ.get("RAWP_TOKEN") or os.environ.get("RAWP_API_KEY")
    if not token:
        print(
            "rawp bridge ag-ui: no credential (--token, $RAWP_TOKEN or $RAWP_API_KEY)",
            file=sys.stderr,
        )
        return 2
    headers: dict[str, str] = {}
    for header in args.agent_header:
        name, colon, value = header.partition(":")
        if not colon or not name.strip() or any(c in header for c in "\r\n"):
            print(
                f"rawp bridge ag-ui: --agent-header wants NAME:VALUE, got {header!r}",
                file=sys.stderr,
            )
            return 2
        headers[name.strip()] = value.strip()
    bridge = AguiBridge(
        args.relay_url,
        args.session,
        args.agent_url,
        token=token,
        state_path=args.state,
        create=not args.no_create,
        run_timeout=args.run_timeout,
        agent_headers=headers,
    )

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(signum, bridge.close)
        await bridge.run()

    asyncio.run(main())
    return 0
