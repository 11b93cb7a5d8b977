"""``rawp serve`` and ``rawp keys``: the master's subcommands."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import sys
from collections.abc import Callable

import structlog

from protocol.version import VERSION

from . import heap
from .config import SERVE_DEFAULTS, ConfigError, add_serve_arguments, settings_from_args

__all__ = ["announced_urls", "register"]


def announced_urls(line: str) -> tuple[str, str] | None:
    """The WebSocket and HTTP URLs a starting ``rawp serve`` announces on stdout, from one of
    its lines: ``RAWP master: ws URL  http URL``, or with ``--log-format json`` the
    ``listening`` event. None for any other line (for scripts and test harnesses)."""
    text = line.strip()
    if text.startswith("RAWP master:"):
        words = text.split()
        if len(words) >= 6:
            return words[3], words[5]
        return None
    if text.startswith("{"):
        try:
            event = json.loads(text)
        except ValueError:
            return None
        if isinstance(event, dict) and event.get("event") == "listening":
            ws, http = event.get("ws"), event.get("http")
            if isinstance(ws, str) and isinstance(http, str):
                return ws, http
    return None


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this package's subcommands to the ``rawp`` parser."""
    serve = sub.add_parser(
        "serve",
        help="run the master relay",
        description="Run the RAWP master: WebSocket relay on --ws-port, HTTP API and "
        "dashboard on --http-port, sessions kept in --store. Every flag has a RAWP_* "
        "variable and a key of the --config file; a flag wins over its variable, a variable "
        "over the file. Exit status on a failed start: see docs/operations.md.",
    )
    add_serve_arguments(serve, base=SERVE_DEFAULTS)  # durable by default (notes §16.2)
    serve.set_defaults(handler=_serve)

    keys = sub.add_parser("keys", help="manage API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    from .credentials_cli import add_key_commands, add_token_commands

    add_key_commands(keys_sub)
    add_token_commands(sub)

    from .demo import add_demo_parser

    add_demo_parser(sub)


def _serve(args: argparse.Namespace) -> int:
    from .demo import dashboard_link
    from .logs import configure_logging
    from .server import Master
    from .startup import EXIT_BAD_SETTING, StartupError, store_unknown

    try:
        settings = settings_from_args(args, base=SERVE_DEFAULTS)
    except ConfigError as exc:
        return _fail(str(exc), EXIT_BAD_SETTING, json_lines=_json_wanted(args))
    configure_logging(settings.log_format, settings.log_level)
    json_lines = settings.log_format == "json"
    try:
        master = Master(settings)
    except ValueError as exc:  # open_store: a scheme this build does not know
        failure = store_unknown(exc)
        return _fail(failure.message, failure.exit_code, json_lines=json_lines)

    def announce() -> None:
        heap.settle()  # startup's objects frozen, young collections less often (issue 16)
        # The store's development key (made on its first start, the same at every later
        # one) when no --api-key is given; an operator's keys are never printed.
        dev_key = master.hub.development_key
        if dev_key is not None:  # once started: a failed start stays one line
            if json_lines:
                structlog.get_logger("rawp.cli").warning(
                    "dev_api_key", workspace="default", api_key=dev_key
                )
            else:
                print(f"dev API key (workspace 'default'): {dev_key}", file=sys.stderr, flush=True)
        # A key of its own making may be shown in the link; an operator's not.
        signed_in = dev_key is not None
        dashboard = dashboard_link(master.http_url, dev_key) if dev_key else f"{master.http_url}/"
        if json_lines:  # stdout stays JSON lines too: one event a collector can parse
            event = {
                "event": "listening",
                "level": "info",
                "timestamp": dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z"),
                "ws": master.ws_url,
                "http": master.http_url,
                "dashboard": dashboard,
                "signed_in": signed_in,
                "version": VERSION,
            }
            print(json.dumps(event), flush=True)
        else:
            print(f"RAWP master: ws {master.ws_url}  http {master.http_url}", flush=True)
            hint = "" if signed_in else " (sign in with an API key)"
            print(f"dashboard: {dashboard}{hint}", flush=True)

    try:
        with (
            contextlib.suppress(KeyboardInterrupt),
            asyncio.Runner(loop_factory=event_loop_factory(settings.loop)) as runner,
        ):
            runner.run(master.run_until_signalled(on_started=announce))
    except StartupError as exc:
        return _fail(exc.message, exc.exit_code, json_lines=json_lines)
    return 0


def _fail(message: str, exit_code: int, *, json_lines: bool = False) -> int:
    """One line on stderr naming the cause and the fix (issue 15); the exit status.

    In JSON log mode the line is a JSON object too, so stderr stays pure JSON lines.
    """
    if json_lines:
        line = json.dumps(
            {
                "event": "startup_failed",
                "level": "error",
                "message": message,
                "exit_code": exit_code,
            }
        )
    else:
        line = f"rawp serve: {message}"
    print(line, file=sys.stderr, flush=True)
    return exit_code


def _json_wanted(args: argparse.Namespace) -> bool:
    """JSON lines were asked for, even if another setting was refused."""
    return bool(
        getattr(args, "log_format", None) == "json" or os.environ.get("RAWP_LOG_FORMAT") == "json"
    )


def event_loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop when asked for, or when ``auto`` and installed (the ``fast`` extra); else asyncio."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise SystemExit("--loop uvloop: uvloop is not installed (pip install 'rawp[fast]')")
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory
