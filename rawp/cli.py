"""``rawp`` — one command, many subcommands; each package owns its subcommands' code.

The dispatcher only wires argparse: every package's ``cli`` module exposes
``register(subparsers)`` that adds its subcommands and sets ``handler`` on them.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

__all__ = ["main"]

# Packages whose ``cli`` module contributes subcommands, in help order.
_PROVIDERS = ("relay.cli", "protocol.cli", "conformance.cli", "relay.agui.cli", "relay.acp.cli")


class _OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose refusal is one line naming the cause and where help is, not a
    usage dump (issue 15: a failed start explains itself in one line). Subcommand parsers
    inherit the class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The full ``rawp`` parser."""
    parser = _OneLineParser(prog="rawp", description="RAWP master relay and tools.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _PROVIDERS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``rawp`` with ``argv``; returns the exit status."""
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
