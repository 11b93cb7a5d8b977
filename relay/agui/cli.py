"""``rawp bridge ag-ui``: put an AG-UI agent behind a RAWP session (docs/ag-ui.md)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import urllib.parse

import structlog

from protocol.cli_flags import LOCAL_WS_URL, add_connection_flags, connection, usage_error
from protocol.errors import HandshakeError, RawpError

from ..bridges import bridge_kinds
from ..config import LOG_LEVELS
from ..logs import configure_logging
from .bridge import AguiBridge

__all__ = ["register"]

_log = structlog.get_logger("rawp.agui")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``bridge`` (with its ``ag-ui`` kind) to the ``rawp`` parser."""
    agui = bridge_kinds(sub).add_parser(
        "ag-ui",
        help="an AG-UI agent (HTTP endpoint streaming AG-UI events) as the session's client",
        description="Attach to the relay as the session's client; for every user message "
        "from the edges, POST a RunAgentInput to the AG-UI agent and relay its events as "
        "RAWP frames. It logs one line when it starts, when it is attached and per run.",
    )
    agui.add_argument(
        "--agent-url",
        required=True,
        metavar="URL",
        help="the AG-UI agent's HTTP endpoint (required)",
    )
    agui.add_argument("--session", required=True, help="the RAWP session id (required)")
    add_connection_flags(
        agui,
        ws=LOCAL_WS_URL,
        token="an API key or a session token with the client grant",
        old_flags={"--relay-url": "ws_url"},
        old_env={"ws_url": ("RAWP_URL",)},
    )
    agui.add_argument(
        "--state",
        default=None,
        metavar="FILE",
        help="persist the client here, to resume after a restart (default: not kept)",
    )
    agui.add_argument(
        "--no-create",
        action="store_true",
        help="attach only to a session that exists (default: create it when missing)",
    )
    agui.add_argument(
        "--run-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="the longest one AG-UI run may take before its turn is ended (default: 300)",
    )
    agui.add_argument(
        "--agent-header",
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help="an HTTP header for the agent's requests (repeatable), e.g. "
        "'Authorization: Bearer …' (default: none)",
    )
    agui.add_argument(
        "--log-format",
        default="console",
        choices=("console", "json"),
        help="log lines for a console or as JSON (default: console)",
    )
    agui.add_argument(
        "--log-level",
        default="info",
        choices=LOG_LEVELS,
        help="least important level logged (default: info)",
    )
    agui.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    where = connection(args)
    if not args.run_timeout > 0:
        usage_error("rawp bridge ag-ui", f"--run-timeout: {args.run_timeout:g} is not above 0")
    headers: dict[str, str] = {}
    for header in args.agent_header:
        name, colon, value = header.partition(":")
        if not colon or not name.strip() or any(c in header for c in "\r\n"):
            usage_error("rawp bridge ag-ui", f"--agent-header wants NAME:VALUE, got {header!r}")
        headers[name.strip()] = value.strip()
    if urllib.parse.urlsplit(args.agent_url).scheme not in ("http", "https"):
        usage_error(
            "rawp bridge ag-ui", f"--agent-url wants an http(s):// URL, got {args.agent_url!r}"
        )
    # Only a command line found usable sets up logging (on this process's stderr, for good).
    configure_logging(args.log_format, args.log_level)
    bridge = AguiBridge(
        where.ws_url,
        args.session,
        args.agent_url,
        token=where.token,
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

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        return 130
    except HandshakeError as exc:
        _log.error("refused", message=exc.message, close_code=exc.close_code)
        return 1
    except RawpError as exc:  # the master unreachable for good, the session ended, ...
        _log.error("stopped", message=exc.message)
        return 1
    return 0
