"""One settings object for the master, built from flags and environment variables."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_STORE",
    "Settings",
    "add_serve_arguments",
    "parse_duration",
    "settings_from_args",
]

DEFAULT_STORE = "sqlite:./rawp-data/rawp.db"
"""The durable embedded default (notes §16.2); ``memory`` for tests and benchmarks."""

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``15m``, ``12h`` or ``30d`` (``--archive-retention``)."""
    value = text.strip().lower()
    scale = _UNITS.get(value[-1:])
    number = value[:-1] if scale is not None else value
    try:
        seconds = float(number) * (scale or 1.0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 30d, 12h, 90s)") from None
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"a duration cannot be negative: {text!r}")
    return seconds


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
    reattach_window_s: float = 120.0
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

    @property
    def scheme(self) -> tuple[str, str]:
        """("ws", "http") or ("wss", "https") when TLS is configured."""
        return ("wss", "https") if self.tls_cert else ("ws", "http")


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``rawp serve`` (and of commands that start a master, e.g. ``demo``)."""
    d = Settings()
    a = parser.add_argument
    a("--host", default=d.host, help="interface to listen on (default %(default)s)")
    a("--ws-port", type=int, default=d.ws_port, help="WebSocket port (0: any free port)")
    a("--http-port", type=int, default=d.http_port, help="HTTP port (0: any free port)")
    a(
        "--store",
        default=os.environ.get("RAWP_STORE", DEFAULT_STORE),  # not d.store: that is memory
        help="sqlite:PATH (default %(default)s; env RAWP_STORE), memory, redis://HOST:PORT/DB",
    )
    a(
        "--archive-retention",
        type=parse_duration,
        default=d.archive_retention_s,
        metavar="DURATION",
        help="purge ended (archived) sessions after this long (default 30d)",
    )
    a("--redis-cluster", action="store_true", help="the --store URL points at a Redis Cluster")
    a(
        "--api-key",
        action="append",
        default=None,
        metavar="[WORKSPACE:]KEY",
        help="accept this API key (repeatable; default workspace 'default'; env RAWP_API_KEY)",
    )
    a("--reattach-window", type=float, default=d.reattach_window_s, metavar="SECONDS")
    a("--max-frame-bytes", type=int, default=d.max_frame_bytes)
    a("--buffer-capacity", type=int, default=d.buffer_capacity, metavar="BYTES")
    a("--allowed-origins", default="", help="comma-separated origins browsers may connect from")
    a("--tls-cert", default=None)
    a("--tls-key", default=None)
    a("--log-format", choices=("json", "console"), default=d.log_format)
    a("--log-level", default=d.log_level)
    a("--hello-timeout", type=float, default=d.hello_timeout_s, metavar="SECONDS")
    a("--heartbeat-interval", type=float, default=d.heartbeat_interval_s, metavar="SECONDS")
    a("--heartbeat-timeout", type=float, default=d.heartbeat_timeout_s, metavar="SECONDS")
    a("--send-queue-bytes", type=int, default=d.send_queue_bytes, metavar="BYTES")
    a("--rate-frames", type=float, default=d.rate_frames_per_s, metavar="PER_SECOND")
    a("--rate-bytes", type=float, default=d.rate_bytes_per_s, metavar="PER_SECOND")
    a("--max-edges-per-session", type=int, default=d.max_edges_per_session)
    a("--retention", type=int, default=None, metavar="FRAMES", help="keep only the newest N")
    a("--node-id", default="", help="this node's id in sender stamps (default: random)")
    # Multi-node liveness (redis store; docs/operations.md). Hidden: tests shorten them.
    a("--node-heartbeat", type=float, default=d.node_heartbeat_s, help=argparse.SUPPRESS)
    a(
        "--loop",
        choices=("auto", "asyncio", "uvloop"),
        default="auto",
        help="event loop: uvloop when installed (auto, the default) or plain asyncio",
    )
    a("--node-dead-after", type=float, default=d.node_dead_after_s, help=argparse.SUPPRESS)


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings from parsed ``serve`` flags plus the environment."""
    keys = list(args.api_key or [])
    env_key = os.environ.get("RAWP_API_KEY")
    if not keys and env_key:
        keys.append(env_key)
    origins = tuple(o.strip() for o in args.allowed_origins.split(",") if o.strip())
    return Settings(
        host=args.host,
        ws_port=args.ws_port,
        http_port=args.http_port,
        store=args.store,
        archive_retention_s=args.archive_retention,
        redis_cluster=args.redis_cluster,
        api_keys=tuple(keys),
        reattach_window_s=args.reattach_window,
        max_frame_bytes=args.max_frame_bytes,
        buffer_capacity=args.buffer_capacity,
        allowed_origins=origins,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        log_format=args.log_format,
        log_level=args.log_level,
        hello_timeout_s=args.hello_timeout,
        heartbeat_interval_s=args.heartbeat_interval,
        heartbeat_timeout_s=args.heartbeat_timeout,
        send_queue_bytes=args.send_queue_bytes,
        rate_frames_per_s=args.rate_frames,
        rate_bytes_per_s=args.rate_bytes,
        max_edges_per_session=args.max_edges_per_session,
        retention=args.retention,
        node_id=args.node_id,
        node_heartbeat_s=args.node_heartbeat,
        node_dead_after_s=args.node_dead_after,
    )
