"""Multi-node coordination on Redis (relay/cluster.py uses it through RedisStore).

* **Node liveness.** Each node heartbeats into ``rawp:{~nodes}:live`` on Redis's clock (node
  clocks never matter); a node silent too long is dead, and exactly one caller claims the job
  of sweeping it (scripts/node_claim.lua). Each registration takes a new *lease epoch*, the
  fencing token: a sweeper fences the dead node's epoch in every session it recovers
  (scripts/fence.lua), so nothing the node accepted before it noticed may be logged.
* **Held sets.** ``rawp:{~nodes}:held:<N>``: the sessions node N holds connections for, which
  the sweeper of N recovers.
* **The session mutex.** ``rawp:{S}:mutex``: a token key with a TTL; whoever holds it may
  change who the session's client is and finalize what follows from that.
"""

from __future__ import annotations

from typing import Any

from .errors import mapped
from .framing import text
from .keys import (
    NODES_ALL,
    NODES_EPOCH,
    NODES_HELD,
    NODES_LIVE,
    NODES_SWEEP,
    SessionKeys,
    mutex_key,
)
from .lua import Scripts

__all__ = ["Coordination"]


class Coordination:
    """Node heartbeats, sweeps, lease epochs, held sets and session mutexes on one client."""

    def __init__(self, client: Any, scripts: Scripts) -> None:
        self._client = client
        self._scripts = scripts

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
        keys = [NODES_ALL, NODES_HELD + node_id, NODES_SWEEP + node_id, NODES_LIVE]
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
        """The sessions ``node_id`` holds (or held when it died) connections for."""
        with mapped():
            return sorted(text(s) for s in await self._client.smembers(NODES_HELD + node_id))

    # --- the session mutex --------------------------------------------------------------------

    async def lock_session(self, session_id: str, token: str, ttl_ms: int) -> bool:
        """Try to take the session's cross-node mutex for ``ttl_ms``; False when held."""
        key = mutex_key(session_id)
        with mapped():
            return bool(await self._client.set(key, token, nx=True, px=ttl_ms))

    async def unlock_session(self, session_id: str, token: str) -> None:
        """Release the session's mutex if ``token`` still holds it."""
        key = mutex_key(session_id)
        with mapped():
            await self._scripts.unlock(keys=[key], args=[token])
