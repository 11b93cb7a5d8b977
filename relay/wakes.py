"""Wakes (notes §17.5, §17.12): every node sweeps the store for due wake records and acts on
each one it claims — logs the revisit's ``session.wake``, or posts its webhook.

A record is claimed under a lease (:meth:`~relay.store.base.Store.claim_due_wakes`); every
change after names the claim, so a node whose lease ran out changes nothing. Logging goes
through the session like every master-made frame: the session is loaded on this node if it is
not, its lock and cross-node mutex are held (as the reattach-window expiry does), the state
says whether the revisit is still pending under that request, and the wake's message id is
derived from the request, so a second claim of a wake already logged (a node killed between
the append and the settle) finds it in the log and logs nothing. Whether the client was
attached is judged in the same critical section, and the record settled there too: an attach
(which runs under the same lock) either sees the wake in the log or the record ``due``.

The webhook outbox: a wake logged while the client was away is posted (when
``--wake-webhook`` is set) by whichever node claims its record next; each attempt is one
claim, so two nodes never post the same attempt. A restarted sole owner (SQLite) takes its
claims back at start (:meth:`~relay.store.base.Store.release_wake_claims`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

import msgspec
import structlog

from protocol import codec, revisits
from protocol.errors import FormatVersionError, StoreError, StoreUnavailableError
from protocol.frames import Wake, WakePayload

from .store.base import Store, WakeRecord
from .wake_webhook import Outcome, WakeNotice, WakeWebhook

if TYPE_CHECKING:
    from .session import Session

__all__ = [
    "MAX_WEBHOOK_ATTEMPTS",
    "SWEEP_INTERVAL_S",
    "SessionOpener",
    "Wakes",
    "wake_lease_ms",
]

log = structlog.get_logger("rawp.wakes")

SWEEP_INTERVAL_S: Final = 0.2
"""How often a node looks for due wakes: a wake is logged within this of its time."""
MAX_WEBHOOK_ATTEMPTS: Final = 40
"""Attempts of one wake's webhook before it is marked ``failed``: with the sender's backoff
(random, up to 1 s doubled per attempt, capped at 300 s) about 80 minutes on average; a
scheduler that was away longer still finds the wake in ``GET /v1/wakes?due=true``."""
# Wakes acted on at once at most (a burst of due wakes claims more as these finish, so a
# claimed record always has its logging running and its lease is not spent waiting), and
# records claimed per store round trip.
_ACTING_AT_ONCE: Final = 64
_CLAIM: Final = 64
_RETRY_MS: Final = 1000  # a wake the session could not take now (store down): again in 1 s


def wake_lease_ms(node_dead_after_s: float, webhook_timeout_s: float = 0.0) -> int:
    """How long a claim holds: long enough for one logging or one POST (its timeout), and as
    short as a dead node's other leases, so a node killed mid-claim delays the wake little."""
    return int((max(2.0, 2 * node_dead_after_s) + webhook_timeout_s) * 1000)


class SessionOpener(Protocol):
    """What the sweep needs of the hub."""

    store: Store

    async def open(self, session_id: str) -> Session | None: ...

    def spawn(self, coro: Any) -> asyncio.Task[Any]: ...


