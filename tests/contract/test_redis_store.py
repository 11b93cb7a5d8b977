"""What only the redis backend has: group commit, pub/sub, hash tags, outages, open_store.

The shared behaviour is in test_store_contract.py; these run against our own redis-server and
3-primary cluster (tests/conftest.py), never the machine's Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from protocol.errors import FormatVersionError, StoreUnavailableError
from relay.store import MemoryStore, open_store
from relay.store.base import AppendResult, Deadline, ParticipantRecord
from relay.store.redis import NodeFencedError, RedisStore
from relay.store.redis.framing import encode
from relay.store.redis.keys import DEADLINES, EARLIER_DEADLINES, SessionKeys
from tests.contract.conftest import Backend
from tests.contract.test_store_contract import entry, header, new_session
from tests.support.redis_server import (
    RedisCluster,
    RedisServer,
    free_port,
    redis_server_binary,
)

__all__: list[str] = []

_REDIS = pytest.param("redis", marks=pytest.mark.redis)
_CLUSTER = pytest.param("redis-cluster", marks=pytest.mark.redis)
redis_backends = pytest.mark.parametrize("backend", [_REDIS, _CLUSTER], indirect=True)
single_redis = pytest.mark.parametrize("backend", [_REDIS], indirect=True)


def redis_store(backend: Backend, **opts: Any) -> RedisStore:
    """A RedisStore of the backend (typed as such)."""
    store = backend.open(**opts)
    assert isinstance(store, RedisStore)
    return store


def raw_keys(backend: Backend) -> list[bytes]:
    """Every key on the backend's server(s)."""
    assert backend.server is not None
    nodes = backend.server.nodes if isinstance(backend.server, RedisCluster) else [backend.server]
    keys: list[bytes] = []
    for node in nodes:
        with contextlib.closing(node.client()) as c:
            keys += [k for k in c.keys("*") if isinstance(k, bytes)]
    return keys


@redis_backends
async def test_group_commit_batches_concurrent_appends(backend: Backend) -> None:
    """Appends made while a batch is in flight share the next script call."""
    store = redis_store(backend)
    s = await new_session(store)
    results = await asyncio.gather(*(store.append(s, [entry()]) for _ in range(200)))
    assert sorted(r[0].seq for r in results) == list(range(1, 201))
    assert store.batches <= 20  # one call per in-flight window, not one per append


@redis_backends
async def test_append_retry_of_the_same_batch_is_exactly_once(backend: Backend) -> None:
    """A script call retried after a lost reply (same writer and batch number) returns the
    first answer and appends nothing more."""
    store = redis_store(backend)
    s = await new_session(store)
    batch = [entry(), entry()]
    first = await store.appender.append_batch(s, batch, 0)
    store.appender.batch_no -= 1  # what redis-py's retry sends: the very same call
    again = await store.appender.append_batch(s, batch, 0)
    assert first == again == [AppendResult(seq=1), AppendResult(seq=2)]
    assert await store.head_seq(s) == 2


@redis_backends
async def test_a_late_copy_of_an_older_batch_is_never_applied(backend: Backend) -> None:
    """A batch that reaches Redis after a later batch of the same writer is refused unapplied
    (a timed-out connection's copy must not land after what the node sent since)."""
    store = redis_store(backend)
    s = await new_session(store)
    store.appender.batch_no = 10
    await store.appender.append_batch(s, [entry("later")], 0)  # batch 11
    store.appender.batch_no = 5
    with pytest.raises(StoreUnavailableError):
        await store.appender.append_batch(s, [entry("older")], 0)  # batch 6, arriving late
    assert [e.message_id for e in await store.read(s)] == ["later"]


