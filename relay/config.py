"""One settings object for the master, from flags, ``RAWP_*`` variables and a TOML file.

Every setting is declared once, in :data:`OPTIONS`: its flag, its ``Settings`` field, how a
value is read and checked, and its help. From that one declaration come the ``rawp serve``
flag (its help shows the default and the variable), the environment variable
(``RAWP_`` + the flag in capitals: ``--ws-port`` → ``RAWP_WS_PORT``) and the key of the
``--config`` TOML file (the flag with underscores: ``ws_port = 9000``). Precedence: a flag
given on the command line, else the variable, else the file, else the default (issue 15).
A value that does not parse or check is refused with :class:`ConfigError`, naming where it
came from; so is an unknown key in the file. Adding a setting = a ``Settings`` field plus
one :class:`Option` line.
"""

from __future__ import annotations

import argparse
import math
import os
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Final, Literal

from protocol.cli_flags import ENV_ATTRIBUTE

__all__ = [
    "DEFAULT_STORE",
    "DURABLE_REATTACH_WINDOW_S",
    "LOG_LEVELS",
    "MAX_ARCHIVE_RETENTION_S",
    "MAX_BUFFER_BYTES",
    "MAX_EDGES",
    "MAX_FRAME_BYTES",
    "MAX_RATE_BYTES",
    "MAX_RATE_FRAMES",
    "MAX_REATTACH_WINDOW_S",
    "MAX_RETENTION_FRAMES",
    "MEMORY_REATTACH_WINDOW_S",
    "OPTIONS",
    "SERVE_DEFAULTS",
    "ConfigError",
    "Option",
    "Settings",
    "add_serve_arguments",
    "parse_duration",
    "settings_from_args",
]

DEFAULT_STORE: Final = "sqlite:./rawp-data/rawp.db"
"""The durable embedded default of ``rawp serve`` (notes §16.2); in-process masters (tests,
benchmarks) keep ``memory``."""

DURABLE_REATTACH_WINDOW_S: Final = 7 * 86400.0
"""A durable store keeps a detached agent's session as long as a person may be away."""
MEMORY_REATTACH_WINDOW_S: Final = 120.0
"""``--store memory`` keeps nothing across a restart: a short window frees it sooner."""


@dataclass(frozen=True)
class Settings:
    """Everything ``rawp serve`` can be told. Defaults are the documented ones."""

    host: str = "127.0.0.1"
    ws_port: int = 8765
    http_port: int = 8766
    store: str = "memory"  # in-process masters (tests, benches); `rawp serve`: DEFAULT_STORE
    archive_retention_s: float = 30 * 86400.0
    redis_cluster: bool = False
    api_keys: tuple[str, ...] = ()
    # None: the store's default (DURABLE_REATTACH_WINDOW_S on a durable store, else
    # MEMORY_REATTACH_WINDOW_S); math.inf: never (``--reattach-window never``).
    reattach_window_s: float | None = None
    max_frame_bytes: int = 1 << 20
    buffer_capacity: int = 1 << 20
    allowed_origins: tuple[str, ...] = ()
    tls_cert: str | None = None
    tls_key: str | None = None
    log_format: str = "console"
    log_level: str = "info"
    hello_timeout_s: float = 10.0
    heartbeat_interval_s: float = 20.0
    heartbeat_timeout_s: float = 20.0
    send_queue_bytes: int = 8 << 20
    inbox_frames: int = 1024
    rate_frames_per_s: float = 2000.0
    rate_bytes_per_s: float = 16 << 20
    rate_burst_s: float = 2.0
    rate_strikes_to_close: int = 20
    max_edges_per_session: int = 1000
    max_sessions_per_workspace: int = 100_000
    retention: int | None = None
    shutdown_timeout_s: float = 5.0
    node_id: str = field(default="")
    node_heartbeat_s: float = 1.0
    node_dead_after_s: float = 5.0
    loop: str = "auto"
    # Due wakes of detached clients are POSTed here, signed with the secret (notes §17.5).
    wake_webhook: str | None = None
    wake_webhook_secret: str | None = field(default=None, repr=False)  # never shown

    @property
    def reattach_window(self) -> float:
        """Seconds a detached participant may come back in; ``math.inf`` for never (§17.1)."""
        if self.reattach_window_s is not None:
            return self.reattach_window_s
        if self.store == "memory":
            return MEMORY_REATTACH_WINDOW_S
        return DURABLE_REATTACH_WINDOW_S

    @property
    def reattach_window_ms(self) -> int:
        """The window as the welcome states it: milliseconds, ``-1`` for never."""
        window = self.reattach_window
        return -1 if math.isinf(window) else int(window * 1000)

    @property
    def scheme(self) -> tuple[str, str]:
        """("ws", "http") or ("wss", "https") when TLS is configured."""
        return ("wss", "https") if self.tls_cert else ("ws", "http")


