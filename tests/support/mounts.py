"""A real tmpfs for a test: a full disk or a read-only file system, not a simulation of one.

Mounting needs root (CAP_SYS_ADMIN); where the test runs without it, the test is skipped
and says why. The mount is detached when the block ends, whatever the test left open on it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["fill", "remount", "tmpfs"]


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


@contextlib.contextmanager
def tmpfs(where: Path, *, size: str = "16m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``where`` (created) for the block."""
    where.mkdir(parents=True, exist_ok=True)
    mounted = _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where))
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        _run("umount", "-l", str(where))


def remount(where: Path, *, read_only: bool) -> None:
    """Make the tmpfs at ``where`` read-only, or writable again."""
    done = _run("mount", "-o", f"remount,{'ro' if read_only else 'rw'}", str(where))
    assert done.returncode == 0, done.stderr


def fill(path: Path) -> None:
    """Write ``path`` until its file system has no byte left."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        size = 1 << 20
        while size:
            try:
                os.write(fd, b"\0" * size)
            except OSError:
                size //= 2  # the last blocks, smaller and smaller
    finally:
        os.close(fd)
