"""``rawp bridge KIND``: the one ``bridge`` subcommand every bridge package adds its kind to."""

from __future__ import annotations

import argparse
import weakref

__all__ = ["bridge_kinds"]

_KINDS: weakref.WeakKeyDictionary[
    argparse._SubParsersAction[argparse.ArgumentParser],
    argparse._SubParsersAction[argparse.ArgumentParser],
] = weakref.WeakKeyDictionary()


def bridge_kinds(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """The kinds of ``rawp bridge`` (the ``bridge`` parser is added on the first call)."""
    kinds = _KINDS.get(sub)
    if kinds is None:
        bridge = sub.add_parser(
            "bridge", help="attach an agent of another protocol as a RAWP client"
        )
        kinds = bridge.add_subparsers(dest="bridge_kind", required=True, metavar="KIND")
        _KINDS[sub] = kinds
    return kinds
