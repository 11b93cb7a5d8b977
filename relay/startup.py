"""Why a master could not start, as one line naming the cause and the fix (issue 15).

:class:`StartupError` carries that line and an exit status of its own per cause
(:class:`ExitCode`, explained in :data:`EXIT_CAUSES`), so a supervisor or a script can tell
them apart.

:meth:`relay.server.Master.start` raises it after closing whatever it had opened, so a failed
start leaves nothing half-started.
"""

from __future__ import annotations

import enum
import errno
import os
import ssl
import urllib.parse
from typing import Final

from .store.base import StoreOpenError

__all__ = [
    "EXIT_BAD_SETTING",
    "EXIT_CANNOT_LISTEN",
    "EXIT_CAUSES",
    "EXIT_STORE_REFUSED",
    "EXIT_STORE_UNKNOWN",
    "EXIT_STORE_UNREACHABLE",
    "EXIT_TLS",
    "ExitCode",
    "StartupError",
    "exit_code_table",
    "listen_error",
    "store_refused",
    "store_start_failed",
    "store_unknown",
    "store_unreachable",
    "tls_error",
]


class ExitCode(enum.IntEnum):
    """The exit status of a start that failed, one per cause (the table in
    docs/operations.md is generated from :data:`EXIT_CAUSES`: ``make schemas``)."""

    BAD_SETTING = 2
    CANNOT_LISTEN = 3
    STORE_UNREACHABLE = 4
    STORE_UNKNOWN = 5
    TLS = 6
    STORE_REFUSED = 7


EXIT_CAUSES: Final[dict[ExitCode, tuple[str, str]]] = {
    ExitCode.BAD_SETTING: (
        "a setting is not usable",
        "`--log-level verbose`, `RAWP_WS_PORT=abc`, `--reattach-window inf`, "
        "a bad `--config` file, one key for two workspaces, "
        "`--wake-webhook` without `--wake-webhook-secret`",
    ),
    ExitCode.CANNOT_LISTEN: (
        "a port cannot be listened on",
        "in use, below 1024 without privileges, `--host` not of this machine",
    ),
    ExitCode.STORE_UNREACHABLE: ("the store cannot be reached", "Redis down or on another port"),
    ExitCode.STORE_UNKNOWN: ("the store URL has an unknown scheme", "`--store mongo://…`"),
    ExitCode.TLS: (
        "a TLS file is missing or does not fit",
        "`--tls-cert` not found, key of another certificate",
    ),
    ExitCode.STORE_REFUSED: (
        "the store's file cannot be used",
        "owned by another `rawp serve` (under any name: a symlink or a hard link to its file too), "
        "newer format, not a RAWP database (another program's SQLite file included), damaged, "
        "read-only (a read-only file system too) (§6)",
    ),
}
"""Each exit status: its cause and examples, as the operations guide shows them."""

EXIT_BAD_SETTING: Final = ExitCode.BAD_SETTING
EXIT_CANNOT_LISTEN: Final = ExitCode.CANNOT_LISTEN
EXIT_STORE_UNREACHABLE: Final = ExitCode.STORE_UNREACHABLE
EXIT_STORE_UNKNOWN: Final = ExitCode.STORE_UNKNOWN
EXIT_TLS: Final = ExitCode.TLS
EXIT_STORE_REFUSED: Final = ExitCode.STORE_REFUSED


def exit_code_table() -> str:
    """The Markdown table of :data:`EXIT_CAUSES` (docs/operations.md)."""
    rows = ["| exit | cause | e.g. |", "|---|---|---|"]
    rows += [
        f"| {code.value} | {cause} | {example} |" for code, (cause, example) in EXIT_CAUSES.items()
    ]
    return "\n".join(rows) + "\n"


class StartupError(Exception):
    """The master did not start: ``message`` says why and what to do, ``exit_code`` which."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def listen_error(what: str, host: str, port: int, flag: str, exc: OSError) -> StartupError:
    """The listener ``what`` (``HTTP``, ``WebSocket``) could not bind ``host:port``."""
    where = f"{host}:{port}"
    code = exc.errno
    if code == errno.EADDRINUSE:
        text = (
            f"cannot listen for {what} on {where}: the port is in use by another process; "
            f"stop that process or choose another port with {flag} (0 picks a free one)"
        )
    elif code == errno.EACCES:
        text = (
            f"cannot listen for {what} on {where}: permission denied (ports below 1024 need "
            f"privileges); choose a port above 1023 with {flag}"
        )
    elif code in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT) or code is None or code < 0:
        text = (
            f"cannot listen for {what} on {where}: {host} is not an address of this machine "
            f"({exc.strerror or exc}); use --host 127.0.0.1, ::1 or 0.0.0.0"
        )
    else:
        text = f"cannot listen for {what} on {where}: {exc.strerror or exc}; check --host {flag}"
    return StartupError(text, EXIT_CANNOT_LISTEN)


def store_unreachable(url: str, exc: BaseException) -> StartupError:
    """The store at ``url`` did not answer at start-up (a password in the URL is hidden)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is not None:
        host = parts.hostname or ""
        netloc = f"***@{host}" + (f":{parts.port}" if parts.port else "")
        url = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    return StartupError(
        f"cannot reach the store at {url}: {exc}; start it (e.g. redis-server) or point "
        "--store / RAWP_STORE at one that runs",
        EXIT_STORE_UNREACHABLE,
    )


def store_refused(exc: BaseException) -> StartupError:
    """The store opened its file and refused it; its message names the file (notes §16.2)."""
    return StartupError(str(exc), EXIT_STORE_REFUSED)


def store_start_failed(url: str, exc: BaseException) -> StartupError:
    """A store at ``url`` that did not start: its file is not ours to use (refused, exit 7),
    or it did not answer (unreachable, exit 4). ``rawp serve`` and ``rawp keys`` both."""
    if isinstance(exc, StoreOpenError):
        return store_refused(exc)
    return store_unreachable(url, exc)


def store_unknown(exc: ValueError) -> StartupError:
    """``open_store`` refused the URL (its message lists the schemes it knows)."""
    return StartupError(f"{exc}; fix --store / RAWP_STORE", EXIT_STORE_UNKNOWN)


def tls_error(cert: str, key: str | None, exc: BaseException) -> StartupError:
    """The TLS certificate or key could not be loaded."""
    if isinstance(exc, FileNotFoundError):
        # ssl does not say which of the two it could not open: look
        absent = [path for path in (cert, key) if path and not os.path.exists(path)]
        missing = exc.filename or (absent[0] if absent else cert)
        flag = "--tls-key" if missing == key else "--tls-cert"
        text = (
            f"TLS file not found: {missing} ({flag}); give the path of a PEM file, or leave "
            "out --tls-cert and --tls-key to serve ws:// and http://"
        )
    elif isinstance(exc, PermissionError):
        text = f"cannot read the TLS files {cert} / {key}: permission denied; make them readable"
    elif isinstance(exc, ssl.SSLError):
        text = (
            f"cannot use the TLS certificate {cert} with the key {key or cert}: "
            f"{exc.reason or exc}; both must be PEM and the key must belong to the certificate"
        )
    else:
        text = f"cannot use the TLS certificate {cert}: {exc}"
    return StartupError(text, EXIT_TLS)
