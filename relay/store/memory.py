"""The embedded store: everything in this process's memory (the default, one node).

Appends are synchronous under the event loop, so they are atomic and "durable" as far as
this process goes; nothing survives a restart. Optional retention trims each log to its
newest ``retention`` entries, so ``lost_frame_count`` arithmetic is exercised here too.
Headers go in and come out as copies, as from a database: a caller's change to one it holds
is not the store's until it is written (a session's header is changed before its write).
"""

from __future__ import annotations

import asyncio
import bisect
import copy
import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from protocol.errors import SessionMissing

from .base import (
    AppendResult,
    Credential,
    Deadline,
    LogEntry,
    NewEntry,
    ParticipantRecord,
    SessionHeader,
    Store,
    WakeRecord,
    checked_format,
    received_of,
    refused_behind,
    settled_wake,
)

__all__ = ["MemoryStore"]


@dataclass
class _Session:
    header: SessionHeader
    entries: list[LogEntry] = field(default_factory=list)
    first_seq: int = 1  # smallest seq still stored
    head: int = 0
    by_message_id: dict[str, int] = field(default_factory=dict)
    participants: dict[str, ParticipantRecord] = field(default_factory=dict)
    received: dict[str, str] = field(default_factory=dict)  # sender id → welcome.received


class MemoryStore(Store):
    """In-process store (notes §12 ``memory``)."""

    name = "memory"

    def __init__(self, *, retention: int | None = None) -> None:
        self._sessions: dict[str, _Session] = {}
        self._tombstones: set[str] = set()
        self._deadlines: dict[tuple[str, str], Deadline] = {}
        # The participants with an armed deadline, by session: ending a session drops its
        # deadlines without a scan of every deadline (a sweep of N ends N sessions).
        self._armed: dict[str, set[str]] = {}
        # Due order for claims: (due_ms, set order, key, deadline); an item whose deadline is
        # no longer the key's (cleared, moved) is skipped when reached, and the heap is
        # rebuilt once such items outnumber the live ones. A claim then costs what it claims,
        # not a scan of every deadline (10,000 dropped edges: every tick of the loop).
        self._due: list[tuple[int, int, tuple[str, str], Deadline]] = []
        self._set_order = itertools.count()
        self._credentials: dict[str, Credential] = {}
        self._retention = retention
        # (session_id, wake_id) → record, and the wake ids of each session (its end, a cancel
        # and a seen look at its own records only, not every session's).
        self._wakes: dict[tuple[str, str], WakeRecord] = {}
        self._wakes_of: dict[str, set[str]] = {}
        # Due order for claims: (due_ms, order, key), one pushed whenever a record is written
        # with a due time; an item whose record is gone or due at another time is skipped
        # when reached, and the heap rebuilt once such items outnumber the live ones. A claim
        # costs what it claims, not a sort of every record (10,000 due in one minute).
        self._wakes_due: list[tuple[int, int, tuple[str, str]]] = []
        self._wake_order = itertools.count()
        self._claims = itertools.count(1)

    async def ping(self) -> bool:
        return True

    def _get(self, session_id: str) -> _Session | None:
        return self._sessions.get(session_id)

    async def create_session(self, header: SessionHeader) -> tuple[SessionHeader, bool]:
        existing = self._sessions.get(header.session_id)
        if existing is not None:
            return copy.copy(existing.header), False
        self._tombstones.discard(header.session_id)
        self._sessions[header.session_id] = _Session(header=copy.copy(header))
        return header, True

    async def get_session(self, session_id: str) -> SessionHeader | None:
        s = self._get(session_id)
        if s is None:
            return None
        return checked_format(copy.copy(s.header))

    async def is_deleted(self, session_id: str) -> bool:
        return session_id in self._tombstones

    async def list_sessions(
        self, workspace: str, *, after: str | None = None, limit: int = 100
    ) -> list[SessionHeader]:
        ids = sorted(k for k, v in self._sessions.items() if v.header.workspace == workspace)
        start = bisect.bisect_right(ids, after) if after is not None else 0
        return [copy.copy(self._sessions[i].header) for i in ids[start : start + limit]]

    async def rename_session(self, session_id: str, name: str) -> None:
        s = self._get(session_id)
        if s is not None:
            s.header.name = name
            s.header.revision += 1

    def _drop_wakes(self, session_id: str) -> None:
        for wake_id in self._wakes_of.pop(session_id, ()):
            self._wakes.pop((session_id, wake_id), None)

    async def delete_session(self, session_id: str) -> bool:
        self._drop_wakes(session_id)
        s = self._sessions.pop(session_id, None)
        self._drop_deadlines(session_id)
        if s is None:
            return False
        self._tombstones.add(session_id)
        return True

    async def archive_session(
        self, session_id: str, *, ended_at: str, ended_at_ms: int, reason: str, deleted_by: str
    ) -> bool:
        s = self._get(session_id)
        if s is None:
            return False
        s.header.ended_at, s.header.ended_at_ms = ended_at, ended_at_ms
        s.header.reason, s.header.deleted_by = reason, deleted_by
        s.header.revision += 1
        s.participants.clear()
        self._drop_wakes(session_id)
        self._drop_deadlines(session_id)
        return True

    def _drop_deadlines(self, session_id: str) -> None:
        for participant_id in self._armed.pop(session_id, ()):
            self._deadlines.pop((session_id, participant_id), None)

    async def archived_before(self, cutoff_ms: int, limit: int = 100) -> list[str]:
        ended = sorted(
            (s.header.ended_at_ms, sid)
            for sid, s in self._sessions.items()
            if s.header.ended_at_ms is not None and s.header.ended_at_ms < cutoff_ms
        )
        return [sid for _, sid in ended[:limit]]

    def append_nowait(
        self,
        session_id: str,
        entries: Sequence[NewEntry],
        *,
        after: asyncio.Future[list[AppendResult]] | None = None,
    ) -> asyncio.Future[list[AppendResult]]:
        """Applied at once (this store's append never waits): a future already done, no task
        per append. An ``append`` replaced on the instance or a subclass (a store wrapped to
        inject faults) gets the default, awaited path."""
        if (
            "append" in self.__dict__  # replaced on the instance
            or type(self).append is not _OWN_APPEND  # or by a subclass
            or (after is not None and not after.done())
        ):
            return super().append_nowait(session_id, entries, after=after)
        future: asyncio.Future[list[AppendResult]] = asyncio.get_running_loop().create_future()
        refused = refused_behind(after)
        if refused is not None:
            future.set_exception(refused)
        else:
            try:
                future.set_result(self._append(session_id, entries))
            except Exception as exc:  # SessionMissing, as the awaited call would raise it
                future.set_exception(exc)
        return future

    async def append(self, session_id: str, entries: Sequence[NewEntry]) -> list[AppendResult]:
        return self._append(session_id, entries)

    def _append(self, session_id: str, entries: Sequence[NewEntry]) -> list[AppendResult]:
        s = self._get(session_id)
        if s is None:
            raise SessionMissing(session_id)
        results: list[AppendResult] = []
        added = 0
        for e in entries:
            dup = s.by_message_id.get(e.message_id)
            if dup is not None:
                results.append(AppendResult(seq=dup, duplicate=True))
                continue
            s.head += 1
            seq = s.head
            s.by_message_id[e.message_id] = seq
            s.entries.append(e.committed(seq))
            results.append(AppendResult(seq=seq))
            added += 1
            got = received_of(e)
            if got is not None:
                s.received[e.sender_id] = got
        s.header.revision += added  # duplicates change nothing (as in the Redis script)
        if self._retention is not None and len(s.entries) > self._retention:
            cut = len(s.entries) - self._retention
            del s.entries[:cut]
            s.first_seq = s.entries[0].seq
        return results

    async def read(
        self,
        session_id: str,
        *,
        after_seq: int = 0,
        before_seq: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[LogEntry]:
        s = self._get(session_id)
        if s is None:
            return []
        # entries are dense from first_seq: index arithmetic instead of a scan.
        lo = max(after_seq + 1, s.first_seq) - s.first_seq
        hi = len(s.entries) if before_seq is None else max(0, before_seq - s.first_seq)
        if lo >= hi:
            return []
        if newest_first:
            start = hi - limit if limit is not None else lo
            return s.entries[max(lo, start) : hi][::-1]
        end = hi if limit is None else min(hi, lo + limit)
        return s.entries[lo:end]

    async def head_seq(self, session_id: str) -> int:
        s = self._get(session_id)
        return 0 if s is None else s.head

    async def last_received(self, session_id: str, participant_id: str) -> str | None:
        """Kept per sender by :meth:`append` (a fork starts with none, as on Redis)."""
        s = self._get(session_id)
        return None if s is None else s.received.get(participant_id)

    async def trimmed_before(self, session_id: str) -> int:
        s = self._get(session_id)
        if s is None:
            return 1
        return s.first_seq if s.entries else s.head + 1

    async def message_seq(self, session_id: str, message_id: str) -> int | None:
        s = self._get(session_id)
        return None if s is None else s.by_message_id.get(message_id)

    async def fork_session(self, source_id: str, header: SessionHeader, at_seq: int) -> bool:
        source = self._get(source_id)
        if source is None or header.session_id in self._sessions:
            return False
        copied = [e for e in source.entries if e.seq <= at_seq]
        fork = _Session(header=copy.copy(header))
        for e in copied:
            fork.entries.append(e)
            fork.by_message_id[e.message_id] = e.seq
        fork.head = copied[-1].seq if copied else 0
        fork.first_seq = copied[0].seq if copied else 1
        self._sessions[header.session_id] = fork
        self._tombstones.discard(header.session_id)
        return True

    # Records are copied in and out, as every other store serializes them: a caller that
    # changes its record before a write that fails has not changed what the store holds.
    async def put_participant(self, session_id: str, record: ParticipantRecord) -> None:
        s = self._get(session_id)
        if s is not None:
            s.participants[record.participant_id] = copy.copy(record)

    async def get_participant(
        self, session_id: str, participant_id: str
    ) -> ParticipantRecord | None:
        s = self._get(session_id)
        record = None if s is None else s.participants.get(participant_id)
        return None if record is None else copy.copy(record)

    async def list_participants(self, session_id: str) -> list[ParticipantRecord]:
        s = self._get(session_id)
        return [] if s is None else [copy.copy(r) for r in s.participants.values()]

    async def remove_participant(self, session_id: str, participant_id: str) -> None:
        s = self._get(session_id)
        if s is not None:
            s.participants.pop(participant_id, None)

    async def set_deadline(self, deadline: Deadline) -> None:
        key = (deadline.session_id, deadline.participant_id)
        self._deadlines[key] = deadline
        self._armed.setdefault(deadline.session_id, set()).add(deadline.participant_id)
        heapq.heappush(self._due, (deadline.due_ms, next(self._set_order), key, deadline))
        if len(self._due) > 2 * len(self._deadlines) + 64:
            self._due = [item for item in self._due if self._deadlines.get(item[2]) is item[3]]
            heapq.heapify(self._due)

    async def clear_deadline(self, session_id: str, participant_id: str) -> None:
        self._deadlines.pop((session_id, participant_id), None)
        self._disarmed(session_id, participant_id)

    def _disarmed(self, session_id: str, participant_id: str) -> None:
        armed = self._armed.get(session_id)
        if armed is not None:
            armed.discard(participant_id)
            if not armed:
                del self._armed[session_id]

    async def claim_due_deadlines(self, now_ms: int, limit: int = 100) -> list[Deadline]:
        due: list[Deadline] = []
        heap = self._due
        while heap and len(due) < limit and heap[0][0] <= now_ms:
            _, _, key, deadline = heapq.heappop(heap)
            if self._deadlines.get(key) is deadline:
                del self._deadlines[key]
                self._disarmed(*key)
                due.append(deadline)
        return due

    def _write_wake(self, record: WakeRecord) -> None:
        """Keep ``record`` (the store's own copy), indexed by session and due time."""
        key = (record.session_id, record.wake_id)
        self._wakes[key] = record
        self._wakes_of.setdefault(record.session_id, set()).add(record.wake_id)
        if record.due_ms is not None:
            self._push_due(record.due_ms, key)

    def _push_due(self, due_ms: int, key: tuple[str, str]) -> None:
        heapq.heappush(self._wakes_due, (due_ms, next(self._wake_order), key))
        if len(self._wakes_due) > 2 * len(self._wakes) + 64:
            self._wakes_due = [item for item in self._wakes_due if self._wake_due_at(item)]
            heapq.heapify(self._wakes_due)

    def _wake_due_at(self, item: tuple[int, int, tuple[str, str]]) -> bool:
        """Is the heap item still its record's due time?"""
        record = self._wakes.get(item[2])
        return record is not None and record.due_ms == item[0]

    def _remove_wake(self, key: tuple[str, str]) -> None:
        del self._wakes[key]
        ids = self._wakes_of.get(key[0])
        if ids is not None:
            ids.discard(key[1])
            if not ids:
                del self._wakes_of[key[0]]

    def _session_wakes(self, session_id: str) -> list[tuple[tuple[str, str], WakeRecord]]:
        return [
            ((session_id, w), self._wakes[session_id, w])
            for w in sorted(self._wakes_of.get(session_id, ()))
        ]

    async def put_wake(self, record: WakeRecord) -> None:
        await self.cancel_wake(record.session_id, record.revisit_id)
        self._write_wake(copy.copy(record))

    async def cancel_wake(self, session_id: str, revisit_id: str) -> None:
        for key, r in self._session_wakes(session_id):
            if r.revisit_id == revisit_id and r.state == "pending":
                self._remove_wake(key)

    async def get_wake(self, session_id: str, wake_id: str) -> WakeRecord | None:
        record = self._wakes.get((session_id, wake_id))
        return None if record is None else copy.copy(record)

    async def claim_due_wakes(
        self, now_ms: int, lease_ms: int, limit: int = 100
    ) -> list[WakeRecord]:
        due: list[WakeRecord] = []
        taken: set[tuple[str, str]] = set()
        heap = self._wakes_due
        while heap and len(due) < limit and heap[0][0] <= now_ms:
            item = heapq.heappop(heap)
            if not self._wake_due_at(item) or item[2] in taken:
                continue  # gone, or due at another time since (its own item is further on)
            taken.add(item[2])
            r = self._wakes[item[2]]
            r.claim = f"c{next(self._claims)}"
            r.due_ms = now_ms + lease_ms
            due.append(r)
        for r in due:  # due again once the lease runs out (pushed after: never this claim's)
            self._push_due(now_ms + lease_ms, (r.session_id, r.wake_id))
        return [copy.copy(r) for r in due]

    async def settle_wake(self, record: WakeRecord, claim: str) -> bool:
        key = (record.session_id, record.wake_id)
        stored = self._wakes.get(key)
        if stored is None or stored.claim != claim:
            return False
        new = settled_wake(stored, record)
        if new is None:
            self._remove_wake(key)
        else:
            self._write_wake(new)
        return True

    async def wakes_seen(self, session_id: str) -> list[WakeRecord]:
        seen = []
        for key, r in self._session_wakes(session_id):
            if r.state == "due":
                seen.append(copy.copy(r))
                r.state = "done"
                if r.webhook != "pending":
                    self._remove_wake(key)
        return seen

    async def list_wakes(
        self, workspace: str, *, due_only: bool, after: tuple[str, str] | None, limit: int
    ) -> list[WakeRecord]:
        states = ("due",) if due_only else ("pending", "due")
        keys = sorted(
            k
            for k, r in self._wakes.items()
            if r.workspace == workspace and r.state in states and (after is None or k > after)
        )
        return [copy.copy(self._wakes[k]) for k in keys[:limit]]

    async def put_credential(self, credential: Credential) -> None:
        self._credentials[credential.digest] = credential

    async def get_credential(self, digest: str) -> Credential | None:
        return self._credentials.get(digest)

    async def list_keys(self) -> list[Credential]:
        return [c for c in self._credentials.values() if c.kind == "key"]

    async def touch_credential(self, digest: str, at_ms: int) -> None:
        record = self._credentials.get(digest)
        if record is not None:
            record.last_used_ms = at_ms


_OWN_APPEND: Final = MemoryStore.append  # as defined here: a patched class is not this one