class ConfigError(ValueError):
    """A setting that cannot be used: the message names the setting, where it came from, and
    what is accepted."""


LOG_LEVELS: Final = ("debug", "info", "warning", "error", "critical")


# --- value readers: each takes the text (or TOML value) and returns the setting's value ---


def _port(value: Any) -> int:
    port = _integer(value)
    if not 0 <= port <= 65535:
        raise ValueError("a port is 0 (any free port) to 65535")
    return port


def _integer(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("a whole number is needed")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError("a whole number is needed") from None


def _count(high: int, unit: str = "") -> Callable[[Any], int]:
    """A reader of a whole number from 1 to ``high`` (``unit`` names what it counts)."""

    def read(value: Any) -> int:
        number = _integer(value)
        if not 1 <= number <= high:
            raise ValueError(f"a whole number from 1 to {high:,}{unit} is needed")
        return number

    return read


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{what} is needed")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} is needed") from None


def _seconds(high: float) -> Callable[[Any], float]:
    """A reader of a number of seconds above 0 and at most ``high``: ``inf`` and ``nan``
    parse as floats and would start a master whose deadlines overflow, so they are refused
    here with every other value out of range."""

    def read(value: Any) -> float:
        number = _number(value, "a number of seconds")
        if not 0 < number <= high:  # also refuses NaN
            raise ValueError(f"a number of seconds above 0 and at most {_duration(high)} is needed")
        return number

    return read


def _rate(high: float) -> Callable[[Any], float]:
    """A reader of a rate above 0 and at most ``high``."""

    def read(value: Any) -> float:
        number = _number(value, "a number above 0")
        if not 0 < number <= high:  # also refuses NaN and inf
            raise ValueError(f"a number above 0 and at most {high:,.0f} is needed")
        return number

    return read


_DURATION_UNITS: Final = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DAY: Final = 86400.0
_HOUR: Final = 3600.0
# The bounds of the settings (docs/operations.md §0): far above any sensible value, so that
# only a typo or an infinity meets them, and low enough that every deadline, buffer and
# frame they size stays a number the master can compute with.
MAX_ARCHIVE_RETENTION_S: Final = 3650 * _DAY
"""``--archive-retention`` at most ten years: a cutoff that far back keeps every archive."""
MAX_REATTACH_WINDOW_S: Final = 30 * _DAY
MAX_FRAME_BYTES: Final = 64 << 20
MAX_BUFFER_BYTES: Final = 1 << 30
MAX_RATE_FRAMES: Final = 1e9
MAX_RATE_BYTES: Final = 1e12
MAX_EDGES: Final = 1_000_000
MAX_RETENTION_FRAMES: Final = 1_000_000_000


def parse_duration(value: Any) -> float:
    """Seconds from ``90``, ``90s``, ``15m``, ``12h`` or ``30d`` (``--archive-retention``):
    0 up to :data:`MAX_ARCHIVE_RETENTION_S`."""
    text = str(value).strip().lower()
    scale = _DURATION_UNITS.get(text[-1:])
    number = text[:-1] if scale is not None else text
    try:
        seconds = float(number) * (scale or 1.0)
    except ValueError:
        raise ValueError(f"not a duration: {value!r} (e.g. 30d, 12h, 90s)") from None
    if not seconds >= 0:  # also refuses NaN
        raise ValueError(f"a duration cannot be negative: {value!r}")
    if not seconds <= MAX_ARCHIVE_RETENTION_S:  # also refuses inf
        raise ValueError(
            f"a duration of at most {_duration(MAX_ARCHIVE_RETENTION_S)} is needed: {value!r}"
        )
    return seconds


