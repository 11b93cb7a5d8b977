"""Crash recovery: finalize what a dead node left behind, exactly once (§7.8.2, seed 004).

A node that dies (``kill -9``, a lost host, or a clean shutdown that leaves its sessions to
the others) leaves participant records that say "attached on node N" with no connection
behind them, and possibly a client turn that will never end. Whichever node claims the dead
node first (relay/cluster/), a node attaching to one of its sessions before that, or the
node itself when it starts again, runs :func:`recover_locked` for each session N held:

1. N's participants are marked detached, their reattach-window deadlines armed (in the store,
   so any node expires them) and ``session.presence detached`` is logged and broadcast — also
   for one that detached on N while the log still shows it attached (N's store refused that
   presence, or N was lost before it could log it), its deadline armed again;
2. when the session's client was on N, the §7.8.1 synthetic frames are appended
   (:func:`protocol.finalize.finalize`): every node's edges see them, and a later replay of
   the log shows them. The client's ``welcome.received`` is recomputed from the log, since N
   could not persist it.

Exactly once: recovery runs under the session's cross-node mutex after catching up with the
log, like every other finalization (the client's detach on its own node, an attach that finds
the dead node first). A sweep first fences the dead node's lease epoch in the session, so a
node that was only paused cannot append after the finalization. A state that was already
finalized yields no frames, so a second
recovery — a retried sweep, a sweep racing a start-up — appends nothing. When the client comes
back (through any node) with its ``session.history``, the existing §7.8.3 path unfinalizes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from protocol.errors import StoreUnavailableError
from protocol.finalize import finalize
from protocol.frames import PresenceChange

from .session import (
    Decoded,
    Session,
    deadline_again,
    decode_log,
    logged_roster,
    presence_change,
)
from .store.base import PRESENCE, ParticipantRecord

if TYPE_CHECKING:
    from prometheus_client import Counter

__all__ = ["recover_locked", "repair_presence"]


async def recover_locked(
    session: Session,
    node_id: str,
    finalized: Counter | None = None,
    *,
    fenced_epoch: int | None = None,
) -> bool:
    """Recover ``session`` from ``node_id``'s loss; True when synthetic frames were logged.

    The caller holds the session lock and its cross-node mutex, caught up with the log (and,
    for a node declared dead, fenced its lease first: relay/cluster/liveness.py). With
    ``node_id`` this node's own id, participants attached here right now are kept: only
    records without a connection behind them are recovered (reconciliation after an outage).

    ``fenced_epoch``: the node's leases up to this epoch were fenced; only records it wrote
    under them are recovered. A sweep may reach the session late (it waited for the mutex, or
    for the store), when the node has already come back under a new lease and its client
    reattached there: that connection is alive, and finalizing it would put the synthetic
    frames in the middle of what the client sends through it.
    """
    if session.terminated:
        return False
    store = session.store
    own = node_id == session.coordinator.id
    keep = set(session.participants) if own else set()
    records = await store.list_participants(session.id)

    def lost(record: ParticipantRecord) -> bool:
        """Written by ``node_id`` under a lease that is gone, and not kept."""
        return (
            record.node_id == node_id
            and record.participant_id not in keep
            and (fenced_epoch is None or record.epoch <= fenced_epoch)
        )

    now_ms = int(time.time() * 1000)
    lost_client = False
    changes = []
    if any(not record.attached and lost(record) for record in records):
        # a detach whose presence the node could not log before it was lost (or refused);
        # only the log's presence frames are decoded: nothing else says who is attached
        presence = [e for e in await store.read(session.id) if e.type == PRESENCE]
        logged = logged_roster(decode_log(presence))
        changes += await _unlogged_detaches(session, records, logged, now_ms, lost)
    for record in records:
        if not record.attached or not lost(record):
            continue
        record.attached = False
        record.detached_at_ms = now_ms
        if record.role == "client":
            lost_client = True
            record.last_received_message_id = await store.last_received(
                session.id, record.participant_id
            )
        await store.put_participant(session.id, record)
        await store.set_deadline(session.deps.deadline_for(session.id, record.participant_id))
        changes.append(presence_change(record, "detached"))
    # one coalesced frame for all of them (docs/protocol.md §5 item 11)
    if not await session.log_presence(changes):
        raise StoreUnavailableError("recovery could not log the presence")
    # A client that detached when ``node_id`` shut down cleanly (1001) was not finalized
    # then; its session is finalized now (§7.8.2 "app restart"). Already final: no frames.
    client = next((r for r in records if r.role == "client"), None)
    shut_down = client is not None and not client.attached and lost(client)
    if not (lost_client or shut_down):
        return False
    synthetic = finalize(session.state, session_id=session.id, sender=session.master_sender)
    if not synthetic:
        return False
    if not await session.append_master(synthetic):
        raise StoreUnavailableError("recovery could not log the finalization")
    if finalized is not None:
        finalized.inc()
    return True


async def repair_presence(session: Session, log: Sequence[Decoded]) -> None:
    """[multinode] Bring the log's presence of this node's own participants to the truth,
    once the session is refolded after a store write failed here (caller holds the lock);
    ``log``: the one the refold read (:meth:`Session.rebuild`), not read again.

    Several nodes keep a session whose store write failed (relay/cluster/following.py), so no
    load repairs it as on one node (relay/restart.py): a presence the store refused would stay
    missing, each participant and a late joiner's backlog wrong about who is attached (notes
    §5). Here, in one coalesced ``session.presence``: ``attached`` for a participant attached
    to this node that the log does not show attached, ``detached`` for one of this node's
    records the log still shows attached though it detached, whose reattach deadline is armed
    again too (due when it first was: its write may have failed with the presence). A
    record that says "attached here" with no connection is the reconciliation's
    (:func:`recover_locked`). Nothing to repair: nothing is logged. Raises
    :class:`StoreUnavailableError` while the store still refuses.
    """
    store = session.store
    node_id = session.coordinator.id
    logged = logged_roster(log)
    changes = []
    for participant_id, participant in session.participants.items():
        seen = logged.get(participant_id)
        if seen is None or seen.state != "attached":
            changes.append(presence_change(participant.record, "attached"))

    def ours(record: ParticipantRecord) -> bool:
        return record.node_id == node_id and record.participant_id not in session.participants

    records = await store.list_participants(session.id)
    now_ms = int(time.time() * 1000)
    changes += await _unlogged_detaches(session, records, logged, now_ms, ours)
    if not await session.log_presence(changes):
        raise StoreUnavailableError("the store refused the repaired presence")


async def _unlogged_detaches(
    session: Session,
    records: Sequence[ParticipantRecord],
    logged: dict[str, PresenceChange],
    now_ms: int,
    selected: Callable[[ParticipantRecord], bool],
) -> list[PresenceChange]:
    """``detached`` for each ``selected`` record that detached while the log still shows it
    attached (its presence refused, or its node lost before logging it); its reattach
    deadline is armed again, due when it first was (its write may have failed too)."""
    changes = []
    for record in records:
        if record.attached or not selected(record):
            continue
        seen = logged.get(record.participant_id)
        if seen is not None and seen.state == "attached":
            armed = session.deps.deadline_for(session.id, record.participant_id)
            await session.store.set_deadline(deadline_again(armed, record, now_ms))
            changes.append(presence_change(record, "detached"))
    return changes
