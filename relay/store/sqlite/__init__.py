"""The durable embedded store: one SQLite file owned by one ``rawp serve`` (notes §16.2, seed 004).

Layout (seed 004's "SQLite with one row per event"): one row per log entry beside a header row
per session, and tables of their own for participants, deadlines, credentials and what
``welcome.received`` reports (schema.py says what each holds). Writes: one writer thread
group-commits every queued write in one transaction, WAL with ``synchronous=FULL`` (writer.py).
Reads run on their own connections in a small thread pool. Opening refuses any file rawp must
not touch, and a lock on the database file itself keeps a second process out, whatever name
it uses (opening.py). Purges leave no bytes behind (secure_delete, the WAL truncated).

The modules, one job each: ``store`` (:class:`SqliteStore`, the facade), ``schema`` (the
tables, the format version, its upgrades), ``statements`` (the SQL of reads and writes),
``opening`` (file checks, format check, the lock), ``writer`` (the writer thread), ``reader``
(the reader threads), ``jobs`` (what those share, the file's health), ``integrity`` (the
background check), ``tail`` (each log's newest entries in memory), ``appending`` (one append
on that thread) and ``rows`` (rows to values and back).
"""

from __future__ import annotations

from ..base import StoreOpenError
from .schema import APPLICATION_ID, DB_FORMAT
from .store import SqliteStore

__all__ = ["APPLICATION_ID", "DB_FORMAT", "SqliteStore", "StoreOpenError"]
