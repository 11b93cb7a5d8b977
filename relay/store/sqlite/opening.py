"""Opening the SQLite store's file (seed 004 "format rejection"), and keeping others out.

A file that is not SQLite, a SQLite file that is not a RAWP database (another program's: its
own ``application_id``, a ``user_version`` or any schema object), or a damaged one stops the
start with :class:`~relay.store.base.StoreOpenError` and is never written to; a database of a
newer format is refused with "upgrade"; so is a file on a read-only file system, or one that
cannot be written.

One owner per database *file*, not per name: the owner ``flock``s the database file itself,
so a second master reaching the same file through a symlink or a hard link finds the lock
(:class:`FileLock`). ``PATH.lock`` beside the file's real path holds the owner's pid (and is
``flock``'d too, as earlier builds lock only it). A start that is refused removes what it
made: SQLite's ``-wal`` and ``-shm`` (a read-only inspection creates them for a WAL database)
and a database file it created.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sqlite3
import stat
import threading
from pathlib import Path
from typing import Final

from ..base import StoreOpenError
from .jobs import BUSY_TIMEOUT_MS
from .schema import (
    APPLICATION_ID,
    DB_FORMAT,
    TABLES,
    TABLES_V1,
    add_vault_ids,
    add_wakes,
    create_schema,
    upgrade_to_2,
)

__all__ = ["FileLock", "inspect_file", "open_connection", "open_writer"]

_SQLITE_MAGIC: Final = b"SQLite format 3\x00"
_READ_ONLY_ERRORS: Final = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def open_connection(path: Path, *, read_only: bool) -> sqlite3.Connection:
    """A connection to the existing file (a reader's, or ``inspect_file``'s)."""
    uri = f"{path.resolve().as_uri()}?mode={'ro' if read_only else 'rw'}"
    db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
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
            objects = db.execute("SELECT type, name FROM sqlite_master").fetchall()
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
    if app_id == 0 and version == 0 and not objects:
        return 0  # an SQLite file with nothing in it, not even a version: nobody's yet
    if app_id != APPLICATION_ID:
        # A version or any table, index or view says another program uses the file.
        raise StoreOpenError(
            f"{path} is not a RAWP database (another program's SQLite file: application_id "
            f"{app_id}, user_version {version}, {len(objects)} schema objects); left untouched"
        )
    if version > DB_FORMAT:
        raise StoreOpenError(
            f"{path} was written by a newer rawp (database format {version} > {DB_FORMAT}): "
            "upgrade rawp to open it"
        )
    tables = {name for kind, name in objects if kind == "table"}
    needed = TABLES if version >= 2 else TABLES_V1
    if not tables >= needed:
        raise StoreOpenError(
            f"{path} is damaged: tables {sorted(needed - tables)} are missing; left untouched"
        )
    return max(1, int(version))


# The files this process owns, by (device, inode): a second store in this process on one of
# them must not open it, as closing that descriptor would drop the owner's SQLite locks.
_OWNED: set[tuple[int, int]] = set()
_OWNED_GUARD: Final = threading.Lock()


class FileLock:
    """The database file ``flock``'d for the store's lifetime, and ``PATH.lock`` beside its
    real path holding the owner's pid.

    :meth:`acquire` opens (or creates) the database file and locks that open file: the lock
    is on the file's identity, whatever name reached it. SQLite's own locks are POSIX record
    locks, which closing *any* descriptor of the file drops for the whole process, so
    :meth:`release` must come after every SQLite connection to the file is closed, and a
    file this process owns already is refused from a table of its own, without opening it.
    """

    def __init__(self, db_path: Path) -> None:
        self.given = db_path
        self.real = db_path
        self.path = db_path.with_name(db_path.name + ".lock")
        self._fd: int | None = None
        self._pid_fd: int | None = None
        self._made: list[Path] = []  # files this start created (removed if it is refused)
        self._existed: set[Path] = set()
        self._identity = (0, 0)  # the locked file's (device, inode)

    def acquire(self) -> Path:
        """Lock the database file (created empty if absent); its real path. Raises
        :class:`StoreOpenError` when another process owns it or it cannot be written."""
        given = self.given
        real = given.resolve()
        self.real = real
        self.path = real.with_name(real.name + ".lock")
        self._existed = {p for p in _sqlite_files(real) if p.exists()}
        created = not real.exists()
        with contextlib.suppress(FileNotFoundError):
            info = real.stat()
            with _OWNED_GUARD:
                if (info.st_dev, info.st_ino) in _OWNED:
                    raise StoreOpenError(
                        f"{given} is in use by another store of this rawp process (pid "
                        f"{os.getpid()}); close it or choose another --store"
                    )
        try:
            fd = os.open(real, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
        except OSError as exc:
            raise _cannot_open(given, real, exc) from None
        if created:
            self._made.append(real)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise StoreOpenError(f"{given} is not a regular file; give the path of a database")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _flock_holder(fd) or _pid_in(self.path) or "unknown"
            os.close(fd)
            same = "" if str(real) == os.path.abspath(given) else f", the same file as {real}"
            raise StoreOpenError(
                f"{given} is in use by another rawp process (pid {holder}{same}); stop it or "
                "choose another --store"
            ) from None
        except OSError as exc:  # no flock here (some network file systems)
            os.close(fd)
            raise StoreOpenError(
                f"{given} cannot be locked ({exc.strerror or exc}): rawp keeps its database "
                "on a local file system"
            ) from None
        self._fd = fd
        info = os.fstat(fd)
        self._identity = (info.st_dev, info.st_ino)
        with _OWNED_GUARD:
            _OWNED.add(self._identity)
        try:
            self._lock_pid_file(given)
        except BaseException as exc:
            self.abandon()
            if isinstance(exc, OSError):
                raise StoreOpenError(
                    f"{given} cannot be locked ({self.path}: {exc.strerror or exc})"
                ) from None
            raise
        return real

    def _lock_pid_file(self, given: Path) -> None:
        made = not self.path.exists()
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise _cannot_open(given, self.path, exc) from None
        if made:
            self._made.append(self.path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # an earlier build, which locks only this file
            holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StoreOpenError(
                f"{given} is in use by another rawp process (pid {holder}, lock file "
                f"{self.path}); stop it or choose another --store"
            ) from None
        self._pid_fd = fd
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)

    def abandon(self) -> None:
        """A refused start: remove what it made (SQLite's ``-wal`` / ``-shm`` that a look
        at the file created, a database file it created, the pid file), then release.
        Every SQLite connection to the file must be closed by now."""
        if self._fd is not None:  # only the owner may remove anything
            real = self.real
            wal, shm = _sqlite_files(real)[1:]
            database_made = real in self._made and _size(real) == 0
            for path in (wal, shm):
                if path in self._existed:
                    continue
                # a new WAL holds nothing yet; a database made now has nothing to keep
                if path == shm or database_made or _size(wal) == 0:
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
            if database_made:
                with contextlib.suppress(FileNotFoundError):
                    real.unlink()
            if self.path in self._made:
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
        self.release()

    def release(self) -> None:
        for fd in (self._pid_fd, self._fd):
            if fd is not None:
                os.close(fd)  # closing the descriptor drops its flock
        if self._fd is not None:
            with _OWNED_GUARD:
                _OWNED.discard(self._identity)
        self._fd = self._pid_fd = None
        self._made = []


def _sqlite_files(real: Path) -> tuple[Path, Path, Path]:
    """The database file and SQLite's two beside it."""
    return real, real.with_name(real.name + "-wal"), real.with_name(real.name + "-shm")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _cannot_open(given: Path, path: Path, exc: OSError) -> StoreOpenError:
    """Why ``path`` (the database or its lock file) cannot be opened for writing."""
    if exc.errno == errno.EROFS:
        return StoreOpenError(
            f"{given} is on a read-only file system ({path}): rawp must be able to write it"
        )
    if exc.errno in _READ_ONLY_ERRORS:
        return StoreOpenError(
            f"{given} is read-only ({path}: {exc.strerror}): rawp must be able to write it"
        )
    return StoreOpenError(f"{given} cannot be opened ({path}: {exc.strerror or exc})")


