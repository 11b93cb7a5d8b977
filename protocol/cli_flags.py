"""The flags every command that talks to a master shares, and how option help is written.

One dialect for ``rawp tail``, ``rawp bridge ag-ui``, ``rawp tokens``, ``rawp keys``,
``rawp conformance`` (and any later command): ``--ws-url`` / ``$RAWP_WS_URL`` (the WebSocket
endpoint), ``--http-url`` / ``$RAWP_HTTP_URL`` (the HTTP base URL), ``--token`` /
``$RAWP_TOKEN`` or ``$RAWP_API_KEY`` (a session token or an API key where a token is enough:
the more specific variable first; ``$RAWP_API_KEY`` alone, or first, where only an API key
will do). A flag wins over its variables. Older spellings (``--relay-url`` and ``$RAWP_URL``,
``--url``, ``--api-key``) keep working as hidden aliases.

The values are read when the command runs (:func:`connection`), not when the parser is built,
and checked there: a URL of the wrong kind, a missing value, a control character, each is one
line on stderr naming the flag and its variable, and exit status 2 — never a traceback
(:class:`UsageError`, which ``rawp`` turns into that line).

:func:`described` writes the end of every option's help the same way — ``(default: …; env
…)`` or ``(required; env …)`` — and records the variable on the argparse action, so a test
can walk every subcommand's parser and check that each option says both.
"""

from __future__ import annotations

import argparse
import os
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NoReturn

__all__ = [
    "ENV_ATTRIBUTE",
    "LOCAL_HTTP_URL",
    "LOCAL_WS_URL",
    "Connection",
    "UsageError",
    "add_connection_flags",
    "connection",
    "described",
    "usage_error",
]

LOCAL_WS_URL: Final = "ws://127.0.0.1:8765/v1/ws"
"""Where ``rawp serve`` listens for WebSockets with its default flags."""
LOCAL_HTTP_URL: Final = "http://127.0.0.1:8766"
"""Where ``rawp serve`` listens for HTTP with its default flags."""

ENV_ATTRIBUTE: Final = "rawp_env"
"""The argparse action attribute naming the variables an option reads (a tuple)."""

_PROG: Final = "_rawp_connection_prog"
_SPECS: Final = "_rawp_connection_specs"


def described(text: str, *, default: str | None = None, env: Sequence[str] = ()) -> str:
    """``text`` followed by ``(default: D; env V)``; ``default=None`` means required."""
    shown = "required" if default is None else f"default: {default}"
    names = " or ".join(env)
    return f"{text} ({shown}; env {names})" if env else f"{text} ({shown})"


class UsageError(Exception):
    """A command was given something it cannot use: ``rawp`` prints :attr:`line` on stderr
    and exits with status 2 (as argparse does for a bad flag)."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(message)
        self.prog = prog
        self.message = message

    @property
    def line(self) -> str:
        """The command, what is wrong, where help is: one line."""
        return f"{self.prog}: {self.message} (see {self.prog} --help)"


def usage_error(prog: str, message: str) -> NoReturn:
    """Refuse the command's input: raises :class:`UsageError`."""
    raise UsageError(prog, message)


@dataclass(frozen=True, slots=True)
class _Spec:
    """One connection flag of one command: where its value may come from."""

    flag: str
    dest: str
    env: tuple[str, ...]  # shown in the help, read in this order
    old_env: tuple[str, ...]  # read after them, not shown
    default: str | None  # None: required; "": optional, no default
    kind: str  # "ws", "http" or "token"


@dataclass(frozen=True, slots=True)
class Connection:
    """The resolved connection flags of one command ("": the command does not take it)."""

    ws_url: str
    http_url: str
    token: str