@redis_backends
async def test_a_fenced_node_can_append_nothing_until_it_takes_a_new_lease(
    backend: Backend,
) -> None:
    """Once a sweeper fenced a dead node's lease epoch in a session, the node's appends under
    it are refused (and it is told); under its next lease they are accepted again."""
    node = redis_store(backend, node_id="node-fenced")
    sweeper = redis_store(backend, node_id="node-sweeper")
    s = await new_session(node)
    await node.node_heartbeat("node-fenced", new_epoch=True)  # registers: a first lease
    leased = node.lease_epoch
    await node.append(s, [entry("before")])
    epoch = await sweeper.claim_node("node-fenced", dead_after_ms=0, lease_ms=5000, token="t")
    assert epoch == leased
    assert await sweeper.fence_node(s, "node-fenced", epoch)
    told: list[int] = []
    node.on_fenced = lambda: told.append(node.lease_epoch)
    with pytest.raises(NodeFencedError):
        await node.append(s, [entry("after-sweep")])
    assert told == [leased]
    assert await node.node_heartbeat("node-fenced") is False  # it learns it was declared dead
    assert node.lease_epoch > leased
    await node.append(s, [entry("new-lease")])
    assert [e.message_id for e in await node.read(s)] == ["before", "new-lease"]


@redis_backends
async def test_a_fenced_node_can_rename_nothing(backend: Backend) -> None:
    """The rename script checks the same fence as the append: a fenced lease leaves the
    header's name as it was; the node's next lease renames again."""
    node = redis_store(backend, node_id="node-rn")
    sweeper = redis_store(backend, node_id="node-rn-sweeper")
    s = await new_session(node)
    await node.node_heartbeat("node-rn", new_epoch=True)
    await node.rename_session(s, "before")
    epoch = await sweeper.claim_node("node-rn", dead_after_ms=0, lease_ms=5000, token="t")
    assert epoch is not None
    assert await sweeper.fence_node(s, "node-rn", epoch)
    with pytest.raises(NodeFencedError):
        await node.rename_session(s, "after-sweep")
    header = await node.get_session(s)
    assert header is not None
    assert header.name == "before"
    assert await node.node_heartbeat("node-rn") is False
    await node.rename_session(s, "new-lease")
    header = await node.get_session(s)
    assert header is not None
    assert header.name == "new-lease"


@redis_backends
async def test_a_fenced_node_can_write_no_participant_record(backend: Backend) -> None:
    """The participant write checks the same fence as the append: under a fenced lease the
    record the recovering node owns stays as it was; the node's next lease writes again."""
    node = redis_store(backend, node_id="node-pr")
    sweeper = redis_store(backend, node_id="node-pr-sweeper")
    s = await new_session(node)
    await node.node_heartbeat("node-pr", new_epoch=True)
    await node.put_participant(s, ParticipantRecord(participant_id="p-1", role="edge", cursor=3))
    epoch = await sweeper.claim_node("node-pr", dead_after_ms=0, lease_ms=5000, token="t")
    assert epoch is not None
    assert await sweeper.fence_node(s, "node-pr", epoch)
    stale = ParticipantRecord(participant_id="p-1", role="edge", cursor=1, attached=True)
    with pytest.raises(NodeFencedError):
        await node.put_participant(s, stale)
    with pytest.raises(NodeFencedError):
        await node.put_attached(s, stale)
    kept = await node.get_participant(s, "p-1")
    assert kept is not None
    assert kept.cursor == 3
    assert await node.node_heartbeat("node-pr") is False  # a new lease
    await node.put_participant(s, stale)
    again = await node.get_participant(s, "p-1")
    assert again is not None
    assert again.cursor == 1


async def _fenced(backend: Backend, node_id: str) -> tuple[RedisStore, RedisStore, str, int]:
    """A node with one session holding participant p-1, whose lease a sweeper then claimed
    and fenced in it: (node, sweeper, session id, the fenced epoch)."""
    node = redis_store(backend, node_id=node_id)
    sweeper = redis_store(backend, node_id=f"{node_id}-sweeper")
    s = await new_session(node)
    await node.node_heartbeat(node_id, new_epoch=True)
    await node.put_participant(s, ParticipantRecord(participant_id="p-1", role="edge"))
    epoch = await sweeper.claim_node(node_id, dead_after_ms=0, lease_ms=5000, token="t")
    assert epoch is not None
    assert await sweeper.fence_node(s, node_id, epoch)
    return node, sweeper, s, epoch


