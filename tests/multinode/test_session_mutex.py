"""The cross-node session mutex: renewed while its holder works, lost when the holder dies.

Against our own redis-server on a free 127.0.0.1 port (tests/conftest.py), never the
machine's Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

import relay.cluster.mutex
from relay.fanout import Outbox
from relay.server import Master
from relay.store.base import ParticipantRecord
from relay.store.redis import AttachView, RedisStore
from tests.contract.test_store_contract import entry, header
from tests.e2e.conftest import API_KEY
from tests.e2e.conftest import test_settings as settings_for
from tests.e2e.util import http
from tests.support.redis_server import RedisServer
from tests.support.wire import Peer

__all__: list[str] = []

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

_TTL_MS = 300


def sid() -> str:
    """A fresh session id."""
    return f"s-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def stores(redis_server: RedisServer) -> AsyncIterator[Callable[[], RedisStore]]:
    """Open RedisStores on our own Redis (one per would-be node); all closed after."""
    opened: list[RedisStore] = []

    def open_one() -> RedisStore:
        store = RedisStore(redis_server.url)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        await store.close()


@contextlib.asynccontextmanager
async def one_node(redis_server: RedisServer) -> AsyncIterator[Master]:
    """A master (node N1) on our own Redis, emptied first; stopped after."""
    with contextlib.closing(redis_server.client()) as c:
        c.flushall()
    options: dict[str, Any] = {"store": redis_server.url, "node_id": "N1"}
    master = Master(settings_for(**options, node_heartbeat_s=0.1, node_dead_after_s=5.0))
    await master.start()
    try:
        yield master
    finally:
        await master.stop()


async def stays_refused(store: RedisStore, session_id: str, seconds: float) -> None:
    """``store`` cannot take the session's mutex at any moment during ``seconds``."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        assert not await store.lock_session(session_id, "contender", _TTL_MS)
        await asyncio.sleep(0.03)


async def test_a_holder_working_past_the_ttl_keeps_the_mutex(
    stores: Callable[[], RedisStore],
) -> None:
    """The holder's work takes 4 TTLs: no contender gets in until it unlocks, then one does."""
    holder, contender = stores(), stores()
    s = sid()
    assert await holder.lock_session(s, "holder", _TTL_MS)
    await stays_refused(contender, s, 4 * _TTL_MS / 1000)
    await holder.unlock_session(s, "holder")
    assert await contender.lock_session(s, "contender", _TTL_MS)
    await contender.unlock_session(s, "contender")


async def test_a_holder_takes_the_mutex_over_from_a_release_still_on_its_way(
    stores: Callable[[], RedisStore],
) -> None:
    """A node's next holder takes the mutex over from the token it released without waiting;
    the late release then leaves it held. Without that token (another node), or with one that
    does not hold the mutex, entering is refused as before (tokens are each node's secret)."""
    node, other = stores(), stores()
    h = header()
    await node.create_session(h)
    s = h.session_id
    assert await node.enter_session(s, "t1", _TTL_MS) is not None
    release = node.unlock_soon(s, "t1")  # its round trip not sent yet
    assert await other.enter_session(s, "o1", _TTL_MS) is None  # still t1's
    assert await node.enter_session(s, "t2", _TTL_MS, released="x") is None
    assert await node.enter_session(s, "t2", _TTL_MS, released="t1") is not None
    await release  # lands after the takeover: finds t2, releases nothing
    assert await other.enter_session(s, "o1", _TTL_MS) is None
    assert not await other.lock_session(s, "o1", _TTL_MS)
    await node.unlock_session(s, "t2")
    assert await other.enter_session(s, "o2", _TTL_MS, released="t2") is not None
    await other.unlock_session(s, "o2")