def _window(value: Any) -> float:
    """``--reattach-window``: a duration above 0 (``120``, ``90s``, ``7d``) or ``never``."""
    if isinstance(value, str) and value.strip().lower() == "never":
        return math.inf
    if isinstance(value, bool):
        raise ValueError("a duration (120, 90s, 12h, 7d) or never is needed")
    try:
        seconds = parse_duration(value)
    except ValueError:
        seconds = math.nan  # refused below with the range, as every other setting's reader
    if not 0 < seconds <= MAX_REATTACH_WINDOW_S:  # also refuses inf and NaN
        raise ValueError(
            f"a duration above 0 and at most {_duration(MAX_REATTACH_WINDOW_S)} "
            "(120, 90s, 12h, 7d) or never is needed"
        )
    return seconds


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("a string is needed")
    return value


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("true or false is needed")


def _words(value: Any) -> tuple[str, ...]:
    """A list: a TOML array, or comma-separated text."""
    if isinstance(value, list):
        items = [_text(v) for v in value]
    elif isinstance(value, str):
        items = value.split(",")
    else:
        raise ValueError("a list (or comma-separated text) is needed")
    return tuple(item.strip() for item in items if item.strip())


def _file(value: Any) -> str:
    return _text(value)


def _webhook_url(value: Any) -> str:
    """``--wake-webhook``: an ``http://`` or ``https://`` URL."""
    from .wake_webhook import check_url

    return check_url(_text(value).strip())


def _secret(value: Any) -> str:
    """``--wake-webhook-secret``: any non-empty text (its value is never echoed back)."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("a non-empty secret is needed")
    return value


@dataclass(frozen=True)
class Option:
    """One setting: its flag, its ``Settings`` field and how its value is read.

    ``kind`` ``value`` takes one value, ``flag`` is a switch, ``list`` may repeat (flags) or be
    a list (file) / comma-separated (variable). ``hidden`` options have no help line.
    """

    flag: str
    dest: str
    read: Callable[[Any], Any]
    help: str
    kind: Literal["value", "flag", "list"] = "value"
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    hidden: bool = False
    shown: str | None = None  # the default as help says it, when not the value itself
    secret: bool = False  # its value is never echoed in an error or a dump

    @property
    def env(self) -> str:
        """``RAWP_`` + the flag in capitals."""
        return "RAWP_" + self.flag.removeprefix("--").replace("-", "_").upper()

    @property
    def key(self) -> str:
        """The key in the TOML file: the flag with underscores."""
        return self.flag.removeprefix("--").replace("-", "_")

    def parse(self, value: Any) -> Any:
        """The setting's value from ``value`` (text or TOML); ValueError says what is wrong."""
        parsed = self.read(value)
        if self.choices is not None and parsed not in self.choices:
            raise ValueError(f"{parsed!r} is not one of {', '.join(self.choices)}")
        return parsed


