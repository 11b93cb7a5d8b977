"""Multi-node coordination on Redis (relay/cluster/ uses it through RedisStore).

* **Node liveness.** Each node heartbeats into ``rawp:{~nodes}:live`` on Redis's clock (node
  clocks never matter); a node silent too long is dead, and exactly one caller claims the job
  of sweeping it (scripts/node_claim.lua). Each registration takes a new *lease epoch*, the
  fencing token: a sweeper fences the dead node's epoch in every session it recovers
  (scripts/fence.lua), so nothing the node accepted before it noticed may be logged.
* **Held sets.** ``rawp:{~nodes}:held:<N>``: the sessions node N holds connections for, and
  ``rawp:{~nodes}:writing:<N>``: those it has REST writes in progress to (lease.py); the
  sweeper of N recovers both.
* **The session mutex.** ``rawp:{S}:mutex``: a token key with a TTL; whoever holds it may
  change who the session's client is and finalize what follows from that. While held it is
  renewed every third of its TTL (scripts/extend.lua, token-checked like redis-py's
  ``Lock.reacquire``), so a holder whose work outlasts the TTL (a delete waiting on a slow
  consumer) keeps it until it unlocks; a holder that dies, or cannot reach Redis, stops
  renewing and loses it one TTL later.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from protocol.errors import StoreError

from .errors import mapped
from .framing import text
from .keys import (
    NODES_ALL,
    NODES_EPOCH,
    NODES_HELD,
    NODES_LIVE,
    NODES_SWEEP,
    NODES_WRITING,
    SessionKeys,
    mutex_key,
)
from .lua import Scripts

__all__ = ["Coordination"]

_log = logging.getLogger("relay.store.redis")


@dataclass(eq=False, slots=True)
class _Held:
    """A session mutex this store holds, and the task that renews it."""

    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class Coordination:
    """Node heartbeats, sweeps, lease epochs, held sets and session mutexes on one client."""

    def __init__(self, client: Any, scripts: Scripts) -> None:
        self._client = client
        self._scripts = scripts
        self._held: dict[tuple[str, str], _Held] = {}  # (session id, token) -> its renewal

    async def close(self) -> None:
        """Stop renewing the mutexes still held (each expires one TTL later)."""
        held, self._held = list(self._held.values()), {}
        for h in held:
            h.stop.set()
        tasks = {h.task for h in held if h.task is not None and not h.task.done()}
        while tasks:
            # cancelled again until it ends: on Python 3.11 a cancel that lands inside
            # redis-py's asyncio.wait_for can be swallowed (gh-86296)
            for task in tasks:
                task.cancel()
            _done, tasks = await asyncio.wait(tasks, timeout=0.1)

    # --- nodes --------------------------------------------------------------------------------

    async def node_heartbeat(self, node_id: str, *, new_epoch: bool = False) -> tuple[bool, int]:
        """Record that ``node_id`` is alive: (was it still registered, its lease epoch)."""
        keys = [NODES_LIVE, NODES_ALL, NODES_EPOCH]
        with mapped():
            registered, epoch = await self._scripts.node_heartbeat(
                keys=keys, args=[node_id, "1" if new_epoch else "0"]
            )
        return bool(registered), int(epoch)

    async def node_epoch(self, node_id: str) -> int:
        """``node_id``'s current lease epoch (0: it never registered)."""
        with mapped():
            got = await self._client.hget(NODES_EPOCH, node_id)
        return 0 if got is None else int(got)

    async def node_ages(self) -> dict[str, int]:
        """Every known node → ms since its last heartbeat (-1: claimed or never seen)."""
        with mapped():
            flat = await self._scripts.node_ages(keys=[NODES_LIVE, NODES_ALL])
        return {text(n): int(a) for n, a in zip(flat[::2], flat[1::2], strict=True)}

    async def claim_node(
        self, node_id: str, *, dead_after_ms: int, lease_ms: int, token: str, force: bool = False
    ) -> int | None:
        """Become the one sweeper of ``node_id`` if it is dead (or ``force``); atomic.

        Returns the node's lease epoch at the claim (to fence), or None when not claimed.
        """
        keys = [NODES_LIVE, NODES_SWEEP + node_id, NODES_EPOCH]
        args: list[str | int] = [node_id, dead_after_ms, lease_ms, token, "1" if force else "0"]
        with mapped():
            epoch = int(await self._scripts.node_claim(keys=keys, args=args))
        return None if epoch < 0 else epoch

    async def node_swept(self, node_id: str, token: str) -> bool:
        """The sweep of ``node_id`` ended; forget the node when nothing is left of it."""
        keys = [
            NODES_ALL,
            NODES_HELD + node_id,
            NODES_SWEEP + node_id,
            NODES_LIVE,
            NODES_WRITING + node_id,
        ]
        with mapped():
            return bool(await self._scripts.node_swept(keys=keys, args=[node_id, token]))

    async def retire_node(self, node_id: str) -> None:
        """Mark ``node_id`` dead now (a clean shutdown): the next sweep takes its sessions."""
        with mapped():
            await self._client.zadd(NODES_LIVE, {node_id: 0})

    async def fence_node(self, session_id: str, node_id: str, epoch: int) -> bool:
        """Refuse from now on ``node_id``'s appends to the session under leases up to
        ``epoch`` (the node was declared dead). False when there is no such session."""
        k = SessionKeys.of(session_id)
        with mapped():
            return bool(await self._scripts.fence(keys=[k.hdr], args=[node_id, epoch]))

    # --- held sets ----------------------------------------------------------------------------

    async def hold_session(self, node_id: str, session_id: str) -> None:
        """Record that ``node_id`` holds connections of ``session_id``."""
        with mapped():
            await self._client.sadd(NODES_HELD + node_id, session_id)

    async def release_session(self, node_id: str, session_id: str) -> None:
        """``node_id`` holds no connection of ``session_id`` any more."""
        with mapped():
            await self._client.srem(NODES_HELD + node_id, session_id)

    async def held_sessions(self, node_id: str) -> list[str]:
        """The sessions ``node_id`` holds (or held when it died) connections for, or has a
        REST write in progress to (lease.py)."""
        with mapped():
            held = await self._client.smembers(NODES_HELD + node_id)
            writing = await self._client.hkeys(NODES_WRITING + node_id)
        return sorted({text(s) for s in (*held, *writing)})

    # --- the session mutex --------------------------------------------------------------------

    async def lock_session(self, session_id: str, token: str, ttl_ms: int) -> bool:
        """Try to take the session's cross-node mutex; False when another holds it.

        Once taken it is renewed to ``ttl_ms`` every ``ttl_ms / 3`` until
        :meth:`unlock_session` (or :meth:`close`): it lasts as long as its holder's work,
        and ``ttl_ms`` after the holder stops renewing (it died, or lost Redis).
        """
        key = mutex_key(session_id)
        with mapped():
            taken = bool(await self._client.set(key, token, nx=True, px=ttl_ms))
        if taken:
            self.renew_while_held(session_id, token, ttl_ms)
        return taken

    def renew_while_held(self, session_id: str, token: str, ttl_ms: int) -> None:
        """Start renewing the mutex ``token`` has just taken (here or by a script), every
        third of ``ttl_ms``, until :meth:`unlock_session`."""
        held = self._held[(session_id, token)] = _Held()
        held.task = asyncio.get_running_loop().create_task(
            self._renew(session_id, token, ttl_ms, held)
        )

    async def extend_session_lock(self, session_id: str, token: str, ttl_ms: int) -> bool:
        """Set the mutex's time to live to ``ttl_ms`` again if ``token`` still holds it;
        False when it does not (it expired, or another holder has it now)."""
        key = mutex_key(session_id)
        with mapped():
            return bool(await self._scripts.extend(keys=[key], args=[token, ttl_ms]))

    async def unlock_session(self, session_id: str, token: str) -> None:
        """Stop renewing the session's mutex and release it if ``token`` still holds it."""
        await self.release_soon(session_id, token)

    def release_soon(self, session_id: str, token: str) -> Awaitable[None]:
        """Stop renewing ``token``'s mutex now; the returned awaitable releases it if
        ``token`` still holds it."""
        held = self._held.pop((session_id, token), None)
        if held is not None:
            held.stop.set()  # a renewal in flight is token-checked: harmless after the unlock
        return self._unlock(session_id, token)

    async def _unlock(self, session_id: str, token: str) -> None:
        key = mutex_key(session_id)
        with mapped():
            await self._scripts.unlock(keys=[key], args=[token])

    async def _renew(self, session_id: str, token: str, ttl_ms: int, held: _Held) -> None:
        """Renew the mutex every third of its TTL until told to stop."""
        every = ttl_ms / 3000
        while True:
            try:
                async with asyncio.timeout(every):
                    await held.stop.wait()
                return
            except TimeoutError:
                pass
            try:
                renewed = await self.extend_session_lock(session_id, token, ttl_ms)
            except StoreError as exc:
                # the TTL runs meanwhile: the next tick tries again, if it is still ours
                _log.warning("session %s: mutex not renewed: %s", session_id, exc)
                continue
            if not renewed:
                if not held.stop.is_set():
                    _log.warning("session %s: mutex lost while held (expired)", session_id)
                    if self._held.get((session_id, token)) is held:
                        del self._held[(session_id, token)]
                return
