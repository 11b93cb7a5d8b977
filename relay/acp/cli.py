"""``rawp bridge acp`` and ``rawp acp attach``: ACP agents behind the relay, editors attached
to remote sessions (docs/acp.md)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Awaitable, Callable

from protocol import names
from protocol.cli_flags import LOCAL_WS_URL, add_connection_flags, connection
from protocol.client import ConnectRefused, ReconnectExhausted
from protocol.errors import HandshakeError

from ..bridges import bridge_kinds
from ..config import LOG_LEVELS
from ..logs import configure_logging
from .link import DEFAULT_MAX_MESSAGE_BYTES

__all__ = ["register"]


def _connection_flags(parser: argparse.ArgumentParser) -> None:
    add_connection_flags(
        parser, ws=LOCAL_WS_URL, token="an API key, or a session token for this session"
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=LOG_LEVELS,
        help="least important level logged, on stderr (default: info)",
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``bridge acp`` and ``acp attach`` to the ``rawp`` parser."""
    bridge = bridge_kinds(sub).add_parser(
        "acp",
        help="an ACP agent (a command speaking ACP on stdio) as the session's client",
        description="Start the ACP agent COMMAND and attach to the relay as the session's "
        "client: every user message from the edges becomes a session/prompt, the agent's "
        "updates become RAWP frames, its permission requests are answered by the first edge. "
        "Put the agent's command after --, e.g. rawp bridge acp --session s1 -- my-agent --acp",
    )
    _connection_flags(bridge)
    bridge.add_argument("--session", required=True, help="the RAWP session id (required)")
    bridge.add_argument(
        "--state",
        default=None,
        metavar="FILE",
        help="persist the client here, to resume on restart (default: none)",
    )
    bridge.add_argument(
        "--no-create",
        action="store_true",
        help="attach only to a session that exists (default: create it)",
    )
    bridge.add_argument(
        "--cwd", default=None, help="the agent's working directory (default: the current one)"
    )
    bridge.add_argument(
        "--init-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="bound of the agent's initialize and session/new or session/load answers "
        "(default: 30)",
    )
    bridge.add_argument(
        "--cancel-grace",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long a cancelled turn waits for the agent to stop before it is stopped "
        "(default: 10)",
    )
    bridge.add_argument(
        "--max-message-bytes",
        type=int,
        default=DEFAULT_MAX_MESSAGE_BYTES,
        metavar="BYTES",
        help=f"a longer line from the agent is dropped and reported "
        f"(default: {DEFAULT_MAX_MESSAGE_BYTES})",
    )
    bridge.add_argument(
        "command", nargs="+", metavar="COMMAND", help="the agent and its args (required)"
    )
    bridge.set_defaults(handler=_run_bridge)

    acp = sub.add_parser("acp", help="speak ACP to an editor")
    acp_sub = acp.add_subparsers(dest="acp_command", required=True, metavar="COMMAND")
    attach = acp_sub.add_parser(
        "attach",
        help="an ACP agent on stdio, attached to a remote session as an edge",
        description="Run as an ACP agent on stdin/stdout (an editor launches it as any "
        "agent): session/load replays SESSION's log, session/prompt sends a user message and "
        "streams the turn back, permission requests are asked of the editor. Logs go to stderr.",
    )
    _connection_flags(attach)
    attach.add_argument("session", metavar="SESSION", help="the RAWP session id (required)")
    attach.add_argument(
        "--max-message-bytes",
        type=int,
        default=DEFAULT_MAX_MESSAGE_BYTES,
        metavar="BYTES",
        help=f"a longer line from the editor is dropped (default: {DEFAULT_MAX_MESSAGE_BYTES})",
    )
    attach.set_defaults(handler=_run_attach)


def _serve(prog: str, run: Callable[[], Awaitable[None]], close: Callable[[], None]) -> int:
    """Run until done (0); a refusal of the master is one line on stderr and exit 1."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(signum, close)
        await run()

    try:
        asyncio.run(main())
    except (HandshakeError, ConnectRefused, ReconnectExhausted) as exc:
        why = names.one_line(str(exc))[:500] or type(exc).__name__
        print(f"{prog}: the relay refused the session: {why}", file=sys.stderr, flush=True)
        return 1
    return 0


def _run_bridge(args: argparse.Namespace) -> int:
    from .bridge import AcpBridge

    where = connection(args)
    configure_logging("console", args.log_level)
    bridge = AcpBridge(
        where.ws_url,
        args.session,
        args.command,
        token=where.token,
        state_path=args.state,
        create=not args.no_create,
        cwd=args.cwd,
        init_timeout=args.init_timeout,
        cancel_grace=args.cancel_grace,
        max_message_bytes=args.max_message_bytes,
    )
    return _serve("rawp bridge acp", bridge.run, bridge.close)


def _run_attach(args: argparse.Namespace) -> int:
    from .attach import AcpAttach

    where = connection(args)
    configure_logging("console", args.log_level)
    attach = AcpAttach(
        where.ws_url, args.session, token=where.token, max_message_bytes=args.max_message_bytes
    )
    return _serve("rawp acp attach", attach.run, attach.close)