OPTIONS: Final[tuple[Option, ...]] = (
    Option("--host", "host", _text, "interface to listen on"),
    Option("--ws-port", "ws_port", _port, "WebSocket port (0: any free port)", metavar="PORT"),
    Option("--http-port", "http_port", _port, "HTTP port (0: any free port)", metavar="PORT"),
    Option(
        "--store",
        "store",
        _text,
        "where sessions are kept: sqlite:PATH (durable, embedded), memory (nothing kept), "
        "or redis://HOST:PORT/DB (rediss:// with TLS; several nodes)",
        metavar="URL",
    ),
    Option(
        "--archive-retention",
        "archive_retention_s",
        parse_duration,
        "purge ended (archived) sessions after this long: 30d, 12h, 90s … (notes §16.1)",
        metavar="DURATION",
    ),
    Option(
        "--redis-cluster", "redis_cluster", _boolean, "the --store URL is a Redis Cluster", "flag"
    ),
    Option(
        "--api-key",
        "api_keys",
        _words,
        "accept this API key, as [WORKSPACE:]KEY (repeatable; default workspace 'default'; "
        "none given: a development key is made and printed)",
        "list",
        metavar="[WORKSPACE:]KEY",
    ),
    Option(
        "--reattach-window",
        "reattach_window_s",
        _window,
        "how long a detached agent may come back before its session ends (seconds, or "
        "90s, 12h, 7d; never: sessions end only by deletion)",
        metavar="DURATION",
    ),
    Option(
        "--max-frame-bytes",
        "max_frame_bytes",
        _count(MAX_FRAME_BYTES, " bytes"),
        "largest frame accepted",
        metavar="BYTES",
    ),
    Option(
        "--buffer-capacity",
        "buffer_capacity",
        _count(MAX_BUFFER_BYTES, " bytes"),
        "largest reattach buffer granted to a participant",
        metavar="BYTES",
    ),
    Option(
        "--allowed-origins",
        "allowed_origins",
        _words,
        "comma-separated browser origins allowed besides the dashboard's own",
        metavar="ORIGINS",
    ),
    Option(
        "--tls-cert",
        "tls_cert",
        _file,
        "TLS certificate chain (PEM): serve wss:// and https://",
        metavar="FILE",
    ),
    Option("--tls-key", "tls_key", _file, "TLS private key (PEM) for --tls-cert", metavar="FILE"),
    Option(
        "--log-format",
        "log_format",
        _text,
        "log lines as JSON or for a console",
        choices=("json", "console"),
    ),
    Option(
        "--log-level",
        "log_level",
        lambda v: _text(v).lower(),
        "least important level logged",
        choices=LOG_LEVELS,
    ),
    Option(
        "--hello-timeout",
        "hello_timeout_s",
        _seconds(_HOUR),
        "how long a new connection may take to say hello (else closed 4408)",
        metavar="SECONDS",
    ),
    Option(
        "--heartbeat-interval",
        "heartbeat_interval_s",
        _seconds(_HOUR),
        "WebSocket ping interval",
        metavar="SECONDS",
    ),
    Option(
        "--heartbeat-timeout",
        "heartbeat_timeout_s",
        _seconds(_HOUR),
        "a connection whose pong is this late is closed",
        metavar="SECONDS",
    ),
    Option(
        "--send-queue-bytes",
        "send_queue_bytes",
        _count(MAX_BUFFER_BYTES, " bytes"),
        "a participant whose unsent frames exceed this is closed as a slow consumer",
        metavar="BYTES",
    ),
    Option(
        "--rate-frames",
        "rate_frames_per_s",
        _rate(MAX_RATE_FRAMES),
        "frames per second one connection may send",
        metavar="PER_SECOND",
    ),
    Option(
        "--rate-bytes",
        "rate_bytes_per_s",
        _rate(MAX_RATE_BYTES),
        "bytes per second one connection may send",
        metavar="PER_SECOND",
    ),
    Option(
        "--max-edges-per-session",
        "max_edges_per_session",
        _count(MAX_EDGES),
        "edges one session may have attached at once",
        metavar="N",
    ),
    Option(
        "--retention",
        "retention",
        _count(MAX_RETENTION_FRAMES, " frames"),
        "keep only the newest N frames of each session's log",
        metavar="FRAMES",
        shown="all",
    ),
    Option("--node-id", "node_id", _text, "this node's id in sender stamps", shown="random"),
    Option(
        "--loop",
        "loop",
        _text,
        "event loop: uvloop when installed (auto) or plain asyncio",
        choices=("auto", "asyncio", "uvloop"),
    ),
    Option(
        "--wake-webhook",
        "wake_webhook",
        _webhook_url,
        "POST each due wake of a detached client to this http(s) URL, signed with "
        "--wake-webhook-secret (docs/operations.md, Wake webhook)",
        metavar="URL",
    ),
    Option(
        "--wake-webhook-secret",
        "wake_webhook_secret",
        _secret,
        "the key that signs each wake webhook POST (HMAC with SHA256); prefer the "
        "variable (a flag shows in the process list)",
        metavar="SECRET",
        secret=True,
    ),
    # Multi-node liveness (redis store; docs/operations.md). Hidden: tests shorten them.
    Option("--node-heartbeat", "node_heartbeat_s", _seconds(_HOUR), "", hidden=True),
    Option("--node-dead-after", "node_dead_after_s", _seconds(_HOUR), "", hidden=True),
)
"""Every setting of ``rawp serve``, in help order."""