@single_redis
async def test_deadlines_an_earlier_build_armed_are_claimed_and_ours_are_not_where_it_looks(
    backend: Backend,
) -> None:
    """This build arms deadlines where a build before layout 2 never claims them (it would
    drop one of a session it cannot read), and still claims and disarms the earlier ones."""
    assert backend.server is not None
    store = redis_store(backend)
    s = await new_session(store)
    with contextlib.closing(backend.server.client()) as raw:
        for pid, due in (("p-early", 50), ("p-early-gone", 60)):
            raw.zadd(EARLIER_DEADLINES, {encode((s, pid)): due})  # as an earlier build arms
        await store.set_deadline(Deadline(session_id=s, participant_id="p-ours", due_ms=70))
        assert raw.zcard(EARLIER_DEADLINES) == 2
        await store.clear_deadline(s, "p-early-gone")
        assert raw.zcard(EARLIER_DEADLINES) == 1
        claimed = await store.claim_due_deadlines(10_000)
        assert sorted(d.participant_id for d in claimed) == ["p-early", "p-ours"]
        assert raw.zcard(EARLIER_DEADLINES) == raw.zcard(DEADLINES) == 0


@single_redis
async def test_an_attach_disarms_a_deadline_an_earlier_build_armed(backend: Backend) -> None:
    """put_attached on one Redis (record and deadline in one script) disarms the deadline
    wherever it was armed, this build's set or an earlier build's; put_detached arms it in
    this build's set."""
    assert backend.server is not None
    store = redis_store(backend)
    s = await new_session(store)
    with contextlib.closing(backend.server.client()) as raw:
        raw.zadd(EARLIER_DEADLINES, {encode((s, "p-early")): 50})
        detached = ParticipantRecord(participant_id="p-new", role="edge", detached_at_ms=1)
        await store.put_detached(
            s, detached, Deadline(session_id=s, participant_id="p-new", due_ms=60)
        )
        assert raw.zscore(DEADLINES, encode((s, "p-new"))) == 60
        for pid in ("p-early", "p-new"):
            attached = ParticipantRecord(participant_id=pid, role="edge", attached=True)
            await store.put_attached(s, attached)
        assert raw.zcard(EARLIER_DEADLINES) == raw.zcard(DEADLINES) == 0
        assert not raw.smembers(SessionKeys.of(s).dl)
    assert await store.claim_due_deadlines(10_000) == []


@redis_backends
async def test_a_fenced_attach_leaves_the_reattach_deadline_armed(backend: Backend) -> None:
    """put_attached under a fenced lease changes nothing: the record stays as it was and the
    deadline the sweeper armed still fires (else the participant would never expire)."""
    node, sweeper, s, _ = await _fenced(backend, "node-pa")
    deadline = Deadline(session_id=s, participant_id="p-1", due_ms=100)
    await sweeper.set_deadline(deadline)
    attached = ParticipantRecord(participant_id="p-1", role="edge", attached=True)
    with pytest.raises(NodeFencedError):
        await node.put_attached(s, attached)
    kept = await node.get_participant(s, "p-1")
    assert kept is not None
    assert kept.attached is False
    assert await sweeper.claim_due_deadlines(10_000) == [deadline]


@single_redis
async def test_a_fenced_detach_arms_no_deadline(backend: Backend) -> None:
    """put_detached under a fenced lease writes nothing: no record, no deadline armed (the
    session's own set included: a later deletion has nothing of it to drop)."""
    node, sweeper, s, _ = await _fenced(backend, "node-pd")
    detached = ParticipantRecord(participant_id="p-9", role="edge", detached_at_ms=1)
    with pytest.raises(NodeFencedError):
        await node.put_detached(s, detached, Deadline(session_id=s, participant_id="p-9", due_ms=1))
    assert await node.get_participant(s, "p-9") is None
    assert await sweeper.claim_due_deadlines(10_000) == []
    assert backend.server is not None
    with contextlib.closing(backend.server.client()) as raw:
        assert not raw.sismember(SessionKeys.of(s).dl, "p-9")


