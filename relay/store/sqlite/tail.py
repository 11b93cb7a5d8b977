"""The newest entries of each session's log, kept in memory beside the file (issue 16).

A reattach reads its backlog: the entries after its cursor, usually a few dozen of the
newest. On the file, every row read is a step of Python's ``sqlite3``, which lets go of the
interpreter lock around each one, so a reader thread and the event loop handed the lock to
each other once per row; in a reconnect storm that was most of what a reattach cost beyond
the memory store. This process is the only writer of the file (``FileLock``), and every
append it commits passes here in commit order, so the newest entries are known without
reading them back: a read that asks only for what a tail holds is answered from it, and
any other read goes to the file.

A tail is a run of entries with no gap up to the log's head as this process last saw it
committed. It is dropped, and the file answers, whenever that is not certain: an append
that failed or whose answer was lost (its transaction may have committed), a delete. It
follows the store's trimming (never older than ``retention`` entries) and is bounded per
session and in all (:data:`MAX_ENTRIES`, :data:`MAX_BYTES`, :data:`MAX_TOTAL_BYTES`; the
session whose tail was used longest ago gives way first).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from ..base import AppendResult, LogEntry, NewEntry

__all__ = ["MAX_BYTES", "MAX_ENTRIES", "MAX_TOTAL_BYTES", "LogTails"]

MAX_ENTRIES: Final = 512  # per session
MAX_BYTES: Final = 1 << 20  # per session
MAX_TOTAL_BYTES: Final = 64 << 20  # all sessions of the store


@dataclass(slots=True)
class _Tail:
    entries: deque[LogEntry] = field(default_factory=deque)
    size: int = 0

    @property
    def head(self) -> int:
        return self.entries[-1].seq if self.entries else 0

    def pop_oldest(self) -> int:
        gone = len(self.entries.popleft().data)
        self.size -= gone
        return gone


class LogTails:
    """Every session's tail; only the event loop's thread calls it."""

    def __init__(self, retention: int | None) -> None:
        self._retention = retention
        self._tails: OrderedDict[str, _Tail] = OrderedDict()
        self._size = 0

    @property
    def size(self) -> int:
        """Bytes of entry data held, all sessions."""
        return self._size

    def appended(
        self, session_id: str, entries: Sequence[NewEntry], results: Sequence[AppendResult]
    ) -> None:
        """An append committed: its new entries join the tail (duplicates were not logged)."""
        logged = [
            e.committed(r.seq)  # as the row was written
            for e, r in zip(entries, results, strict=True)
            if not r.duplicate
        ]
        if not logged:
            return
        tail = self._tails.get(session_id)
        if tail is None or tail.head + 1 != logged[0].seq:
            # A run that does not follow this one: it starts again here (a session this
            # process had not appended to, or one whose tail was dropped).
            self.drop(session_id)
            tail = self._tails[session_id] = _Tail()
        self._tails.move_to_end(session_id)
        for entry in logged:
            tail.entries.append(entry)
            tail.size += len(entry.data)
            self._size += len(entry.data)
        keep = MAX_ENTRIES if self._retention is None else min(MAX_ENTRIES, self._retention)
        while len(tail.entries) > keep or (tail.size > MAX_BYTES and len(tail.entries) > 1):
            self._size -= tail.pop_oldest()
        while self._size > MAX_TOTAL_BYTES and len(self._tails) > 1:
            _, oldest = self._tails.popitem(last=False)
            self._size -= oldest.size

    def drop(self, session_id: str) -> None:
        """Forget a session's tail: the file answers its reads."""
        tail = self._tails.pop(session_id, None)
        if tail is not None:
            self._size -= tail.size

    def clear(self) -> None:
        """Forget every tail (the store closed)."""
        self._tails.clear()
        self._size = 0

    def read(
        self, session_id: str, after_seq: int, before_seq: int | None, limit: int | None
    ) -> list[LogEntry] | None:
        """The entries after ``after_seq`` (and before ``before_seq``, at most ``limit``),
        oldest first — or None when the tail may not hold all of them."""
        tail = self._tails.get(session_id)
        if tail is None or not tail.entries:
            return None
        first = tail.entries[0].seq
        if after_seq + 1 < first:
            return None  # older entries than it keeps
        self._tails.move_to_end(session_id)
        stop = tail.head + 1 if before_seq is None else min(before_seq, tail.head + 1)
        start = after_seq + 1
        if start >= stop or limit == 0:
            return []
        count = stop - start if limit is None or limit < 0 else min(limit, stop - start)
        offset = start - first
        return [tail.entries[i] for i in range(offset, offset + count)]
