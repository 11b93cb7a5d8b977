"""Opening the SQLite store's file (seed 004 "format rejection"), and keeping others out.

A file that is not SQLite, a SQLite file that is not a RAWP database, or a damaged one stops
the start with :class:`~relay.store.base.StoreOpenError` and is never written to; a database of
a newer format is refused with "upgrade". A lock file beside the database (``PATH.lock``,
``flock``'d, holding the owner's pid) keeps a second process out.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from pathlib import Path
from typing import Final

from ..base import StoreOpenError
from .schema import (
    APPLICATION_ID,
    DB_FORMAT,
    TABLES,
    TABLES_V1,
    add_vault_ids,
    create_schema,
    upgrade_to_2,
)

__all__ = ["FileLock", "inspect_file", "open_connection", "open_writer"]

_SQLITE_MAGIC: Final = b"SQLite format 3\x00"
_BUSY_TIMEOUT_MS: Final = 1000  # another program holding the file: give up after this


def open_connection(path: Path, *, read_only: bool) -> sqlite3.Connection:
    """A connection to the existing file (a reader's, or ``inspect_file``'s)."""
    uri = f"{path.resolve().as_uri()}?mode={'ro' if read_only else 'rw'}"
    db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    db.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
    return db


def inspect_file(path: Path) -> int:
    """Check an existing file without writing to it; its format (0: a new, empty database).

    Raises :class:`StoreOpenError` for anything rawp must not touch (seed 004).
    """
    with path.open("rb") as f:
        magic = f.read(len(_SQLITE_MAGIC))
    if not magic:
        return 0  # an empty file: a database nobody wrote yet
    if magic != _SQLITE_MAGIC:
        raise StoreOpenError(f"{path} is not a RAWP database (not an SQLite file); left untouched")
    try:
        db = open_connection(path, read_only=True)
        try:
            app_id = db.execute("PRAGMA application_id").fetchone()[0]
            version = db.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            db.close()
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc):
            raise StoreOpenError(f"{path} is locked by another program ({exc})") from None
        raise StoreOpenError(
            f"{path} is damaged and cannot be read ({exc}); left untouched"
        ) from None
    except sqlite3.DatabaseError as exc:
        raise StoreOpenError(
            f"{path} is damaged and cannot be read ({exc}); left untouched"
        ) from None
    if app_id == 0 and not tables:
        return 0
    if app_id != APPLICATION_ID:
        raise StoreOpenError(f"{path} is not a RAWP database (another program's SQLite file)")
    if version > DB_FORMAT:
        raise StoreOpenError(
            f"{path} was written by a newer rawp (database format {version} > {DB_FORMAT}): "
            "upgrade rawp to open it"
        )
    needed = TABLES if version >= 2 else TABLES_V1
    if not tables >= needed:
        raise StoreOpenError(
            f"{path} is damaged: tables {sorted(needed - tables)} are missing; left untouched"
        )
    return max(1, int(version))


class FileLock:
    """``PATH.lock``, ``flock``'d for the store's lifetime, holding the owner's pid."""

    def __init__(self, db_path: Path) -> None:
        self.path = db_path.with_name(db_path.name + ".lock")
        self._fd: int | None = None

    def acquire(self, db_path: Path) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StoreOpenError(
                f"{db_path} is in use by another rawp process (pid {holder}, lock file "
                f"{self.path}); stop it or choose another --store"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def open_writer(path: Path) -> sqlite3.Connection:
    """The writer's connection to ``path`` (checked, WAL, durable commits; created or upgraded
    to the current format). The caller holds the :class:`FileLock`."""
    found = inspect_file(path) if path.exists() else 0
    # mode bits too: a file marked read-only is refused even for root
    if path.exists() and (not os.access(path, os.W_OK) or not path.stat().st_mode & 0o222):
        raise StoreOpenError(f"{path} is read-only: rawp must be able to write it")
    if not os.access(path.parent, os.W_OK):
        raise StoreOpenError(f"{path.parent} is read-only: SQLite writes its WAL there")
    try:
        writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        writer.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        mode = writer.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreOpenError(f"{path}: SQLite refused WAL mode ({mode})")
        writer.execute("PRAGMA synchronous = FULL")
        if not found:
            create_schema(writer)
        elif found < DB_FORMAT:
            upgrade_to_2(writer)
        add_vault_ids(writer)
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc):
            raise StoreOpenError(f"{path} is locked by another program ({exc})") from None
        raise StoreOpenError(f"{path} cannot be opened for writing ({exc})") from None
    return writer