@redis_backends
async def test_a_fenced_node_can_delete_nothing(backend: Backend) -> None:
    """The delete script checks the same fence as the append: under a fenced lease the
    session, its log and participants stay (no tombstone); the node's next lease deletes."""
    node = redis_store(backend, node_id="node-del")
    sweeper = redis_store(backend, node_id="node-del-sweeper")
    s = await new_session(node)
    await node.node_heartbeat("node-del", new_epoch=True)
    await node.append(s, [entry("kept")])
    await node.put_participant(s, ParticipantRecord(participant_id="p-1", role="edge"))
    epoch = await sweeper.claim_node("node-del", dead_after_ms=0, lease_ms=5000, token="t")
    assert epoch is not None
    assert await sweeper.fence_node(s, "node-del", epoch)
    with pytest.raises(NodeFencedError):
        await node.delete_session(s)
    with node.pinned_epoch(epoch), pytest.raises(NodeFencedError):
        await node.delete_session(s)  # a REST delete begun under the fenced lease
    assert await node.get_session(s) is not None
    assert not await node.is_deleted(s)
    assert [e.message_id for e in await node.read(s)] == ["kept"]
    assert [r.participant_id for r in await node.list_participants(s)] == ["p-1"]
    assert await sweeper.delete_session(s)  # another node's delete is not fenced
    t = await new_session(node)
    assert await node.node_heartbeat("node-del") is False  # a new lease
    assert await sweeper.fence_node(t, "node-del", epoch)
    assert await node.delete_session(t)
    assert await node.is_deleted(t)


@redis_backends
async def test_a_fenced_node_can_archive_nothing(backend: Backend) -> None:
    """The archive script checks the same fence: under a fenced lease the header does not
    say ended and the participants stay; the node's next lease archives."""
    node, _, s, _ = await _fenced(backend, "node-arc")

    async def archive() -> bool:
        return await node.archive_session(
            s, ended_at="2026-01-01T00:00:00Z", ended_at_ms=1, reason="timeout", deleted_by="system"
        )

    with pytest.raises(NodeFencedError):
        await archive()
    header = await node.get_session(s)
    assert header is not None
    assert not header.archived
    assert [r.participant_id for r in await node.list_participants(s)] == ["p-1"]
    assert await node.archived_before(2) == []
    assert await node.node_heartbeat("node-arc") is False  # a new lease
    assert await archive()
    header = await node.get_session(s)
    assert header is not None
    assert header.archived
    assert await node.list_participants(s) == []


@redis_backends
async def test_a_rest_write_hold_is_fenced_by_the_sweep_or_refused(backend: Backend) -> None:
    """A write hold taken before the claim puts the session in what the sweeper fences; one
    asked for after the claim, or under an old epoch, is refused; done writes leave nothing."""
    node = redis_store(backend, node_id="node-w")
    sweeper = redis_store(backend, node_id="node-w-sweeper")
    held, later = await new_session(node), await new_session(node)
    await node.node_heartbeat("node-w", new_epoch=True)
    epoch = node.lease_epoch
    assert await node.hold_write(held, epoch)
    assert await node.hold_write(held, epoch)  # two writes in progress
    await node.write_done(held)
    assert await node.held_sessions("node-w") == [held]
    assert not await node.hold_write(later, epoch + 1)  # not our epoch
    claimed = await sweeper.claim_node("node-w", dead_after_ms=0, lease_ms=5000, token="t")
    assert claimed == epoch
    told: list[int] = []
    node.on_fenced = lambda: told.append(1)
    assert not await node.hold_write(later, epoch)  # claimed: refused, and the node is told
    assert told == [1]
    assert await sweeper.held_sessions("node-w") == [held]
    assert await sweeper.node_swept("node-w", "t")  # forgotten, its write record too
    await node.write_done(held)  # the write in progress ends (after the sweep: harmless)
    assert await node.held_sessions("node-w") == []
    assert await node.node_heartbeat("node-w") is False  # a new lease: holds work again
    assert await node.hold_write(later, node.lease_epoch)
    await node.write_done(later)
    assert await node.held_sessions("node-w") == []