def _flock_holder(fd: int) -> str | None:
    """The pid holding a ``flock`` on the file of ``fd``, as the kernel lists it (Linux's
    /proc/locks; None elsewhere, or when it is not listed)."""
    info = os.fstat(fd)
    needle = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    try:
        listing = Path("/proc/locks").read_text()
    except OSError:
        return None
    for line in listing.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
        # pid 0: a holder outside this pid namespace, not named
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == needle:
            return None if fields[4] == "0" else fields[4]
    return None


def _pid_in(lock_path: Path) -> str | None:
    with contextlib.suppress(OSError):
        return lock_path.read_text(errors="replace").strip() or None
    return None


def open_writer(path: Path) -> sqlite3.Connection:
    """The writer's connection to ``path`` (checked, WAL, durable commits, deleted content
    overwritten; created or upgraded to the current format). The caller holds the
    :class:`FileLock`."""
    found = inspect_file(path) if path.exists() else 0
    # mode bits too: a file marked read-only is refused even for root
    if path.exists() and (not os.access(path, os.W_OK) or not path.stat().st_mode & 0o222):
        raise StoreOpenError(f"{path} is read-only: rawp must be able to write it")
    if not os.access(path.parent, os.W_OK):
        raise StoreOpenError(f"{path.parent} is read-only: SQLite writes its WAL there")
    writer: sqlite3.Connection | None = None
    try:
        writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        writer.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        mode = writer.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreOpenError(f"{path}: SQLite refused WAL mode ({mode})")
        writer.execute("PRAGMA synchronous = FULL")
        # What a deletion removes is overwritten with zeros, in its pages and in the pages
        # it frees, so a purged session's bytes do not linger in the file (docs §6).
        writer.execute("PRAGMA secure_delete = ON")
        if not found:
            create_schema(writer)
        elif found < DB_FORMAT:
            upgrade_to_2(writer)
        add_vault_ids(writer)
        add_wakes(writer)
    except BaseException as exc:
        if writer is not None:
            writer.close()  # before the lock goes: its descriptor's close drops SQLite's locks
        if isinstance(exc, sqlite3.OperationalError):
            if "locked" in str(exc):
                raise StoreOpenError(f"{path} is locked by another program ({exc})") from None
            if "readonly" in str(exc).replace(" ", "").lower():
                raise StoreOpenError(
                    f"{path} is read-only: rawp must be able to write it"
                ) from None
            raise StoreOpenError(f"{path} cannot be opened for writing ({exc})") from None
        raise
    return writer
