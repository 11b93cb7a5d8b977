"""``rawp serve`` and ``rawp keys``: the master's subcommands."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import sys
from collections.abc import Callable

from .auth import new_api_key
from .config import add_serve_arguments, settings_from_args

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this package's subcommands to the ``rawp`` parser."""
    serve = sub.add_parser("serve", help="run the master relay")
    add_serve_arguments(serve)
    serve.set_defaults(handler=_serve)

    keys = sub.add_parser("keys", help="manage API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    from .credentials_cli import add_key_commands, add_token_commands

    add_key_commands(keys_sub)
    add_token_commands(sub)

    from .demo import add_demo_parser

    add_demo_parser(sub)


def _serve(args: argparse.Namespace) -> int:
    from .logs import configure_logging
    from .server import Master
    from .store.base import StoreOpenError

    settings = settings_from_args(args)
    configure_logging(settings.log_format, settings.log_level)
    if not settings.api_keys:
        dev_key = new_api_key()
        settings = dataclasses.replace(settings, api_keys=(f"default:{dev_key}",))
        print(f"dev API key (workspace 'default'): {dev_key}", file=sys.stderr, flush=True)
    master = Master(settings)

    def announce() -> None:
        # What startup made (modules, app, decoders) lives for good: out of the collector's
        # way, full collections stay short (p99.9 latency, make bench ARGS=latency).
        gc.freeze()
        print(f"RAWP master: ws {master.ws_url}  http {master.http_url}", flush=True)

    try:
        with (
            contextlib.suppress(KeyboardInterrupt),
            asyncio.Runner(loop_factory=event_loop_factory(args.loop)) as runner,
        ):
            runner.run(master.run_until_signalled(on_started=announce))
    except StoreOpenError as exc:  # one line naming the file (notes §16.2)
        print(f"rawp serve: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


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
