"""The SQLite store's integrity check: once per start, in the background, the whole file.

Start-up reads only the header and index tables, so its time does not grow with the data
(opening.py); a page damaged deep inside the file would show only when a request reads it,
while readiness said all was well. So once the store is open, a thread of its own runs
``PRAGMA quick_check`` on a read-only connection of its own (WAL: it never holds up the
writer) while the master serves; what it finds marks the store damaged in its
:class:`~relay.store.sqlite.jobs.Health`, and readiness answers 503 from then on. Closing the
store interrupts a check still running.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from typing import Final

from .jobs import Health

__all__ = ["IntegrityCheck"]

_PROBLEMS_LISTED: Final = 5  # quick_check stops after this many findings
_INTERRUPT_EVERY_S: Final = 0.05


class IntegrityCheck(threading.Thread):
    """``PRAGMA quick_check`` over the file; a finding goes to ``health.damaged``."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], health: Health) -> None:
        super().__init__(name="rawp-sqlite-check", daemon=True)
        self._connect = connect
        self._health = health
        self._guard = threading.Lock()
        self._stopping = False
        self._db: sqlite3.Connection | None = None
        self.finished = threading.Event()

    def run(self) -> None:
        try:
            with self._guard:
                if self._stopping:
                    return
                self._db = self._connect()
            rows = self._db.execute(f"PRAGMA quick_check({_PROBLEMS_LISTED})").fetchall()
            found = [" ".join(str(row[0]).split()) for row in rows]  # one line each
            if found != ["ok"] and self._health.damaged is None:
                self._health.damaged = "; ".join(found)
        except sqlite3.Error as exc:
            if not self._stopping:  # else: interrupted by close
                self._health.note(exc)
        finally:
            with self._guard:
                if self._db is not None:
                    self._db.close()
                    self._db = None
            self.finished.set()

    def stop(self) -> None:
        """Interrupt the check (if running) and wait for the thread to end."""
        with self._guard:
            self._stopping = True
        while self.is_alive():
            with self._guard:
                if self._db is not None:
                    self._db.interrupt()  # a statement about to start is caught next round
            self.join(_INTERRUPT_EVERY_S)
