"""A client's state on disk: what it needs to resume its session after an app restart."""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import tempfile
from pathlib import Path
from typing import Final

import msgspec

from .client_errors import ClientError
from .frames import Role
from .outgoing import SavedBuffer
from .view import ViewSnapshot

__all__ = ["SNAPSHOT_FORMAT", "ClientSnapshot", "load_snapshot", "save_snapshot"]

SNAPSHOT_FORMAT: Final = 1
"""The newest snapshot format this build writes and reads."""


class ClientSnapshot(msgspec.Struct, kw_only=True):
    """Everything a client needs to resume its session after an app restart."""

    format: int = SNAPSHOT_FORMAT
    url: str
    session_id: str
    role: Role
    participant_id: str | None = None
    epoch: str | None = None
    attached_before: bool = False
    turn_index: int = -1
    last_sync_message_id: str | None = None
    last_sync_timestamp: _dt.datetime | None = None
    outgoing: SavedBuffer
    in_flight: list[msgspec.Raw] = msgspec.field(default_factory=list)
    deferred: list[msgspec.Raw] = msgspec.field(default_factory=list)
    view: ViewSnapshot
    saved_at: _dt.datetime


def save_snapshot(path: str | os.PathLike[str], snapshot: ClientSnapshot) -> None:
    """Write ``snapshot`` to ``path`` atomically: a temp file beside it, fsync, rename."""
    target = Path(path)
    data = msgspec.json.encode(snapshot)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable where possible
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def load_snapshot(path: str | os.PathLike[str]) -> ClientSnapshot:
    """Read a snapshot written by :func:`save_snapshot`."""
    snapshot = msgspec.json.decode(Path(path).read_bytes(), type=ClientSnapshot)
    if snapshot.format > SNAPSHOT_FORMAT:
        raise ClientError(f"{path}: written by a newer client (format {snapshot.format}); upgrade")
    return snapshot