SERVE_DEFAULTS: Final = Settings(store=DEFAULT_STORE)
"""The defaults of ``rawp serve``: those of :class:`Settings` but the durable store."""

_GIVEN: Final = "_rawp_given"  # the namespace attribute listing the flags given


def _mark(namespace: argparse.Namespace, dest: str) -> None:
    given: set[str] = getattr(namespace, _GIVEN, None) or set()
    given.add(dest)
    setattr(namespace, _GIVEN, given)


class _Store(argparse.Action):
    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        _mark(namespace, self.dest)


class _Append(argparse._AppendAction):
    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        if self.dest not in (getattr(namespace, _GIVEN, None) or set()):
            setattr(namespace, self.dest, [])  # the first one replaces the default
        super().__call__(parser, namespace, values, option_string)
        _mark(namespace, self.dest)


class _Switch(argparse._StoreTrueAction):
    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        super().__call__(parser, namespace, values, option_string)
        _mark(namespace, self.dest)


def _argparse_type(option: Option) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return option.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = option.dest  # argparse names the type in some messages
    return convert


def add_serve_arguments(parser: argparse.ArgumentParser, base: Settings | None = None) -> None:
    """The flags of ``rawp serve`` (and of commands that start a master, e.g. ``demo``).

    ``base`` holds the defaults shown and used (the command's own, e.g. the demo logs less).
    """
    defaults = base or Settings()
    config = parser.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="read settings from this TOML file (keys as the flags, with underscores: "
        "ws_port = 9000); flags and RAWP_* variables win over it "
        "(default: none; env RAWP_CONFIG)",
    )
    setattr(config, ENV_ATTRIBUTE, ("RAWP_CONFIG",))
    for option in OPTIONS:
        default = getattr(defaults, option.dest)
        if option.hidden:
            help_text: str = argparse.SUPPRESS
        else:
            if option.shown is not None:
                shown = option.shown
            elif option.read is _window:
                shown = _window_shown(default)
            elif option.read is parse_duration:
                shown = _duration(default)
            else:
                shown = _shown(default)
            help_text = f"{option.help} (default: {shown}; env {option.env})"
        if option.kind == "flag":
            action = parser.add_argument(
                option.flag, dest=option.dest, action=_Switch, default=default, help=help_text
            )
        elif option.kind == "list":
            action = parser.add_argument(
                option.flag,
                dest=option.dest,
                action=_Append,
                default=list(default),
                metavar=option.metavar,
                help=help_text,
            )
        else:
            action = parser.add_argument(
                option.flag,
                dest=option.dest,
                action=_Store,
                type=_argparse_type(option),
                default=default,
                metavar=option.metavar or (None if option.choices else option.dest.upper()),
                choices=option.choices,
                help=help_text,
            )
        setattr(action, ENV_ATTRIBUTE, (option.env,))


def _duration(seconds: float) -> str:
    """A duration default as it would be typed (``30d``, ``12h``, ``90s``)."""
    for unit, scale in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= scale and (seconds / scale).is_integer():
            return f"{int(seconds / scale)}{unit}"
    return f"{seconds:g}s"


def _window_shown(seconds: float | None) -> str:
    if seconds is None:
        return "7d on a durable store, 120s on memory"
    return "never" if math.isinf(seconds) else _duration(seconds)


def _shown(default: Any) -> str:
    if default is None or default == () or default == "":
        return "none"
    if isinstance(default, bool):
        return "off" if not default else "on"
    if isinstance(default, tuple):
        return ", ".join(default)
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)


