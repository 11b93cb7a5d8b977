"""Every subcommand's ``-h`` names each option's default (or that it is required) and its
variable: walked from the parser itself, so an option added without them fails here."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

import pytest

from protocol.cli_flags import ENV_ATTRIBUTE
from rawp.cli import build_parser

_END = re.compile(r"\((?:default: [^()]*|required[^()]*)\)$")


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command that takes options itself (``serve``, ``keys create``, ...)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for sub in subs:
        for name, child in sub.choices.items():
            yield from _commands(child, (*path, name))


def _helped(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a
        for a in parser._actions
        if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)
    ]


COMMANDS = sorted(_commands(build_parser()), key=lambda item: item[0])


def test_every_command_is_walked() -> None:
    """The walk reaches the commands a user types (it is not vacuous)."""
    names = {" ".join(path) for path, _ in COMMANDS}
    wanted = {"serve", "tail", "tokens create", "keys create", "conformance", "bridge ag-ui"}
    assert wanted | {"demo"} <= names


@pytest.mark.parametrize(
    ("path", "parser"), [pytest.param(p, parser, id=" ".join(p)) for p, parser in COMMANDS]
)
def test_each_option_says_its_default_and_variable(
    path: tuple[str, ...], parser: argparse.ArgumentParser
) -> None:
    """Each option's help ends in one "(default: …)" or "(required…)", names its variables,
    and the rendered -h shows that text."""
    rendered = " ".join(parser.format_help().split())
    problems = []
    for action in _helped(parser):
        name = "/".join(action.option_strings) or action.dest
        text = " ".join((action.help or "").split())
        if "%(" in text:
            text = text % {**vars(action), "prog": parser.prog}
        if not _END.search(text):
            problems.append(f"{name}: no (default: …) or (required) at the end: {text!r}")
        if text.count("default:") > 1:
            problems.append(f"{name}: the default is said twice: {text!r}")
        for variable in getattr(action, ENV_ATTRIBUTE, ()):
            if variable not in text:
                problems.append(f"{name}: its variable {variable} is not named: {text!r}")
        if text not in rendered:
            problems.append(f"{name}: -h does not show {text!r}")
    assert not problems, "\n".join(problems)


def test_serve_has_a_description() -> None:
    """``serve -h`` says what the command does before its options."""
    serve = dict(COMMANDS)[("serve",)]
    assert serve.description
    assert "master" in serve.description
