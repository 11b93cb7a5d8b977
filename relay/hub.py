"""The sessions of this node: load on demand, attach, delete, expire.

The hub owns the store, the authenticator and the metrics; a :class:`Session` is loaded
(its state folded from the log) the first time a connection or a request needs it, and
forgotten when it is deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Literal

import structlog

from protocol import acts, codec, names
from protocol.endings import ending_notice
from protocol.errors import (
    CloseCode,
    Forbidden,
    FormatVersionError,
    NoSuchSession,
    NotAllowed,
    SessionGone,
    StoreError,
    StoreUnavailableError,
)
from protocol.frames import Hello, Sender
from protocol.state import Phase

from .archive import finish_ending, purge_archives
from .auth import Authenticator, HeldCredentials, Principal
from .cluster import cancel_and_wait, node_for
from .config import Settings
from .coordination import Node, SoleNode
from .fanout import Sink
from .metrics import Metrics
from .restart import recover_after_restart, recover_loaded
from .session import (
    Decoded,
    Participant,
    Session,
    SessionDeps,
    backlog_read_after,
    decode_log,
    state_of,
)
from .store.base import Deadline, SessionHeader, Store
from .wake_webhook import WakeWebhook
from .wakes import Wakes, wake_lease_ms

__all__ = ["Hub", "SessionAttached", "new_session_header"]

log = structlog.get_logger("rawp.hub")

_PURGE_INTERVAL_S = 60.0  # how often archives past their retention are looked for
_ARCHIVED_CACHED = 256  # archived sessions kept folded (the dashboard lists them often)
# Expiries run at once at most (a sweep of windows that end together claims more as these
# finish, not one batch per tick), and deadlines claimed per store round trip.
_EXPIRING_AT_ONCE = 32
_CLAIM_BATCH = 32


def new_session_header(
    session_id: str,
    workspace: str,
    *,
    name: str = "",
    agent_id: str | None = None,
    parent_session_id: str | None = None,
    seed_length: int = 0,
    vault_ids: Sequence[str] = (),
) -> SessionHeader:
    """A header for a session about to be created (fresh epoch, creation time now)."""
    return SessionHeader(
        vault_ids=list(vault_ids),
        session_id=session_id,
        workspace=workspace,
        name=name,
        agent_id=agent_id,
        created_at=codec.format_time(codec.now()),
        epoch=secrets.token_hex(8),
        parent_session_id=parent_session_id,
        seed_length=seed_length,
    )


class SessionAttached(Exception):
    """A delete ``if_idle`` found participants attached (HTTP 409)."""


class _NoLock:
    """Stand-in for the session lock in the seed 001 experiment (never in production)."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