@redis_backends
async def test_a_pinned_epoch_is_what_the_append_carries(backend: Backend) -> None:
    """Inside pinned_epoch an append carries the pinned lease, not the node's newer one: a
    write begun under a fenced lease is refused even after the node took a new lease."""
    node = redis_store(backend, node_id="node-pin")
    sweeper = redis_store(backend, node_id="node-pin-sweeper")
    s = await new_session(node)
    await node.node_heartbeat("node-pin", new_epoch=True)
    old = node.lease_epoch
    epoch = await sweeper.claim_node("node-pin", dead_after_ms=0, lease_ms=5000, token="t")
    assert epoch is not None
    assert await sweeper.fence_node(s, "node-pin", epoch)
    assert await node.node_heartbeat("node-pin") is False
    assert node.lease_epoch > old
    with node.pinned_epoch(old), pytest.raises(NodeFencedError):
        await node.append(s, [entry("begun-under-the-old-lease")])
    await node.append(s, [entry("new-lease")])
    assert [e.message_id for e in await node.read(s)] == ["new-lease"]


@redis_backends
async def test_last_received_is_kept_by_the_append_script(backend: Backend) -> None:
    """welcome.received per sender comes from the store: the last frame it logged, or the
    history's reported frame; master entries and a history that kept none change nothing."""
    store = redis_store(backend)
    other = redis_store(backend)  # another node sees the same at once
    s = await new_session(store)
    assert await other.last_received(s, "p-client") is None
    await store.append(s, [entry("m1"), entry("m2"), entry("x", sender_id="p-edge")])
    assert await other.last_received(s, "p-client") == "m2"
    history = entry("h1")
    history.received_id = "inner-9"
    empty = entry("h2")
    empty.received_id = ""
    await store.append(s, [history, entry(sender_id="p-client", sender_role="master"), empty])
    assert await other.last_received(s, "p-client") == "inner-9"
    assert await other.last_received(s, "p-edge") == "x"
    await store.append(s, [entry("m1")])  # a duplicate changes nothing
    assert await other.last_received(s, "p-client") == "inner-9"


@redis_backends
async def test_subscribe_receives_every_nodes_batches(backend: Backend) -> None:
    """A subscriber gets each append batch, packed LogEntries tagged with the writing node."""
    node_a = redis_store(backend, node_id="node-a")
    node_b = redis_store(backend, node_id="node-b")
    s1, s2 = await new_session(node_a), await new_session(node_a)
    sub = await node_a.subscribe(s1)
    async with sub:
        await sub.add(s2)
        await node_b.append(s1, [entry(), entry()])
        await node_b.append(s1, [entry(node_a.node_id)])
        await node_a.append(s2, [entry()])
        got = [await asyncio.wait_for(anext(sub), 5) for _ in range(3)]
        assert [(p.session_id, p.node_id) for p in got] == [
            (s1, "node-b"),
            (s1, "node-b"),
            (s2, "node-a"),
        ]
        assert got[0].entries + got[1].entries == await node_a.read(s1)
        assert got[2].entries == await node_a.read(s2)
        await sub.remove(s1)
        await node_b.append(s1, [entry()])
        await node_b.append(s2, [entry()])
        nxt = await asyncio.wait_for(anext(sub), 5)
        assert (nxt.session_id, [e.seq for e in nxt.entries]) == (s2, [2])