class Wakes:
    """The node's wake sweep and webhook outbox."""

    def __init__(
        self,
        hub: SessionOpener,
        *,
        lease_ms: int,
        webhook: WakeWebhook | None = None,
    ) -> None:
        self.hub = hub
        self.store = hub.store
        self.lease_ms = lease_ms
        self.webhook = webhook
        self._active: set[tuple[str, str]] = set()
        self._acting: set[asyncio.Task[Any]] = set()
        # Loaded sessions with a pending revisit whose record the store refused: repaired
        # (every _RETRY_MS, by the sweep) until the store takes it.
        self._unscheduled: dict[str, Session] = {}
        self._repair_at = 0.0
        self._repairing = False

    def unscheduled(self, session: Session) -> None:
        """A revisit of ``session`` was logged but its record refused: put it later."""
        self._unscheduled[session.id] = session

    async def run(self) -> None:
        """Sweep forever (cancelled at shutdown)."""
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            if self._unscheduled and not self._repairing and time.monotonic() >= self._repair_at:
                self._repairing = True
                self.hub.spawn(self._reschedule())
            await self._sweep()

    async def _sweep(self) -> None:
        """Act on every wake due now: claimed a batch at a time while batches come back full,
        at most :data:`_ACTING_AT_ONCE` at work at once (more are claimed as they finish).
        Wakes due together (10,000 in the same second) are logged in one sweep at the pace
        the store takes, not one batch per tick, and none waits out its lease unstarted."""
        now_ms = _now_ms()
        while True:
            room = _ACTING_AT_ONCE - len(self._acting)
            if room <= 0:
                await asyncio.wait(self._acting, return_when=asyncio.FIRST_COMPLETED)
                continue
            limit = min(room, _CLAIM)
            try:
                claimed = await self.store.claim_due_wakes(now_ms, self.lease_ms, limit)
            except StoreError:
                return  # the store is down: the next sweep tries again
            for record in claimed:
                key = (record.session_id, record.wake_id)
                if key in self._active:
                    continue  # still at work on it (a lease shorter than a slow POST)
                self._active.add(key)
                task = self.hub.spawn(self._act(record, key))
                self._acting.add(task)
                task.add_done_callback(self._acting.discard)
            if len(claimed) < limit:
                return

    async def _act(self, record: WakeRecord, key: tuple[str, str]) -> None:
        claim = record.claim or ""
        try:
            if record.state == "pending":
                await self._wake(record, claim)
            elif record.webhook == "pending" and self.webhook is not None:
                await self._post(record, claim)
            else:
                # Nothing this node can do (no webhook configured here): released, and due
                # again after a lease, for a node that has one.
                await self.store.settle_wake(
                    msgspec.structs.replace(record, due_ms=_now_ms() + self.lease_ms), claim
                )
        except (StoreUnavailableError, FormatVersionError):
            pass  # its lease runs out and a node (this one, or one of the newer build) retries
        except Exception:
            log.exception("wake_failed", session_id=record.session_id, wake_id=record.wake_id)
        finally:
            self._active.discard(key)

    async def _wake(self, record: WakeRecord, claim: str) -> None:
        """Log the wake into its session (once), then settle the record."""
        store = self.store
        gone = msgspec.structs.replace(record, state="done", webhook=None)
        session = await self.hub.open(record.session_id)
        if session is None or session.header.archived:
            await store.settle_wake(gone, claim)  # an ended session is never woken
            return
        async with session.lock, session.coordinator.guard(session):
            if session.terminated:
                await store.settle_wake(gone, claim)
                return
            pending = session.state.pending_revisits.get(record.revisit_id)
            if pending is not None and pending.request_id == record.request_id:
                frame = Wake(
                    message_id=record.wake_id,
                    session_id=session.id,
                    timestamp=codec.now(),
                    payload=WakePayload(
                        revisit_id=record.revisit_id, at=pending.at, reason=pending.reason
                    ),
                )
                if not await session.append_master([frame]):
                    retry = msgspec.structs.replace(record, due_ms=_now_ms() + _RETRY_MS)
                    await store.settle_wake(retry, claim)
                    return
            seq = await store.message_seq(session.id, record.wake_id)
            if seq is None:
                # Withdrawn or rescheduled before it came due (the store's record outlived
                # the cancel's effect): nothing to wake.
                await store.settle_wake(gone, claim)
                return
            away = not await _client_attached(session)
            post = away and self.webhook is not None
            settled = msgspec.structs.replace(
                record,
                state="due" if away else "done",
                wake_seq=seq,
                webhook="pending" if post else None,
                due_ms=_now_ms() if post else None,
            )
            await store.settle_wake(settled, claim)
        log.info(
            "wake_logged",
            session_id=record.session_id,
            revisit_id=record.revisit_id,
            seq=seq,
            client_attached=not away,
        )

    async def _post(self, record: WakeRecord, claim: str) -> None:
        """One attempt of the wake's webhook, then its outcome settled."""
        assert self.webhook is not None
        notice = WakeNotice(
            session_id=record.session_id,
            revisit_id=record.revisit_id,
            at=record.at,
            reason=record.reason,
            wake_seq=record.wake_seq,
        )
        try:
            outcome, why = await self.webhook.post(notice)
        except Exception as exc:  # a sender bug must not lose the outbox entry
            outcome, why = Outcome.RETRY, f"sender failed: {type(exc).__name__}"
        attempts = record.attempts + 1
        state: Literal["pending", "sent", "failed"]
        if outcome is Outcome.DELIVERED:
            state, due_ms = "sent", None
        elif outcome is Outcome.GIVE_UP or attempts >= MAX_WEBHOOK_ATTEMPTS:
            state, due_ms = "failed", None
        else:
            delay = self.webhook.retry_delay(attempts)
            state, due_ms = "pending", _now_ms() + int(delay * 1000)
        settled = msgspec.structs.replace(
            record, webhook=state, attempts=attempts, due_ms=due_ms, last_error=why or None
        )
        await self.store.settle_wake(settled, claim)
        log.info(
            "wake_webhook",
            session_id=record.session_id,
            revisit_id=record.revisit_id,
            outcome=outcome.name,
            attempts=attempts,
            why=why,
        )

    async def _reschedule(self) -> None:
        """Repair every session told of by :meth:`unscheduled`; those the store still refuses
        stay for the next try."""
        try:
            for session_id in list(self._unscheduled):
                # Taken out first: a refusal while this repair runs puts it back.
                session = self._unscheduled.pop(session_id)
                if not session.terminated and not await self.repair(session):
                    self._unscheduled.setdefault(session_id, session)
        finally:
            self._repair_at = time.monotonic() + _RETRY_MS / 1000
            self._repairing = False

    async def repair(self, session: Session) -> bool:
        """Put the records a loaded session's pending revisits lack: the request is in the log
        but its record was not written (the store refused it, or the node died between the
        two). The log is the truth; the record only schedules it. False when the store
        refused (logged; :meth:`unscheduled` retries)."""
        store = self.store
        try:
            for revisit_id, pending in list(session.state.pending_revisits.items()):
                wake_id = revisits.wake_message_id(revisit_id, pending.request_id)
                if await store.get_wake(session.id, wake_id) is not None:
                    continue
                if await store.message_seq(session.id, wake_id) is not None:
                    continue  # woken already (the state is refolded on its way)
                await store.put_wake(
                    WakeRecord.pending(
                        session.id,
                        session.header.workspace,
                        revisit_id,
                        pending.request_id,
                        pending.at,
                        pending.reason,
                    )
                )
                log.warning("wake_record_repaired", session_id=session.id, revisit_id=revisit_id)
        except StoreError as exc:
            log.warning("wake_repair_failed", session_id=session.id, error=str(exc))
            return False
        return True

    async def aclose(self) -> None:
        """Release the webhook sender's connections."""
        if self.webhook is not None:
            with contextlib.suppress(Exception):
                await self.webhook.aclose()


async def _client_attached(session: Session) -> bool:
    """Is the session's client attached, on this node or another (caller holds the lock)?"""
    if session.attached_client() is not None:
        return True
    client_id = session.client_id
    if client_id is None:
        return False
    return await session.coordinator.attached_elsewhere(session, client_id)


def _now_ms() -> int:
    return int(time.time() * 1000)
