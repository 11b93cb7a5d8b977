"""The cross-node paths of several in-process masters sharing one Redis (docs/operations.md).

One client per session across nodes (4409, takeover fencing), termination reaching every
node, a clean shutdown leaving its finalization to another node, and reattach windows that
expire on a node that never held the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from relay.recovery import recover_locked
from relay.server import Master
from relay.session import backlog_read_after
from relay.store.redis.keys import SessionKeys
from tests.e2e.conftest import API_KEY
from tests.e2e.conftest import test_settings as settings_for
from tests.e2e.util import http, wait_until
from tests.support.presence import refuse_next_presence, roster_of
from tests.support.redis_server import RedisServer
from tests.support.wire import Peer, new_turn_id

__all__: list[str] = []

pytestmark = [pytest.mark.redis, pytest.mark.timeout(30)]


@pytest.fixture
async def nodes(redis_server: RedisServer) -> AsyncIterator[Callable[..., Any]]:
    """Start in-process masters (node ids N1, N2, …) on our own Redis; all stopped after."""
    with contextlib.closing(redis_server.client()) as c:
        c.flushall()
    started: list[Master] = []

    async def start(count: int, **changes: Any) -> list[Master]:
        for _ in range(count):
            options: dict[str, Any] = {
                "store": redis_server.url,
                "node_id": f"N{len(started) + 1}",
                "node_heartbeat_s": 0.1,
                "node_dead_after_s": 0.6,
                "reattach_window_s": 30.0,
                **changes,
            }
            master = Master(settings_for(**options))
            await master.start()
            started.append(master)
        return started[-count:]

    yield start
    for master in started:
        await master.stop()


async def hello_close_code(url: str, session_id: str, *, role: str) -> int | None:
    """The close code a hello (no participant id) gets from the master at ``url``."""
    peer = await Peer.open(url, session_id, role=role, token=API_KEY, expect_welcome=False)
    return await peer.closed_with()


def sid() -> str:
    """A fresh session id."""
    return f"s-{uuid.uuid4().hex[:10]}"


async def mid_turn(client: Peer) -> str:
    """The client opens a turn with a text block and a tool call; returns the turn id."""
    turn = new_turn_id()
    await client.send("session.turn.start", {"turn_id": turn, "turn_index": 0})
    await client.send("agent.text.delta", {"block_id": "b1", "delta": "x"})
    await client.send("agent.state", {"state": "tool_calling"})
    await client.send("tool.invoke.request", {"call_id": "c1", "tool_name": "ls", "input": {}})
    return turn


async def test_second_client_on_another_node_is_refused_4409(nodes: Any) -> None:
    """A client hello on B while the session's client is attached on a live A: 4409."""
    a, b = await nodes(2)
    s = sid()
    client = await Peer.open(a.ws_url, s, role="client", token=API_KEY, create=True)
    assert await hello_close_code(b.ws_url, s, role="client") == 4409
    await client.send("agent.state", {"state": "thinking"})  # A still serves it
    assert await client.no_frame(0.2)


async def test_takeover_on_another_node_fences_the_old_connection(nodes: Any) -> None:
    """Same participant id on B: A closes the old connection 4409; the new one is live."""
    a, b, c = await nodes(3)
    s = sid()
    client = await Peer.open(a.ws_url, s, role="client", token=API_KEY, create=True)
    edge = await Peer.open(c.ws_url, s, role="edge", token=API_KEY)
    again = await Peer.open(
        b.ws_url, s, role="client", token=API_KEY, participant_id=client.participant_id
    )
    assert again.welcome["payload"]["generation"] == 2
    assert await client.closed_with() == 4409
    assert client.participant_id not in a.hub.sessions[s].participants
    sent = await again.send("agent.state", {"state": "thinking"})
    got = await edge.recv_until(lambda f: f.get("message_id") == sent["message_id"])
    assert [f["type"] for f in got if f["type"] == "session.error"] == []
    record = await b.store.get_participant(s, client.participant_id)
    assert record is not None
    assert (record.node_id, record.attached, record.generation) == ("N2", True, 2)