def add_connection_flags(
    parser: argparse.ArgumentParser,
    *,
    ws: str | bool | None = False,
    http: str | bool | None = False,
    token: str = "",
    token_env: Sequence[str] = ("RAWP_TOKEN", "RAWP_API_KEY"),
    token_required: bool = True,
    old_flags: Mapping[str, str] | None = None,
    old_env: Mapping[str, Sequence[str]] | None = None,
) -> None:
    """Add ``--ws-url`` / ``--http-url`` / ``--token`` to ``parser``.

    ``ws`` and ``http``: False leaves the flag out, None makes it required, a string is its
    default. ``token``: the flag's help (what credential the command needs); empty leaves it
    out. ``token_required=False``: a command that can work without one (``rawp keys --store``)
    gets "" when none is given, and says itself what it lacks. ``old_flags`` maps a hidden old
    spelling to ``ws_url``, ``http_url`` or ``token``; ``old_env`` the same for old variable
    names, read after the documented ones.
    """
    specs: list[_Spec] = []
    olds = dict(old_env or {})
    if ws is not False:
        specs.append(
            _Spec(
                "--ws-url",
                "ws_url",
                ("RAWP_WS_URL",),
                tuple(olds.get("ws_url", ())),
                ws if isinstance(ws, str) else None,
                "ws",
            )
        )
        action = parser.add_argument(
            "--ws-url",
            dest="ws_url",
            default=None,
            metavar="URL",
            help=described(
                "the master's WebSocket URL: ws://HOST:PORT/v1/ws, or wss:// with TLS",
                default=ws if isinstance(ws, str) else None,
                env=("RAWP_WS_URL",),
            ),
        )
        setattr(action, ENV_ATTRIBUTE, ("RAWP_WS_URL",))
    if http is not False:
        specs.append(
            _Spec(
                "--http-url",
                "http_url",
                ("RAWP_HTTP_URL",),
                tuple(olds.get("http_url", ())),
                http if isinstance(http, str) else None,
                "http",
            )
        )
        action = parser.add_argument(
            "--http-url",
            dest="http_url",
            default=None,
            metavar="URL",
            help=described(
                "the master's HTTP base URL: http://HOST:PORT, or https:// with TLS",
                default=http if isinstance(http, str) else None,
                env=("RAWP_HTTP_URL",),
            ),
        )
        setattr(action, ENV_ATTRIBUTE, ("RAWP_HTTP_URL",))
    if token:
        specs.append(
            _Spec(
                "--token",
                "token",
                tuple(token_env),
                tuple(olds.get("token", ())),
                None if token_required else "",
                "token",
            )
        )
        action = parser.add_argument(
            "--token",
            dest="token",
            default=None,
            metavar="KEY",
            help=described(token, default=None if token_required else "none", env=tuple(token_env)),
        )
        setattr(action, ENV_ATTRIBUTE, tuple(token_env))
    for old, dest in (old_flags or {}).items():
        parser.add_argument(old, dest=dest, default=None, help=argparse.SUPPRESS)
    parser.set_defaults(**{_PROG: parser.prog, _SPECS: tuple(specs)})


def connection(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Connection:
    """The command's connection flags: each from its flag, else its variables, else its
    default; checked. A missing or unusable value ends the command (:func:`usage_error`)."""
    env = os.environ if environ is None else environ
    prog: str = getattr(args, _PROG)
    specs: tuple[_Spec, ...] = getattr(args, _SPECS)
    values: dict[str, str] = {"ws_url": "", "http_url": "", "token": ""}
    missing: list[str] = []
    for spec in specs:
        value: str | None = getattr(args, spec.dest, None)
        source = spec.flag
        if value is None:
            for name in (*spec.env, *spec.old_env):
                if env.get(name):
                    value, source = env[name], f"${name}"
                    break
        if value is None and spec.default == "":
            continue  # an optional flag not given: the command says what it lacks
        if value is None:
            value = spec.default
        if value is None:
            names = " or ".join(f"${name}" for name in spec.env)
            missing.append(f"{spec.flag} (or {names})")
            continue
        values[spec.dest] = _checked(prog, spec, source, value)
    if missing:
        usage_error(prog, "needs " + ", ".join(missing))
    return Connection(**values)


def _checked(prog: str, spec: _Spec, source: str, value: str) -> str:
    """``value`` when it is usable for ``spec``; else the one-line refusal."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value) or not value.strip():
        usage_error(prog, f"{source}: empty or holds a control character")
    if spec.kind == "token":
        if any(c.isspace() for c in value):
            usage_error(prog, f"{source}: a credential holds no spaces")
        return value
    value = value.strip()
    schemes = ("ws", "wss") if spec.kind == "ws" else ("http", "https")
    shown = repr(value) if len(value) <= 80 else repr(value[:77] + "...")
    try:
        parts = urllib.parse.urlsplit(value)
        parts.port  # noqa: B018 -- raises ValueError when not a number in range
    except ValueError as exc:
        usage_error(prog, f"{source}: {shown} is not a URL ({exc})")
    scheme = parts.scheme.lower()
    if scheme not in schemes:
        if spec.kind == "ws" and scheme in ("http", "https"):
            usage_error(
                prog,
                f"{source}: {shown} is an HTTP URL; give the master's WebSocket URL, "
                "ws://HOST:PORT/v1/ws (wss:// with TLS) — `rawp serve` prints both "
                "('RAWP master: ws … http …')",
            )
        if spec.kind == "http" and scheme in ("ws", "wss"):
            usage_error(
                prog,
                f"{source}: {shown} is a WebSocket URL; give the master's HTTP base URL, "
                "http://HOST:PORT (https:// with TLS) — `rawp serve` prints both "
                "('RAWP master: ws … http …')",
            )
        wanted = " or ".join(f"{s}://" for s in schemes)
        usage_error(prog, f"{source}: {shown} is not a {wanted} URL")
    if not parts.hostname:
        usage_error(prog, f"{source}: {shown} names no host")
    return value