@redis_backends
async def test_subscription_without_own_batches_skips_this_nodes(backend: Backend) -> None:
    """With own=False a subscriber hears other nodes' batches only, never its own node's."""
    node_a = redis_store(backend, node_id="node-a")
    node_b = redis_store(backend, node_id="node-ab")  # node-a's id is a prefix of this one
    s = await new_session(node_a)
    async with await node_a.subscribe(s, own=False) as sub:
        await node_a.append(s, [entry()])
        await node_b.append(s, [entry()])
        await node_a.append(s, [entry()])
        await node_b.append(s, [entry()])
        got = [await asyncio.wait_for(anext(sub), 5) for _ in range(2)]
        assert [(p.node_id, [e.seq for e in p.entries]) for p in got] == [
            ("node-ab", [2]),
            ("node-ab", [4]),
        ]


@redis_backends
async def test_duplicates_only_publish_nothing(backend: Backend) -> None:
    """A batch made only of duplicates is not published (nothing new to fan out)."""
    store = redis_store(backend)
    s = await new_session(store)
    e = entry()
    await store.append(s, [e])
    async with await store.subscribe(s) as sub:
        await store.append(s, [entry(e.message_id)])
        await store.append(s, [entry()])
        got = await asyncio.wait_for(anext(sub), 5)
        assert [x.seq for x in got.entries] == [2]


@redis_backends
async def test_every_session_key_carries_the_hash_tag(backend: Backend) -> None:
    """Every key of a session is tagged {session_id}, so the session lives in one slot."""
    store = redis_store(backend, retention=2)
    s = await new_session(store)
    await store.append(s, [entry() for _ in range(4)])
    await store.put_participant(s, ParticipantRecord(participant_id="p-1", role="edge"))
    await store.set_deadline(Deadline(session_id=s, participant_id="p-1", due_ms=1))
    await store.delete_session(s)
    await store.create_session(header(s))
    await store.append(s, [entry()])
    session_keys = [k.decode() for k in raw_keys(backend) if s.encode() in k]
    assert session_keys
    assert all(k.startswith(f"rawp:{{{s}}}:") for k in session_keys), session_keys


@redis_backends
async def test_session_ids_with_braces_are_refused(backend: Backend) -> None:
    """A session id with { or } would move the hash tag: refused with ValueError."""
    store = redis_store(backend)
    for bad in ("s-{x}", "s}", "{", ""):
        h = header()
        h.session_id = bad
        with pytest.raises(ValueError, match="session id"):
            await store.create_session(h)


@redis_backends
async def test_append_to_a_newer_format_is_refused(backend: Backend) -> None:
    """This build never appends to a log whose header a newer build wrote."""
    store = redis_store(backend)
    s = await new_session(store, format_version=store.format_version + 1)
    with pytest.raises(FormatVersionError, match="upgrade"):
        await store.append(s, [entry()])


@redis_backends
async def test_retention_also_trims_the_dedupe_index(backend: Backend) -> None:
    """With retention the message_id index holds only the kept entries (bounded memory)."""
    store = redis_store(backend, retention=3)
    s = await new_session(store)
    entries = [entry() for _ in range(10)]
    for e in entries:
        await store.append(s, [e])
    assert [await store.message_seq(s, e.message_id) for e in entries[-4:]] == [None, 8, 9, 10]
    assert await store.message_seq(s, entries[0].message_id) is None


async def test_unreachable_redis_is_store_unavailable() -> None:
    """With nothing listening, operations raise StoreUnavailableError and ping is false."""
    store = RedisStore(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.5)
    try:
        assert not await store.ping()
        with pytest.raises(StoreUnavailableError):
            await store.append("s-1", [entry()])
        with pytest.raises(StoreUnavailableError):
            await store.get_session("s-1")
        with pytest.raises(StoreUnavailableError):
            await store.start()
    finally:
        await store.close()


@single_redis
async def test_a_burst_beyond_the_pool_waits_for_a_connection(backend: Backend) -> None:
    """More commands at once than the pool has connections wait their turn, none refused."""
    store = redis_store(backend, max_connections=2)
    try:
        s = await new_session(store)
        headers = await asyncio.gather(*(store.get_session(s) for _ in range(40)))
        assert all(h is not None and h.session_id == s for h in headers)
    finally:
        await store.close()


