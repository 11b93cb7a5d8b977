"""The end of a session on this node (§7.5.3, §7.7, notes §9, §16.1).

The open calls are cancelled, the turn ended and ``session.deleted`` logged, in that order
and last of all; each attached participant's queued frames are let out (bounded) before it
is fenced and closed 1000; then the session is archived (expiry, fatal error) or purged (a
deletion) and dropped from the node's registry.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

import msgspec
import structlog

from protocol import codec
from protocol.endings import ending_notice
from protocol.errors import StoreUnavailableError
from protocol.finalize import make_final

from ..archive import end_session_in_store
from . import builders
from .core import Hooks, SessionCore
from .pipeline import CommitPipeline

__all__ = ["Termination"]

log = structlog.get_logger("rawp.session")

_NORMAL: Final = 1000


class Termination:
    """Ends one session (caller holds the lock)."""

    def __init__(self, core: SessionCore, pipeline: CommitPipeline, hooks: Hooks) -> None:
        self.core = core
        self.pipeline = pipeline
        self.hooks = hooks

    async def terminate(self, reason: str, deleted_by: str) -> None:
        """Log the §7.5.3 / §7.7 order, close every participant, archive or purge."""
        core = self.core
        if core.terminated:
            return
        core.ending = True  # a store failure from here on is the ending's own to handle
        window_ms = core.deps.settings.reattach_window_ms
        frames = builders.ending(
            core.id, core.state, reason, deleted_by, window_ms=None if window_ms < 0 else window_ms
        )
        make_final(core.state)
        # What was committed before the end is acknowledged before the §9 frames: nothing
        # may follow session.deleted on the wire.
        core.post_acks()
        logged = await self.hooks.append_master(frames)
        core.end_stored = logged
        if not logged:
            # Not durable, but the participants must still hear the order before close.
            for frame in frames:
                data = codec.encode(msgspec.structs.replace(frame, sender=core.master_sender))
                for q in core.participants.values():
                    q.outbox.put(data)
        self.end_here()
        kind, text = ending_notice(reason, deleted_by, window_ms)
        try:
            await self.close_participants(f"session ended: {text}" if kind == "ended" else text)
            with contextlib.suppress(StoreUnavailableError):
                # expiry and fatal errors archive, deletions purge (notes §16.1)
                await end_session_in_store(core.store, core.id, reason, deleted_by)
                core.end_stored = True
            core.deps.forget(core)
        finally:
            core.ended.set()
        # An expiry or a fatal error ends (archives) a session; only a deletion deletes it.
        event = "session_ended" if kind == "ended" else "session_deleted"
        log.info(event, session_id=core.id, reason=reason, by=deleted_by)

    def end_here(self) -> None:
        """Accept nothing more: the worker ends, a submitter waiting for space returns."""
        self.core.terminated = True
        self.pipeline.stop()

    async def close_participants(self, reason: str) -> None:
        """Let each attached participant's queued frames out (bounded), fence it, close it
        1000 with ``reason``, and forget it: the end of a deleted session on this node."""
        core = self.core
        attached = list(core.participants.values())
        # session.deleted is the last frame (§9): an ack still due (a commit that raced the
        # end) is dropped, never written after it; terminate() acknowledged what came before.
        core.drop_acks()
        for q in attached:
            q.outbox.flush()
        timeout = core.settings.shutdown_timeout_s
        await asyncio.gather(*(q.outbox.drain(timeout) for q in attached))
        for q in attached:
            q.fence()
        await asyncio.gather(
            *(q.sink.close(_NORMAL, reason) for q in attached), return_exceptions=True
        )
        core.participants.clear()