async def test_entering_for_an_attach_reads_its_first_backlog_page_too(
    stores: Callable[[], RedisStore],
) -> None:
    """With a page asked for, enter_session also returns at most that many entries after the
    seq asked (to the log's end), with the participant's last received id: what an attach
    would read next, in the same round trip; without one, no page."""
    store = stores()
    h = header()
    await store.create_session(h)
    s = h.session_id
    sent = [entry(f"m{i}", sender_id="e", sender_role="edge") for i in range(1, 6)]
    await store.append(s, sent)
    entered = await store.enter_session(
        s, "t1", _TTL_MS, participant_id="e", after_seq=5, page_after=1, page_limit=3
    )
    assert entered is not None
    assert entered.entries == []
    assert [e.seq for e in entered.page or []] == [2, 3, 4]
    assert entered.view.received == "m5"
    await store.unlock_session(s, "t1")
    tail = await store.enter_session(s, "t2", _TTL_MS, page_after=3, page_limit=10)
    assert tail is not None
    assert [e.message_id for e in tail.page or []] == ["m4", "m5"]
    await store.unlock_session(s, "t2")
    plain = await store.enter_session(s, "t3", _TTL_MS)
    assert plain is not None
    assert plain.page is None
    await store.unlock_session(s, "t3")


async def test_entering_takes_the_mutex_and_reads_what_its_holder_lacks(
    stores: Callable[[], RedisStore],
) -> None:
    """enter_session is lock_session (renewed past the TTL, refused while held) that also
    returns the log after the holder's seq and the participants' view; refused, it reads
    nothing."""
    holder, contender = stores(), stores()
    h = header()
    await holder.create_session(h)
    s = h.session_id
    await holder.append(s, [entry("m1"), entry("m2"), entry("m3")])
    client = ParticipantRecord(participant_id="c", role="client", attached=True, node_id="N2")
    await holder.put_participant(s, client)
    entered = await holder.enter_session(s, "holder", _TTL_MS, participant_id="c", after_seq=1)
    assert entered is not None
    assert [e.message_id for e in entered.entries or []] == ["m2", "m3"]
    assert entered.view == AttachView({"N2": 1}, client, [client], complete=True)
    assert await contender.enter_session(s, "contender", _TTL_MS, after_seq=0) is None
    await stays_refused(contender, s, 4 * _TTL_MS / 1000)
    await holder.unlock_session(s, "holder")
    again = await contender.enter_session(s, "contender", _TTL_MS)
    assert again is not None
    assert again.entries is None  # no log asked for
    await contender.unlock_session(s, "contender")


async def test_extend_is_token_checked(stores: Callable[[], RedisStore]) -> None:
    """Only the holder's token renews the mutex; once released, nobody's does."""
    holder, other = stores(), stores()
    s = sid()
    assert await holder.lock_session(s, "holder", _TTL_MS)
    assert not await other.extend_session_lock(s, "someone-else", 60_000)
    assert await holder.extend_session_lock(s, "holder", _TTL_MS)
    await holder.unlock_session(s, "holder")
    assert not await holder.extend_session_lock(s, "holder", _TTL_MS)


async def test_a_store_that_stops_renewing_loses_the_mutex_after_its_ttl(
    stores: Callable[[], RedisStore],
) -> None:
    """A holder closed without unlocking (renewals stop) blocks others one TTL, no longer."""
    holder, contender = stores(), stores()
    s = sid()
    assert await holder.lock_session(s, "holder", _TTL_MS)
    await holder.close()
    assert not await contender.lock_session(s, "contender", _TTL_MS)
    await asyncio.sleep(_TTL_MS / 1000 + 0.2)
    assert await contender.lock_session(s, "contender", _TTL_MS)
    await contender.unlock_session(s, "contender")


