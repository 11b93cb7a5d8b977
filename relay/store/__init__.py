"""Session stores: pick a backend by URL (notes §12).

``sqlite:PATH`` is the durable embedded default (:class:`~relay.store.sqlite.SqliteStore`,
notes §16.2); ``memory`` keeps everything in this process (tests, benchmarks); ``redis://``
and ``rediss://`` open :class:`RedisStore` (``cluster=True`` for Redis Cluster). The redis
module is imported only when asked for, so the embedded paths never import redis.
"""

from __future__ import annotations

from typing import Any

from .base import (
    FORMAT_VERSION,
    AppendResult,
    Credential,
    Deadline,
    LogEntry,
    NewEntry,
    ParticipantRecord,
    SessionHeader,
    Store,
)
from .memory import MemoryStore

__all__ = [
    "FORMAT_VERSION",
    "AppendResult",
    "Credential",
    "Deadline",
    "LogEntry",
    "MemoryStore",
    "NewEntry",
    "ParticipantRecord",
    "SessionHeader",
    "Store",
    "open_store",
]


def open_store(url: str, **opts: Any) -> Store:
    """The store for ``url``: ``sqlite:PATH``, ``memory`` (or ``memory://``), ``redis://…``.

    ``opts`` go to the backend: ``retention`` for both; ``cluster``, ``node_id`` and redis-py
    client options for redis.
    """
    scheme = url.split("://", 1)[0].lower() if "://" in url else url.lower()
    if url.lower().startswith("sqlite:"):
        from .sqlite import SqliteStore

        path = url[len("sqlite:") :].removeprefix("//")
        if not path:
            raise ValueError("sqlite: needs a file path, e.g. sqlite:./rawp-data/rawp.db")
        if opts.pop("cluster", False):
            raise ValueError("cluster=True needs a redis:// or rediss:// store URL")
        opts.pop("node_id", None)
        unknown = set(opts) - {"retention"}
        if unknown:
            raise ValueError(f"unknown sqlite store options: {sorted(unknown)}")
        return SqliteStore(path, **opts)
    if scheme == "memory":
        # callers pass their settings as they are; redis-only ones must be off or absent
        if opts.pop("cluster", False):
            raise ValueError("cluster=True needs a redis:// or rediss:// store URL")
        opts.pop("node_id", None)
        unknown = set(opts) - {"retention"}
        if unknown:
            raise ValueError(f"unknown memory store options: {sorted(unknown)}")
        return MemoryStore(**opts)
    if scheme in ("redis", "rediss"):
        from .redis import RedisStore  # lazy: the embedded path never imports redis

        return RedisStore(url, **opts)
    raise ValueError(f"unknown store URL {url!r} (use sqlite:PATH, memory, redis:// or rediss://)")
