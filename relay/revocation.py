"""Credentials end with their validity (notes §16.9): revoked or expired → connections end.

Every :data:`CHECK_INTERVAL_S` each node looks at the credentials its open WebSockets and
SSE streams were opened with: one whose expiry has passed, or that the store now says is
revoked (or no longer knows), ends every such connection on this node — WebSockets close
4401, SSE streams end. The store is the only channel between nodes, so this works the same
for a token revoked over HTTP on another node and for ``rawp keys revoke`` run against
Redis, with no message between nodes; each distinct credential costs one store read per
interval, however many connections share it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final, Protocol

import structlog

from protocol.errors import CloseCode, StoreError

if TYPE_CHECKING:
    from .auth import Principal
    from .fanout import Sink
    from .hub import Hub

__all__ = ["CHECK_INTERVAL_S", "CLOSE_INVALID_CREDENTIAL", "CredentialWatch", "Endable"]

log = structlog.get_logger("rawp.revocation")

CHECK_INTERVAL_S: Final = 0.5
CLOSE_INVALID_CREDENTIAL: Final = CloseCode.BAD_CREDENTIAL
_CONCURRENT_READS: Final = 64  # store reads in flight at once per round


class Endable(Protocol):
    """A long-lived HTTP answer (an SSE stream) opened with a credential."""

    principal: Principal

    def end(self) -> None:
        """Finish the answer (the stream writes its end and returns)."""


class CredentialWatch:
    """The per-node loop that ends connections whose credential is no longer valid."""

    def __init__(self, hub: Hub, streams: Callable[[], Iterable[Endable]]) -> None:
        self._hub = hub
        self._streams = streams
        self._task: asyncio.Task[None] | None = None
        self._reported: set[str] = set()  # invalid credentials already logged

    def start(self) -> None:
        """Start checking (once per node)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop checking."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(CHECK_INTERVAL_S)
            try:
                await self.check_once()
            except Exception:  # never let one bad round stop the watch
                log.exception("credential_check_failed")

    async def check_once(self) -> int:
        """One round: end what rests on an invalid credential; returns how many ended.

        The WebSockets' credentials are the hub's :class:`~relay.auth.HeldCredentials` (one
        entry per credential, however many connections hold it: a round costs the credentials
        in use); connections are looked up only for a credential found invalid, which is rare.
        """
        principals = self._hub.held_credentials.principals()
        streams = list(self._streams())
        for stream in streams:
            principal = stream.principal
            if principal.credential_id:
                principals.setdefault(principal.credential_id, principal)
        checked = list(principals.items())
        valid: list[bool] = []
        for start in range(0, len(checked), _CONCURRENT_READS):
            chunk = checked[start : start + _CONCURRENT_READS]
            valid += await asyncio.gather(*(self._still_valid(p) for _, p in chunk))
        invalid = {cid for (cid, _), ok in zip(checked, valid, strict=True) if not ok}
        self._reported &= invalid  # what no longer rests on anything is forgotten
        if not invalid:
            return 0
        holders: dict[str, list[Callable[[], None]]] = defaultdict(list)
        for session in list(self._hub.sessions.values()):
            for participant in list(session.participants.values()):
                credential_id = participant.principal.credential_id
                if credential_id in invalid:
                    holders[credential_id].append(self._closer(participant.sink))
        for stream in streams:
            if stream.principal.credential_id in invalid:
                holders[stream.principal.credential_id].append(stream.end)
        ended = 0
        for credential_id, ending in holders.items():
            if credential_id not in self._reported:
                # Once per credential: a stream still ending is asked again every round (and
                # cut then), which is no news for the log.
                self._reported.add(credential_id)
                log.info("credential_invalid", token_id=credential_id[:12], ending=len(ending))
            for end in ending:
                end()
                ended += 1
        return ended

    def _closer(self, sink: Sink) -> Callable[[], None]:
        def close() -> None:
            self._hub.spawn(sink.close(CLOSE_INVALID_CREDENTIAL, "credential no longer valid"))

        return close

    async def _still_valid(self, principal: Principal) -> bool:
        if principal.expired:
            return False
        try:
            return await self._hub.auth.still_valid(principal)
        except (StoreError, OSError):
            return True  # cannot tell now (store outage); the next round asks again
