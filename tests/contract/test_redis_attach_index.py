"""The redis store's attached index (layout 2, relay/store/redis/keys.py): always what the
participant records say, so an attach reads O(nodes + clients), never the whole audience."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from typing import Literal

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relay.store.base import ParticipantRecord
from relay.store.redis import AttachView, RedisStore
from relay.store.redis.keys import SessionKeys
from tests.contract.test_store_contract import entry, header
from tests.support.redis_server import RedisServer

__all__: list[str] = []

pytestmark = pytest.mark.redis

_PIDS = [f"p-{i}" for i in range(5)]
_NODES = ["N1", "N2", "N3"]

# one step: ("put", participant, role, attached on (None: detached), node it names) or
# ("remove", participant)
_puts = st.tuples(
    st.just("put"),
    st.sampled_from(_PIDS),
    st.sampled_from(["client", "edge"]),
    st.one_of(st.none(), st.sampled_from(_NODES)),
    st.sampled_from(_NODES),
)
_removes = st.tuples(st.just("remove"), st.sampled_from(_PIDS))
_steps = st.lists(st.one_of(_puts, _puts, _removes), max_size=30)


def normal(view: AttachView) -> AttachView:
    """``view`` with its client records in id order (sets and hashes have no order)."""
    clients = sorted(view.clients, key=lambda r: r.participant_id)
    return AttachView(dict(view.nodes), view.own, clients)


def index_of(raw: redis.Redis, session_id: str) -> tuple[dict[str, str], dict[str, int], set[str]]:
    """The three index keys as Redis holds them."""
    k = SessionKeys.of(session_id)
    on = {a.decode(): b.decode() for a, b in raw.hgetall(k.on).items()}  # type: ignore[union-attr]
    nodes = {a.decode(): int(b) for a, b in raw.hgetall(k.nodes).items()}  # type: ignore[union-attr]
    cli = {m.decode() for m in raw.smembers(k.cli)}  # type: ignore[union-attr]
    return on, nodes, cli


def expected_index(
    records: list[ParticipantRecord],
) -> tuple[dict[str, str], dict[str, int], set[str]]:
    """The index the records imply."""
    on = {r.participant_id: r.node_id for r in records if r.attached}
    nodes: dict[str, int] = {}
    for node in on.values():
        nodes[node] = nodes.get(node, 0) + 1
    return on, nodes, {r.participant_id for r in records if r.role == "client"}


@pytest.fixture
def raw(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A plain client to the test Redis, to look at the keys themselves."""
    with contextlib.closing(redis_server.client()) as client:
        yield client


async def check_matches(store: RedisStore, raw: redis.Redis, session_id: str) -> None:
    """Every participant's attach view, and the keys, equal what the full records say."""
    records = await store.list_participants(session_id)
    assert index_of(raw, session_id) == expected_index(records)
    for pid in ["", *_PIDS]:
        view = await store.attach_view(session_id, pid)
        assert normal(view) == normal(AttachView.of(records, pid))
        # what the attach would read next comes with it (one round trip, not two)
        assert view.complete == bool(pid)
        if pid:
            assert view.received == await store.last_received(session_id, pid)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(steps=_steps, end=st.sampled_from(["keep", "archive", "delete"]))
def test_the_index_always_says_what_the_records_say(
    redis_server: RedisServer,
    raw: redis.Redis,
    steps: list[tuple[str, ...]],
    end: str,
) -> None:
    """After any puts and removes the index equals the records; archive and delete drop it."""

    async def run() -> None:
        store = RedisStore(redis_server.url, node_id="N1")
        try:
            h = header()
            await store.create_session(h)
            s = h.session_id
            for step in steps:
                if step[0] == "put":
                    _, pid, role, on, named = step
                    record = ParticipantRecord(
                        participant_id=pid,
                        role=role,  # type: ignore[arg-type]
                        attached=on is not None,
                        node_id=on or named,
                    )
                    await store.put_participant(s, record)
                else:
                    await store.remove_participant(s, step[1])
                await check_matches(store, raw, s)
            if end == "archive":
                await store.archive_session(
                    s, ended_at="2026-12-03T00:00:00Z", ended_at_ms=1, reason="r", deleted_by="t"
                )
            elif end == "delete":
                await store.delete_session(s)
            if end != "keep":
                assert index_of(raw, s) == ({}, {}, set())
                assert normal(await store.attach_view(s, "p-0")) == AttachView({}, None, [])
        finally:
            await store.close()

    asyncio.run(run())


async def test_an_attach_view_does_not_grow_with_the_audience(redis_server: RedisServer) -> None:
    """A session of one client and 500 edges: the view holds the counts, one record and the
    client, not 501 records."""
    store = RedisStore(redis_server.url, node_id="N1")
    try:
        h = header()
        await store.create_session(h)
        s = h.session_id
        client = ParticipantRecord(participant_id="c", role="client", attached=True, node_id="N2")
        await store.put_participant(s, client)
        for i in range(500):
            edge = ParticipantRecord(
                participant_id=f"e-{i}", role="edge", attached=True, node_id=_NODES[i % 2]
            )
            await store.put_participant(s, edge)
        await store.append(s, [entry("m-of-e-7", sender_id="e-7", sender_role="edge")])
        view = await store.attach_view(s, "e-7")
        assert view.nodes == {"N1": 250, "N2": 251}
        assert view.own is not None
        assert view.own.node_id == "N2"
        assert view.clients == [client]
        assert view.received == "m-of-e-7"  # its last frame in the log, read with the view
        assert view.complete
        await store.remove_participant(s, "c")
        assert (await store.attach_view(s, "")).nodes == {"N1": 250, "N2": 250}
    finally:
        await store.close()


async def test_a_layout_1_session_is_read_whole_and_left_as_it_is(
    redis_server: RedisServer, raw: redis.Redis
) -> None:
    """A session an earlier build wrote (layout 1) keeps no index and is never converted:
    its attach view comes from every record, and its records are written as before."""
    store = RedisStore(redis_server.url, node_id="N1")
    try:
        s = f"s-{uuid.uuid4()}"
        k = SessionKeys.of(s)
        await store.create_session(header(s))
        raw.hset(k.hdr, "v", 1)  # what an earlier build's create wrote
        role: Literal["client", "edge"]
        for i, role in enumerate(["client", "edge", "edge"]):
            record = ParticipantRecord(
                participant_id=f"p-{i}", role=role, attached=i != 2, node_id=_NODES[i]
            )
            await store.put_participant(s, record)
        assert index_of(raw, s) == ({}, {}, set())
        view = await store.attach_view(s, "p-1")
        assert not view.complete  # the attach reads its record and last received id itself
        assert view.nodes == {"N1": 1, "N2": 1}
        assert view.own is not None
        assert view.own.participant_id == "p-1"
        assert [r.participant_id for r in view.clients] == ["p-0"]
        got = await store.get_session(s)
        assert got is not None
        assert got.format_version == 1
        assert raw.hget(k.hdr, "v") == b"1"
    finally:
        await store.close()