async def test_a_layout_1_session_keeps_one_client_across_nodes(
    nodes: Any, redis_server: RedisServer
) -> None:
    """A session an earlier build wrote (no attached index) is judged from its records: a
    second client on B is refused 4409, the same client id takes over."""
    a, b = await nodes(2)
    s = sid()
    client = await Peer.open(a.ws_url, s, role="client", token=API_KEY, create=True)
    k = SessionKeys.of(s)
    with contextlib.closing(redis_server.client()) as raw:
        raw.hset(k.hdr, "v", 1)
        raw.delete(k.on, k.nodes, k.cli)
    assert await hello_close_code(b.ws_url, s, role="client") == 4409
    again = await Peer.open(
        b.ws_url, s, role="client", token=API_KEY, participant_id=client.participant_id
    )
    assert await client.closed_with() == 4409
    assert again.welcome["payload"]["generation"] == 2
    with contextlib.closing(redis_server.client()) as raw:
        assert raw.exists(k.on, k.nodes, k.cli) == 0  # never converted


async def test_delete_on_one_node_ends_the_session_on_every_node(nodes: Any) -> None:
    """DELETE through C: A's client and B's edge get the §9 order and close 1000."""
    a, b, c = await nodes(3)
    s = sid()
    client = await Peer.open(a.ws_url, s, role="client", token=API_KEY, create=True)
    edge = await Peer.open(b.ws_url, s, role="edge", token=API_KEY)
    turn = await mid_turn(client)
    await edge.recv_until(lambda f: f["type"] == "tool.invoke.request")
    status, _ = await http(c, "DELETE", f"/v1/session/{s}")
    assert status == 200
    for peer in (client, edge):
        assert await peer.closed_with() == 1000
        tail = [f for f in peer.received if f["type"] != "session.presence"][-3:]
        assert [f["type"] for f in tail] == [
            "tool.invoke.result",
            "session.turn.end",
            "session.deleted",
        ]
        assert tail[0]["payload"]["status"] == "cancelled"
        assert tail[1]["payload"] == {
            "turn_id": turn,
            "stop_reason": "error",
            "error": {"code": "session_ended", "message": "the session ended during this run"},
        }
        assert tail[2]["payload"]["reason"] == "master_request"
    # Each node forgets the session right after its closes complete: a moment after the
    # peers saw their close frames (on a loaded machine, a noticeable one).
    await wait_until(lambda: s not in a.hub.sessions and s not in b.hub.sessions)
    assert await hello_close_code(a.ws_url, s, role="edge") == 4410


async def test_clean_shutdown_leaves_finalization_to_another_node(nodes: Any) -> None:
    """A stops (1001, no finalization of its own); B finalizes the open turn, once (§7.8.2)."""
    a, b = await nodes(2)
    s = sid()
    client = await Peer.open(a.ws_url, s, role="client", token=API_KEY, create=True)
    edge = await Peer.open(b.ws_url, s, role="edge", token=API_KEY)
    await mid_turn(client)
    await edge.recv_until(lambda f: f["type"] == "tool.invoke.request")
    await a.stop()
    assert await client.closed_with() == 1001
    frames = await edge.recv_until(
        lambda f: f["type"] == "agent.state" and bool((f.get("metadata") or {}).get("synthetic")),
        timeout=10,
    )
    synthetic = [f for f in frames if (f.get("metadata") or {}).get("synthetic")]
    assert [f["type"] for f in synthetic] == [
        "agent.text.done",
        "tool.invoke.result",
        "session.turn.end",
        "agent.state",
    ]
    assert {f["sender"]["participant_id"] for f in synthetic} == {"N2"}
    assert await edge.no_frame(1.0)  # once