def settings_from_args(
    args: argparse.Namespace,
    *,
    environ: Mapping[str, str] | None = None,
    base: Settings | None = None,
) -> Settings:
    """Settings from parsed flags, then ``RAWP_*`` variables, then the ``--config`` file,
    then ``base``'s defaults. Raises :class:`ConfigError` for a value that is not usable."""
    env = os.environ if environ is None else environ
    given: set[str] = getattr(args, _GIVEN, None) or set()
    config_path: Path | None = getattr(args, "config", None)
    if config_path is None and env.get("RAWP_CONFIG"):
        config_path = Path(env["RAWP_CONFIG"])
    from_file = _read_file(config_path) if config_path is not None else {}
    settings = base or Settings()
    changes: dict[str, Any] = {}
    for option in OPTIONS:
        if option.dest in given:
            value = getattr(args, option.dest)
            changes[option.dest] = tuple(value) if option.kind == "list" else value
            continue
        for where, raw in (
            (option.env + "=", env.get(option.env)),
            (f"{config_path}: {option.key} = ", from_file.get(option.key)),
        ):
            if raw is None or (isinstance(raw, str) and raw == "" and option.kind != "flag"):
                continue
            # where the value came from, and the value itself unless it is a secret
            source = where + ("***" if option.secret else repr(raw))
            try:
                value = option.parse(raw)
            except ValueError as exc:
                raise ConfigError(f"{source}: {exc} (see rawp serve --help)") from None
            changes[option.dest] = tuple(value) if option.kind == "list" else value
            break
        else:
            value = getattr(args, option.dest, getattr(settings, option.dest))
            changes[option.dest] = tuple(value) if option.kind == "list" else value
    known = {f.name for f in fields(Settings)}
    resolved = replace(settings, **{k: v for k, v in changes.items() if k in known})
    if resolved.tls_key and not resolved.tls_cert:
        raise ConfigError("--tls-key needs --tls-cert (the certificate the key belongs to)")
    _one_workspace_per_key(resolved.api_keys)
    if resolved.wake_webhook and not resolved.wake_webhook_secret:
        raise ConfigError(
            "--wake-webhook needs --wake-webhook-secret (or RAWP_WAKE_WEBHOOK_SECRET): the "
            "key its requests are signed with, so the receiver can tell them from forgeries"
        )
    return resolved


def _read_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as source:
            data = tomllib.load(source)
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot read it ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config {path}: not valid TOML ({exc})") from None
    keys = {option.key for option in OPTIONS}
    serve = data.get("serve")
    if "serve" in data and not isinstance(serve, dict):
        raise ConfigError(f"--config {path}: serve must be a table ([serve]), not a value")
    if isinstance(serve, dict):
        # Settings beside [serve] would be read by nobody: refused, not silently ignored.
        beside = sorted(set(data) - {"serve"})
        if beside:
            raise ConfigError(
                f"--config {path}: {', '.join(beside)} beside [serve]; put every setting "
                "under [serve], or none (the file's top level then holds them)"
            )
        table = serve
    else:
        table = data
    unknown = sorted(set(table) - keys)
    if unknown:
        raise ConfigError(
            f"--config {path}: unknown setting(s) {', '.join(unknown)}; known: "
            + ", ".join(sorted(keys))
        )
    return dict(table)


def _one_workspace_per_key(keys: Sequence[str]) -> None:
    """Refuse a key given for two workspaces: it can belong to one only, and whichever was
    registered last would silently win."""
    owner: dict[str, str] = {}
    for given in keys:
        workspace, _, secret = given.rpartition(":")
        workspace = workspace or "default"
        first = owner.setdefault(secret, workspace)
        if first != workspace:
            raise ConfigError(
                f"--api-key: one key is given for two workspaces ({first} and {workspace}); "
                "a key belongs to one workspace: give each its own key"
            )


def option_for(flag: str, options: Sequence[Option] = OPTIONS) -> Option:
    """The option of ``flag`` (for tests and docs)."""
    for option in options:
        if option.flag == flag:
            return option
    raise KeyError(flag)