@single_redis
async def test_a_pool_that_stays_taken_is_store_unavailable_after_the_wait(
    backend: Backend,
) -> None:
    """When no connection frees up within the pool wait, the command is refused unavailable."""
    store = redis_store(backend, max_connections=1, timeout=0.2)
    try:
        s = await new_session(store)
        async with await store.subscribe(s):  # holds the pool's only connection
            with pytest.raises(StoreUnavailableError):
                await store.get_session(s)
        assert await store.get_session(s) is not None  # given back with the subscription
    finally:
        await store.close()


@single_redis
async def test_store_recovers_when_redis_comes_back(backend: Backend) -> None:
    """After an outage the same store object works again without being reopened."""
    assert backend.server is not None
    store = redis_store(backend)
    s = await new_session(store)
    await store.append(s, [entry()])
    backend.server.stop()
    try:
        with pytest.raises(StoreUnavailableError):
            await store.append(s, [entry()])
        assert not await store.ping()
    finally:
        backend.server.start()
    assert await store.ping()
    assert await store.append(s, [entry()]) == [AppendResult(seq=2)]


@single_redis
async def test_subscription_survives_an_outage(backend: Backend) -> None:
    """A subscription reports the outage once, says when it is back, then delivers again."""
    assert backend.server is not None
    store = redis_store(backend)
    s = await new_session(store)
    async with await store.subscribe(s) as sub:
        backend.server.stop()
        try:
            with pytest.raises(StoreUnavailableError):
                await asyncio.wait_for(anext(sub), 5)
        finally:
            backend.server.start()
        back = await asyncio.wait_for(anext(sub), 10)
        assert (back.session_id, back.node_id, back.entries) == (s, "", [])
        await store.append(s, [entry()])
        got = await asyncio.wait_for(anext(sub), 5)
        assert [e.seq for e in got.entries] == [1]


@pytest.mark.redis
async def test_rediss_url_works_over_tls(tmp_path: Path) -> None:
    """A rediss:// URL talks TLS: create, append, read and pub/sub all work."""
    if redis_server_binary() is None or shutil.which("openssl") is None:
        pytest.skip("needs redis-server and openssl on PATH")
    server = RedisServer(tmp_path / "tls", tls=True)
    server.start()
    store = open_store(server.url, ssl_ca_certs=str(server.ca_file))
    try:
        assert server.url.startswith("rediss://")
        assert isinstance(store, RedisStore)
        s = await new_session(store)
        async with await store.subscribe(s) as sub:
            assert await store.append(s, [entry(), entry()]) == [
                AppendResult(seq=1),
                AppendResult(seq=2),
            ]
            got = await asyncio.wait_for(anext(sub), 5)
            assert got.entries == await store.read(s)
    finally:
        await store.close()
        server.kill()


@pytest.mark.redis
async def test_open_store_picks_the_backend(redis_server: Any) -> None:
    """open_store maps memory / redis:// / rediss:// (+cluster) to the right backend."""
    mem = open_store("memory", cluster=False, retention=5)
    assert isinstance(mem, MemoryStore)
    red = open_store(redis_server.url, retention=5, node_id="n-1")
    assert isinstance(red, RedisStore)
    assert (red.retention, red.node_id, red.cluster) == (5, "n-1", False)
    await red.close()
    tls = open_store("rediss://127.0.0.1:1/0")
    assert isinstance(tls, RedisStore)
    await tls.close()
    with pytest.raises(ValueError, match="cluster"):
        open_store("memory", cluster=True)
    with pytest.raises(ValueError, match="unknown store"):
        open_store("postgres://x")


def test_memory_store_does_not_import_redis() -> None:
    """The embedded path never imports redis (it is optional at run time)."""
    code = (
        "import sys; from relay.store import open_store; open_store('memory'); "
        "assert not any(m == 'redis' or m.startswith('redis.') for m in sys.modules), 'redis'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