class Hub:
    """Registry and entry points for the sessions served by this node."""

    def __init__(self, settings: Settings, store: Store, *, session_lock: bool = True) -> None:
        self.settings = settings
        self.store = store
        self.auth = Authenticator(store)
        self.development_key: str | None = None
        """The store's development key when no key was given (printed at each start)."""
        self.held_credentials = HeldCredentials()  # what the credential watch checks
        self.metrics = Metrics()
        self.master_sender = Sender(role="master", participant_id=settings.node_id)
        self.shutting_down = False
        self._session_lock = session_lock
        self._sessions: dict[str, Session] = {}
        self._archived: OrderedDict[str, Session] = OrderedDict()  # read-only, LRU
        self._loading: dict[str, asyncio.Future[Session | None]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._deadline_task: asyncio.Task[None] | None = None
        self._expiring: set[asyncio.Task[None]] = set()
        webhook = None
        if settings.wake_webhook and settings.wake_webhook_secret:
            webhook = WakeWebhook(settings.wake_webhook, settings.wake_webhook_secret.encode())
        # notes §17.5: the lease outlasts one logging, or one POST within its timeout
        lease_ms = wake_lease_ms(settings.node_dead_after_s, 0.0 if webhook is None else 10.0)
        self.wakes = Wakes(self, lease_ms=lease_ms, webhook=webhook)
        # [multinode] a no-op on one node
        self.cluster: Node[Session, Participant] = node_for(self, store)
        # What every session of this node is handed when it is made.
        self.session_deps = SessionDeps(
            settings=settings,
            store=store,
            metrics=self.metrics,
            master_sender=self.master_sender,
            coordinator=self.cluster,
            new_lock=self.new_session_lock,
            forget=self.forget,
            wake_unscheduled=self.wakes.unscheduled,
        )

    # --- plumbing ------------------------------------------------------------------------

    def new_session_lock(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """The per-session lock (seed 001); a no-op only for the lock-disabled experiment."""
        return asyncio.Lock() if self._session_lock else _NoLock()

    def deadline_for(self, session_id: str, participant_id: str) -> Deadline:
        """The reattach-window deadline of a participant that detaches now."""
        return self.session_deps.deadline_for(session_id, participant_id)

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        """Run a background task owned by the hub (cancelled at shutdown)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def forget(self, session: Session) -> None:
        """Drop a session from this node's registry (deleted, or to be reloaded)."""
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]
            self.metrics.sessions.set(len(self._sessions))
            self.cluster.unfollow(session)

    async def _recover_on_load(
        self, session: Session, decoded: Sequence[Decoded] | None = None
    ) -> None:
        """:func:`recover_loaded`; when the store refuses its writes (a full disk), the
        session stays readable and is marked: the next attach tries again first."""
        try:
            if decoded is None:
                decoded = decode_log(await self.store.read(session.id))
            await recover_loaded(self, session, decoded)
        except StoreError as exc:
            session.needs_recovery = True
            log.warning("recovery_on_load_failed", session_id=session.id, error=str(exc))
        else:
            session.needs_recovery = False

    async def settle_fork(self, fork: Session) -> None:
        """A fork just made: nobody of its source is in it, though its copied presence names
        them, and its prefix may end inside a turn. On one node its load recovered it already
        (:func:`recover_loaded`: the copied participants expired, the turn finalized); on
        several, it is recovered here, once, and a store refusal leaves it as copied."""
        if isinstance(self.cluster, SoleNode):
            return
        try:
            await recover_loaded(self, fork, decode_log(await self.store.read(fork.id)))
        except StoreError as exc:
            log.warning("fork_not_settled", session_id=fork.id, error=str(exc))

    def unload_stale(self, session: Session) -> None:
        """A store write of ``session`` failed on this sole node: what it holds in memory may
        not be what the store holds (a presence or a detach not recorded, a state folded
        ahead of the log). It accepts nothing more, its connections are closed 1013 and it is
        forgotten: they reattach, resuming, to the session loaded afresh from the store, which
        recovers what they left (docs/protocol.md §12). Without this, those connections went
        on with the old object while newcomers got a new one: two fan-outs of one log."""
        if self._sessions.get(session.id) is not session or session.terminated or session.ending:
            return
        log.warning(
            "session_reloaded_after_store_failure",
            session_id=session.id,
            connections=len(session.participants),
        )
        for participant in list(session.participants.values()):
            participant.fence()
            participant.close_soon(CloseCode.TRY_AGAIN_LATER, "the store failed: reattach")
        session.participants.clear()
        session.unloaded = True
        session.end_here()
        session.ended.set()  # an attach that waited for its lock resolves the id again
        self.forget(session)

    def forget_archived(self, session_id: str) -> None:
        """Drop a purged archive from the cache."""
        self._archived.pop(session_id, None)

    @property
    def sessions(self) -> dict[str, Session]:
        """Sessions loaded on this node."""
        return self._sessions

    async def start(self) -> None:
        """Start the store and the deadline loop."""
        given = []
        for key in self.settings.api_keys:
            workspace, _, secret = key.rpartition(":")
            given.append((workspace or "default", secret))
        self.auth.give_keys(given)  # never stored: they live while they are given (§17.12)
        await self.store.start()
        if not given:
            self.development_key = await self.auth.development_key()
        earlier = [k for k in await self.store.list_keys() if k.scopes is None and not k.revoked]
        if earlier:
            # Written by a build before scopes (its --api-key and development keys among
            # them): still valid with every scope until revoked, so say which they are.
            log.warning(
                "keys_from_an_earlier_build",
                count=len(earlier),
                key_ids=[k.digest[:16] for k in earlier[:20]],
                fix="rawp keys list; rawp keys revoke KEY_ID for those no longer wanted",
            )
        await self.cluster.start()
        await recover_after_restart(self)  # a sole owner's restart (SQLite; notes §16.2)
        if isinstance(self.cluster, SoleNode):
            await self.store.release_wake_claims()  # its own, from before it stopped
        self._deadline_task = asyncio.get_running_loop().create_task(self._deadlines())
        self.spawn(self.wakes.run())  # notes §17.5
        self.spawn(purge_archives(self, _PURGE_INTERVAL_S))  # notes §16.1

    async def stop(self) -> None:
        """Stop background work (sessions are closed by the server first)."""
        self.shutting_down = True
        workers = [s.worker for s in self._sessions.values() if s.worker is not None]
        tasks = [t for t in (self._deadline_task, *self._tasks, *workers) if t is not None]
        await cancel_and_wait(tasks)  # [multinode] redis-py can swallow one cancel (3.11)
        await self.wakes.aclose()
        await self.cluster.stop()

    # --- sessions ------------------------------------------------------------------------

    async def open(self, session_id: str) -> Session | None:
        """The loaded session, loading it from the store if needed; None if absent."""
        session = self._sessions.get(session_id)
        if session is not None:
            return session
        archived = self._archived.get(session_id)
        if archived is not None:
            # Still that archive? (Another node may have purged it and the id been reused.)
            current = await self.store.get_session(session_id)
            if current is not None and current.archived and current.epoch == archived.header.epoch:
                return archived
            self.forget_archived(session_id)
        pending = self._loading.get(session_id)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[Session | None] = asyncio.get_running_loop().create_future()
        self._loading[session_id] = future
        try:
            header = await self.store.get_session(session_id)
            if header is None:
                future.set_result(None)
                return None
            entries = await self.store.read(session_id)
            head = await self.store.head_seq(session_id)
            decoded = decode_log(entries)  # once: the state and the recovery below read it
            state = state_of(decoded, header.name)
            if state.phase is Phase.TERMINATED and not header.archived:
                # An ending that logged its session.deleted but could not archive or remove
                # the session (store outage): finish it instead of attaching to it.
                header = await finish_ending(self.store, header, entries)
                if header is None:
                    future.set_result(None)
                    return None
            session = Session(self.session_deps, header, state, head)
            if header.archived:
                # Read-only (notes §16.1): not registered, no participants, attach 4410;
                # kept in a small cache, since an archive never changes (only purges).
                session.terminated = True
                session.ended.set()
                self._archived[session_id] = session
                if len(self._archived) > _ARCHIVED_CACHED:
                    self._archived.popitem(last=False)
                future.set_result(session)
                return session
            for record in await self.store.list_participants(session_id):
                if record.role == "client":
                    session.client_id = record.participant_id
            await self.cluster.follow(session)  # [multinode] subscribe before it is visible
            if isinstance(self.cluster, SoleNode):
                # Nothing is attached to a session this node has not loaded: what its records
                # still call attached was left by connections that are gone (a restart, or
                # the unload after a store failure), recovered before anyone can attach.
                await self._recover_on_load(session, decoded)
            self._sessions[session_id] = session
            self.metrics.sessions.set(len(self._sessions))
            if state.pending_revisits:
                self.wakes.unscheduled(session)  # records a crash may have lost
            future.set_result(session)
            return session
        except BaseException as exc:
            if not future.done():
                future.set_exception(exc)
                future.exception()  # mark retrieved: the caller re-raises it
            raise
        finally:
            del self._loading[session_id]

    async def create(
        self, header: SessionHeader, principal: Principal
    ) -> tuple[SessionHeader, bool]:
        """Create a session (idempotent on session_id)."""
        if not principal.may_create():
            raise Forbidden(_refusal("create_session", "edge", principal))
        names.check_session_id(header.session_id)  # every store, every way in (§16.7)
        stored, created = await self.store.create_session(header)
        if not created:
            principal.require_session(stored)
        return stored, created

    async def attach(
        self, sink: Sink, hello: Hello, principal: Principal
    ) -> tuple[Session, Participant]:
        """Attach a connection whose hello was authenticated (notes §5)."""
        session_id = hello.session_id
        role = hello.payload.role
        if principal.kind == "token" and principal.session_id != session_id:
            # [trust] for a session token every other session is absent (issue 12: no oracle)
            raise _absent(session_id)
        if not principal.may_attach(role):
            raise Forbidden(_refusal("attach", role, principal))
        while True:
            header = await self.store.get_session(session_id)
            if header is None:
                create = hello.payload.create
                if create is None or role != "client":
                    if await self.store.is_deleted(session_id):
                        raise SessionGone(f"session {session_id} was deleted")
                    raise _absent(session_id)
                fresh = new_session_header(
                    session_id,
                    principal.workspace,
                    name=create.name or "",
                    agent_id=create.agent_id,
                    parent_session_id=create.parent_session_id,
                )
                header, _ = await self.create(fresh, principal)
            if not principal.can_see(header):
                if hello.payload.create is not None and role == "client":
                    # Session ids are one namespace: creating one that is taken says so.
                    raise Forbidden(f"session id {session_id} is taken")
                # [trust] another workspace's session looks exactly like an absent one
                raise _absent(session_id)
            if header.archived:
                raise SessionGone(self._ended(header))
            session = await self.open(session_id)
            if session is None:
                continue
            if session.needs_recovery:
                await self._recover_on_load(session)
                if session.needs_recovery:
                    raise StoreUnavailableError(f"session {session_id} is not recovered yet")
            resume = hello.payload.resume
            joining = self.cluster.attaching(
                session,
                role,
                hello.payload.participant_id,
                None if resume is None else backlog_read_after(resume.last_seq),
            )
            async with session.lock, joining as known:  # [multinode] cross-node rules
                attached = None
                if not session.terminated:
                    attached = await session.attach(sink, hello, principal, known)
            if attached is None:
                # Deleted while we waited: resolve the id again once the deletion is over
                # (without waiting, a session still being closed would be looked up again
                # and again without ever yielding to the deletion).
                await session.ended.wait()
                continue
            self.metrics.connected(role)
            return session, attached

    async def delete(
        self, session_id: str, *, reason: str, deleted_by: str, if_idle: bool = False
    ) -> bool:
        """Terminate and delete a session (notes §9). False when it does not exist.

        ``if_idle``: raise :class:`SessionAttached` instead while anyone is attached. The
        check runs under the session lock with the delete (seed 001), so no attach can slip
        in between them.
        """
        session = await self.open(session_id)
        if session is None:
            return False
        if session.header.archived:
            # Deleting an archived session purges it (notes §16.1); nobody is attached.
            self.forget_archived(session_id)
            return await self.store.delete_session(session_id)
        async with session.lock, self.cluster.guard(session):
            if session.unloaded:
                raise StoreUnavailableError(f"the store failed under {session_id}; send again")
            if session.terminated:
                return False
            if if_idle and session.participants:
                raise SessionAttached(f"session {session_id} has attached participants")
            await session.terminate_locked(reason, deleted_by)
        if not session.end_stored:
            # Ended here, but neither its session.deleted nor the store change is durable
            # (an outage, or a lease fenced mid-delete): the caller must not hear "deleted".
            raise StoreUnavailableError(f"the deletion of {session_id} was not stored; send again")
        return True

    def _ended(self, header: SessionHeader) -> str:
        """The 4410 reason for an ended session: why, and that it can be continued (notes
        §17.2); short enough for a close frame's 123 bytes, so it names no id."""
        window_ms = self.settings.reattach_window_ms
        _, text = ending_notice(
            header.reason or "", header.deleted_by or "system", None if window_ms < 0 else window_ms
        )
        return f"ended: {text}; continue it (POST /v1/sessions/<id>/continue)"

    # --- deadlines -----------------------------------------------------------------------

    async def _deadlines(self) -> None:
        interval = max(0.02, min(1.0, self.settings.reattach_window / 8))
        while True:
            await asyncio.sleep(interval)
            await self._sweep()

    async def _sweep(self) -> None:
        """Expire every deadline due now: claimed a batch at a time while batches come back
        full, at most :data:`_EXPIRING_AT_ONCE` expiring at once (more are claimed as they
        finish). Windows that end together (agents gone in one outage) end in one sweep at
        the pace the store takes, instead of one batch per tick; a claimed deadline always
        has its expiry running, so a node that dies holds no more of them than before."""
        now_ms = int(time.time() * 1000)
        while True:
            room = _EXPIRING_AT_ONCE - len(self._expiring)
            if room <= 0:
                await asyncio.wait(self._expiring, return_when=asyncio.FIRST_COMPLETED)
                continue
            limit = min(room, _CLAIM_BATCH)
            try:
                due = await self.store.claim_due_deadlines(now_ms, limit)
            except StoreUnavailableError:
                return
            for deadline in due:
                task = asyncio.get_running_loop().create_task(self._expire(deadline))
                self._tasks.add(task)
                self._expiring.add(task)
                task.add_done_callback(self._tasks.discard)
                task.add_done_callback(self._expiring.discard)
            if len(due) < limit:
                return

    async def _expire(self, deadline: Deadline) -> None:
        try:
            session = await self.open(deadline.session_id)
            if session is not None:
                await session.expire(deadline.participant_id)
                if session.unloaded:
                    # Unloaded while the expiry waited for it: the claimed deadline goes
                    # back, and the next tick expires the participant in the reloaded one.
                    await self.store.set_deadline(deadline)
        except (StoreUnavailableError, FormatVersionError):
            # Put it back so this or another node retries once the store is back, or a
            # node of the newer build that wrote the session expires it (a rolling upgrade).
            with contextlib.suppress(StoreUnavailableError):
                await self.store.set_deadline(deadline)
        except Exception:
            log.exception("expire_failed", session_id=deadline.session_id)


def _absent(session_id: str) -> NoSuchSession:
    """The one refusal for a session that is not there, or not this credential's to see."""
    return NoSuchSession(f"no session {session_id} (send create to make it)")


def _refusal(act: acts.Act, role: Literal["client", "edge"], principal: Principal) -> str:
    """What the act table says this credential lacks for ``act`` as ``role``."""
    try:
        acts.require(act, role, principal)
    except NotAllowed as exc:
        return exc.message
    return f"this credential may not {act.replace('_', ' ')} as {role}"
