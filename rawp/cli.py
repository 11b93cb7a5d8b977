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

from protocol.cli_flags import UsageError
from protocol.version import version_line

__all__ = ["main"]

# Packages whose ``cli`` module contributes subcommands, in help order.
_PROVIDERS = ("relay.cli", "protocol.cli", "conformance.cli", "relay.agui.cli", "relay.acp.cli")


class _OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose refusal is one line naming the cause and where help is, not a
    usage dump (a failed start explains itself in one line). Subcommand parsers inherit the
    class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """A command without subcommands refuses what it does not know itself, so
        ``rawp serve --bogus`` points at ``rawp serve --help``; argparse would hand the
        leftovers up to ``rawp``, whose refusal names the wrong help."""
        parsed, extras = super().parse_known_args(args, namespace)
        leaf = not any(isinstance(a, argparse._SubParsersAction) for a in self._actions)
        if extras and leaf:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def build_parser() -> argparse.ArgumentParser:
    """The full ``rawp`` parser."""
    parser = _OneLineParser(prog="rawp", description="RAWP master relay and tools.")
    parser.add_argument("--version", action="version", version=version_line())
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
    try:
        return handler(args)
    except UsageError as exc:  # a value the parser could not judge alone: one line, no traceback
        print(exc.line, file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:  # Ctrl-C is the user's choice, not a failure to explain
        return 130


if __name__ == "__main__":
    sys.exit(main())