async def test_reattach_window_expires_on_a_node_that_never_held_the_connection(
    nodes: Any,
) -> None:
    """The client's node is gone; its deadline lives in Redis and B ends the session."""
    a, b = await nodes(2, reattach_window_s=1.0)
    s = sid()
    client = await Peer.open(a.ws_url, s, role="client", token=API_KEY, create=True)
    edge = await Peer.open(b.ws_url, s, role="edge", token=API_KEY)
    await client.close()
    await a.stop()
    deleted = await edge.recv_type("session.deleted", timeout=10)
    assert deleted["payload"]["reason"] == "timeout"
    assert deleted["payload"]["deleted_by"] == "system"
    assert deleted["sender"]["participant_id"] == "N2"
    assert await edge.closed_with() == 1000


async def test_an_unused_session_is_forgotten_and_loaded_again(
    nodes: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node forgets (and unsubscribes from) a session nobody there uses; it comes back."""
    monkeypatch.setattr("relay.cluster.liveness._UNLOAD_AFTER_S", 0.3)
    a, b = await nodes(2)
    s = sid()
    client = await Peer.open(a.ws_url, s, role="client", token=API_KEY, create=True)
    edge = await Peer.open(b.ws_url, s, role="edge", token=API_KEY)
    await edge.close()
    deadline = asyncio.get_running_loop().time() + 5
    while s in b.hub.sessions:
        assert asyncio.get_running_loop().time() < deadline, "B kept the unused session"
        await asyncio.sleep(0.05)
    assert s in a.hub.sessions  # A serves its client
    again = await Peer.open(b.ws_url, s, role="edge", token=API_KEY)
    sent = await client.send("agent.state", {"state": "thinking"})
    got = await again.recv_until(lambda f: f.get("message_id") == sent["message_id"])
    assert got[-1]["seq"] == await b.store.head_seq(s)  # relayed again through pub/sub
    assert s in b.hub.sessions


async def test_welcome_received_is_right_at_once_after_a_takeover_on_another_node(
    nodes: Any,
) -> None:
    """A client taken over through another node is told at once the last frame the log holds
    from it (read from the store, not the old node's memory)."""
    n1, n2 = await nodes(2)
    s = sid()
    client = await Peer.open(n1.ws_url, s, token=API_KEY, create=True)
    await mid_turn(client)
    last = await client.send("agent.text.delta", {"block_id": "b2", "delta": "y"})
    session = n1.hub.sessions[s]
    await wait_until(lambda: session.head >= 6)  # presence + 5 frames
    again = await Peer.open(n2.ws_url, s, token=API_KEY, participant_id=client.participant_id)
    assert again.welcome["payload"]["received"]["last_message_id"] == last["message_id"]


async def test_a_late_sweep_leaves_a_client_that_came_back_under_a_new_lease(
    nodes: Any,
) -> None:
    """A's lease is claimed as dead; A takes a new one and its client reattaches there before
    the sweep reaches the session: the sweep (fencing the old lease) finalizes nothing, and
    what the client sends next is logged with no synthetic frame before it."""
    a, b = await nodes(2)
    s = sid()
    client = await Peer.open(a.ws_url, s, role="client", token=API_KEY, create=True)
    await mid_turn(client)
    record = await b.store.get_participant(s, client.participant_id)
    assert record is not None
    assert record.epoch == a.store.lease_epoch > 0
    # The sweeper's claim (held here, so B's own sweeps stay out of it) at A's lease now.
    token = uuid.uuid4().hex
    fenced = await b.store.claim_node(
        "N1", dead_after_ms=600, lease_ms=30_000, token=token, force=True
    )
    assert fenced == record.epoch
    await b.store.fence_node(s, "N1", fenced)
    assert await client.closed_with() == 1001  # A's next heartbeat: declared dead
    await wait_until(lambda: a.store.lease_epoch > fenced)
    back = await Peer.open(
        a.ws_url, s, role="client", token=API_KEY, participant_id=client.participant_id
    )
    again = await b.store.get_participant(s, client.participant_id)
    assert again is not None
    assert (again.attached, again.epoch) == (True, a.store.lease_epoch)
    # Only now does the sweep reach the session (as relay/cluster/liveness.py recovers it).
    session = await b.hub.open(s)
    assert session is not None
    async with session.lock, session.coordinator.guard(session):
        assert not await recover_locked(session, "N1", fenced_epoch=fenced)
    await b.store.node_swept("N1", token)
    sent = await back.send("agent.state", {"state": "thinking"})

    async def logged() -> bool:
        return await b.store.message_seq(s, sent["message_id"]) is not None

    await wait_until(logged)
    assert not [f for f in back.received if f["type"] == "session.error"]
    log = await b.store.read(s)
    assert not [e for e in log if b'"synthetic":true' in e.data]
    record = await b.store.get_participant(s, client.participant_id)
    assert record is not None
    assert (record.attached, record.node_id) == (True, "N1")


async def test_frames_judged_before_a_node_is_declared_dead_are_not_logged_under_its_new_lease(
    nodes: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frame judged while A's lease was live, whose append starts only after A was declared
    dead and took a new lease, is written under the lease its sender attached under: refused,
    never logged after the sweep."""
    a, b = await nodes(2)
    s = sid()
    client = await Peer.open(a.ws_url, s, role="client", token=API_KEY, create=True)
    turn = await mid_turn(client)
    session = a.hub.sessions[s]
    real = a.store.message_seq
    swept: list[int] = []

    async def lookup_while_a_is_swept(session_id: str, message_id: str) -> int | None:
        # The worker awaits this with the delta already judged (the refused turn start asks
        # whether it is logged): meanwhile B claims A and A takes a new lease.
        if not swept:
            fenced = await b.store.claim_node(
                "N1", dead_after_ms=600, lease_ms=30_000, token=uuid.uuid4().hex, force=True
            )
            await b.store.fence_node(s, "N1", fenced)
            await wait_until(lambda: a.store.lease_epoch > fenced)
            swept.append(fenced)
        return await real(session_id, message_id)

    monkeypatch.setattr(a.store, "message_seq", lookup_while_a_is_swept)
    async with session.lock:
        delta = await client.send("agent.text.delta", {"block_id": "b1", "delta": "late"})
        await client.send("session.turn.start", {"turn_id": turn, "turn_index": 1})
        async with asyncio.timeout(5):
            while session.queued < 2:
                await asyncio.sleep(0.005)
    await wait_until(lambda: bool(swept) and not session.queued and not session.pipeline.in_flight)
    assert swept
    assert delta["message_id"] not in [e.message_id for e in await b.store.read(s)]


async def test_a_presence_the_store_refused_is_logged_once_it_answers(
    nodes: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An edge attaches on B while B's store refuses its presence: B keeps the session, and
    once the store answers it logs the change, so every participant and the log know the edge
    is attached (notes §5); likewise its detach, whose deadline still ends it."""
    a, b = await nodes(2, reattach_window_s=1.0)
    s = sid()
    client = await Peer.open(a.ws_url, s, role="client", token=API_KEY, create=True)
    refused = refuse_next_presence(monkeypatch, b.store)
    edge = await Peer.open(b.ws_url, s, role="edge", token=API_KEY)
    assert refused == ["attached"]
    got = await client.recv_until(
        lambda f: (
            f["type"] == "session.presence"
            and edge.participant_id
            in [c["participant_id"] for c in f["payload"].get("changes") or [f["payload"]]]
        ),
        timeout=10,
    )
    assert got[-1]["payload"]["state"] == "attached"
    assert roster_of(await b.store.read(s))[edge.participant_id] == "attached"

    monkeypatch.undo()
    refused = refuse_next_presence(monkeypatch, b.store)
    await edge.close()
    got = await client.recv_until(
        lambda f: f["type"] == "session.presence" and f["payload"]["state"] == "detached",
        timeout=10,
    )
    assert refused == ["detached"]
    assert got[-1]["payload"]["participant_id"] == edge.participant_id
    expired = await client.recv_type("session.presence", timeout=10)
    assert expired["payload"]["state"] == "expired"
    assert roster_of(await b.store.read(s))[edge.participant_id] == "expired"


async def test_a_detach_its_node_could_not_log_is_logged_when_that_node_is_recovered(
    nodes: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B's edge detaches while B's store refuses every presence, and B is lost before it could
    log it: recovering B's records logs the detach, so the client on A and the log agree."""
    a, b = await nodes(2)
    s = sid()
    client = await Peer.open(a.ws_url, s, role="client", token=API_KEY, create=True)
    edge = await Peer.open(b.ws_url, s, role="edge", token=API_KEY)
    await client.recv_type("session.presence")  # attached
    refused = refuse_next_presence(monkeypatch, b.store, times=None)
    await edge.close()

    async def detached() -> bool:
        record = await a.store.get_participant(s, edge.participant_id)
        return record is not None and not record.attached

    await wait_until(detached)
    await wait_until(lambda: bool(refused))
    assert roster_of(await a.store.read(s))[edge.participant_id] == "attached"
    session = a.hub.sessions[s]
    async with session.lock, session.coordinator.guard(session):
        await recover_locked(session, "N2")  # as a sweep of a lost B does
    got = await client.recv_type("session.presence", timeout=5)
    changes = got["payload"].get("changes") or [got["payload"]]
    assert [(c["participant_id"], c["state"]) for c in changes] == [
        (edge.participant_id, "detached")
    ]
    assert roster_of(await a.store.read(s))[edge.participant_id] == "detached"


async def test_a_backlog_longer_than_the_page_read_with_the_mutex_is_whole(nodes: Any) -> None:
    """An edge resuming on a Redis node gets its backlog's first page with the mutex's read
    and the rest page by page: every frame after its cursor once, in order, with the anchor's
    id (a resume before the first frame, one mid-log, one at the head)."""
    (n1,) = await nodes(1)
    s = sid()
    client = await Peer.open(n1.ws_url, s, token=API_KEY, create=True)
    edge = await Peer.open(n1.ws_url, s, role="edge", token=API_KEY)
    sent = [
        await client.send("agent.text.delta", {"block_id": "b", "delta": f"{i}"})
        for i in range(600)
    ]
    session = n1.hub.sessions[s]
    await wait_until(lambda: session.head >= 602)  # two presence entries and 600 frames
    head = session.head
    await edge.close()
    logged = {e.seq: e.message_id for e in await n1.store.read(s, after_seq=0)}
    store = n1.store
    reads: list[int] = []
    read = store.read

    async def counted(session_id: str, **kwargs: Any) -> Any:
        reads.append(kwargs.get("after_seq", 0))
        return await read(session_id, **kwargs)

    store.read = counted  # type: ignore[method-assign]
    for cursor in (0, 123, head):
        reads.clear()
        again = await Peer.open(
            n1.ws_url,
            s,
            role="edge",
            token=API_KEY,
            participant_id=edge.participant_id,
            presence=False,
            resume={"last_seq": cursor, "last_message_id": logged.get(cursor, "")}
            if cursor
            else {"last_seq": 0},
        )
        history = await again.recv_type("session.history")
        seqs = [f["seq"] for f in history["payload"]["frames"]]
        ours = [f["message_id"] for f in history["payload"]["frames"]]
        assert seqs == list(range(max(cursor, 2) + 1, head + 1))
        assert set(ours) <= {m["message_id"] for m in sent}
        # the first read (from the anchor on) came with the mutex: only later pages are read
        assert backlog_read_after(cursor) not in reads
        assert len(reads) == max(0, -(-(head - cursor - 256) // 256))
        assert history["payload"]["last_message_id"] == logged.get(cursor, "")
        assert history["payload"]["buffer_status"]["truncated"] is False
        await again.close()