_HOLDER = """
import asyncio, sys
from relay.store.base import ParticipantRecord
from relay.store.redis import AttachView, RedisStore

async def main() -> None:
    store = RedisStore(sys.argv[1])
    assert await store.lock_session(sys.argv[2], "holder", int(sys.argv[3]))
    print("held", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_a_holder_that_dies_loses_the_mutex_after_its_ttl(
    redis_server: RedisServer, stores: Callable[[], RedisStore]
) -> None:
    """A holder process killed with SIGKILL mid-hold: refused at first, in one TTL later."""
    ttl_ms = 1000
    s = sid()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _HOLDER,
        redis_server.url,
        s,
        str(ttl_ms),
        stdout=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line.strip() == b"held"
        contender = stores()
        await stays_refused(contender, s, 2 * ttl_ms / 1000)  # renewed while it lives
        proc.kill()  # SIGKILL: no unlock, no last renewal
        await proc.wait()
        loop = asyncio.get_running_loop()
        killed = loop.time()
        assert not await contender.lock_session(s, "contender", ttl_ms)
        while not await contender.lock_session(s, "contender", ttl_ms):
            assert loop.time() - killed < ttl_ms / 1000 + 1.0, "the dead holder's mutex stays"
            await asyncio.sleep(0.02)
        await contender.unlock_session(s, "contender")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_a_delete_waiting_on_a_slow_consumer_keeps_its_mutex(
    redis_server: RedisServer,
    stores: Callable[[], RedisStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A DELETE whose participants drain slowly (6 TTLs) holds the session's mutex to the
    end: another node cannot take it meanwhile, and can right after the delete."""
    monkeypatch.setattr(relay.cluster.mutex, "MUTEX_TTL_MS", _TTL_MS)
    drain = Outbox.drain
    slow, draining = asyncio.Event(), asyncio.Event()

    async def slow_drain(self: Outbox, timeout: float) -> bool:
        if slow.is_set():
            draining.set()
            await asyncio.sleep(6 * _TTL_MS / 1000)  # a consumer that reads slowly
        return await drain(self, timeout)

    monkeypatch.setattr(Outbox, "drain", slow_drain)
    async with one_node(redis_server) as master:
        s = sid()
        await Peer.open(master.ws_url, s, role="client", token=API_KEY, create=True)
        await Peer.open(master.ws_url, s, role="edge", token=API_KEY)
        other_node = stores()
        slow.set()
        delete = asyncio.create_task(http(master, "DELETE", f"/v1/session/{s}"))
        await asyncio.wait_for(draining.wait(), 10)  # under the mutex, waiting on the edge
        await stays_refused(other_node, s, 3 * _TTL_MS / 1000)
        assert not delete.done()
        status, _ = await delete
        assert status == 200
        assert await other_node.lock_session(s, "contender", _TTL_MS)
        await other_node.unlock_session(s, "contender")


async def test_a_node_takes_its_own_released_mutex_over_at_most_16_times_in_a_row(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Holds handed over (attaches, detaches) do not wait for their release: the next hold on
    this node takes the mutex over, 16 times in a row at most; the 17th waits for the release
    to land (another node's turn), and every hold gets the mutex."""
    async with one_node(redis_server) as master:
        s = sid()
        await Peer.open(master.ws_url, s, role="client", token=API_KEY, create=True)
        session = master.hub.sessions[s]
        store = master.store
        assert isinstance(store, RedisStore)
        unlock_soon = store.unlock_soon

        def late(session_id: str, token: str) -> Any:
            release = unlock_soon(session_id, token)

            async def landing() -> None:
                await asyncio.sleep(0.05)  # the release's round trip, slow
                await release

            return landing()

        took_over: list[str] = []
        enter = store.enter_session

        async def entering(*args: Any, **kwargs: Any) -> Any:
            took_over.append(kwargs.get("released", ""))
            return await enter(*args, **kwargs)

        monkeypatch.setattr(store, "unlock_soon", late)
        monkeypatch.setattr(store, "enter_session", entering)
        mutex = master.hub.cluster.mutex  # type: ignore[attr-defined]
        holds = 0
        for _ in range(40):
            async with session.lock, mutex.guard(session, hand_over=True):
                holds += 1
        assert holds == 40
        runs = "".join("t" if token else "." for token in took_over).split(".")
        assert max(len(run) for run in runs) == 16
