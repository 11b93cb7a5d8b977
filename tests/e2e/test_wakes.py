"""Wake and revisit on a real master (notes §17.5, docs/protocol.md §6 "Wake and revisit").

Frames are sent raw (tests/support/wire.py); revisits are asked ~1 s ahead so each test takes
seconds. Where the store matters the test runs on the memory and the SQLite store.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from relay.server import Master
from relay.store.sqlite import SqliteStore
from tests.e2e.conftest import API_KEY, OTHER_KEY
from tests.e2e.conftest import test_settings as settings_for
from tests.e2e.util import detached, http, logged, new_session, open_session, wait_until
from tests.support.wire import Peer

__all__: list[str] = []

MakeMaster = Callable[[], Awaitable[Master]]


def at(seconds: float) -> str:
    """An RFC 3339 time ``seconds`` from now."""
    moment = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)
    return moment.isoformat().replace("+00:00", "Z")


@pytest.fixture(params=["memory", "sqlite"])
async def start_master(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MakeMaster]:
    """Start masters on the parametrized store (one SQLite file for all of a test's)."""
    masters: list[Master] = []

    async def start() -> Master:
        store = SqliteStore(tmp_path / "rawp.db") if request.param == "sqlite" else None
        master = Master(settings_for(reattach_window_s=30.0), store=store)
        await master.start()
        masters.append(master)
        return master

    yield start
    for master in masters:
        await master.stop()


async def wakes_in(master: Master, session_id: str) -> list[dict[str, Any]]:
    """The session.wake entries of the log."""
    return [f for f in await logged(master, session_id) if f["type"] == "session.wake"]


async def statuses(master: Master, session_id: str) -> list[str]:
    """The statuses the log states, in order."""
    frames = await logged(master, session_id, status=True)
    return [f["payload"]["status"] for f in frames if f["type"] == "session.status"]


async def test_an_attached_client_is_woken_live_once(start_master: MakeMaster) -> None:
    """A due revisit is logged once as session.wake and reaches the attached client live;
    the status goes rescheduling while it is pending and back to idle after."""
    master = await start_master()
    client, (edge,) = await new_session(master, "s-wake-live")
    request = await client.send(
        "session.revisit.request", {"revisit_id": "r1", "at": at(1.0), "reason": "check CI"}
    )
    got = await client.recv_type("session.wake", timeout=5.0)
    assert got["payload"]["revisit_id"] == "r1"
    assert got["payload"]["reason"] == "check CI"
    assert got["sender"]["role"] == "master"
    assert got["message_id"].startswith("wake:r1:")
    seen = await edge.recv_type("session.wake")  # edges see it too: it is in the log
    assert seen["message_id"] == got["message_id"]
    assert [f["message_id"] for f in await wakes_in(master, "s-wake-live")] == [got["message_id"]]
    log = await logged(master, "s-wake-live")
    assert any(f["message_id"] == request["message_id"] for f in log)  # the request is logged
    assert await statuses(master, "s-wake-live") == ["rescheduling", "idle"]
    await asyncio.sleep(0.6)  # several sweeps later: still once
    assert len(await wakes_in(master, "s-wake-live")) == 1
    assert await master.store.list_wakes("default", due_only=False, after=None, limit=10) == []


async def test_wakes_due_at_one_instant_each_reach_their_client_once(
    start_master: MakeMaster,
) -> None:
    """300 revisits of three sessions due at the same instant (more than a sweep acts on at
    once): each is logged once and reaches its attached client once."""
    master = await start_master()
    clients = [await open_session(master, f"s-wake-burst-{i}") for i in range(3)]
    due = at(1.5)
    for client in clients:
        for r in range(100):  # a session's most pending revisits
            await client.send("session.revisit.request", {"revisit_id": f"r{r}", "at": due})
    for i, client in enumerate(clients):
        woken: list[str] = []
        while len(woken) < 100:
            frame = await client.recv_type("session.wake", timeout=15.0)
            woken.append(frame["payload"]["revisit_id"])
        assert sorted(woken) == sorted(f"r{r}" for r in range(100)), i
    await asyncio.sleep(0.6)  # several sweeps later: still once each
    for i, client in enumerate(clients):
        while not await client.no_frame(0.1):
            pass  # whatever else came, read
        assert sum(f["type"] == "session.wake" for f in client.received) == 100
        assert len(await wakes_in(master, f"s-wake-burst-{i}")) == 100
    assert await master.store.list_wakes("default", due_only=False, after=None, limit=10) == []


async def test_bad_revisits_are_refused_and_nothing_is_stored(start_master: MakeMaster) -> None:
    """Past by more than 60 s or more than 366 days ahead: invalid_revisit; an edge's request or
    cancel: direction; none of them logged, no record stored."""
    master = await start_master()
    client, (edge,) = await new_session(master, "s-wake-bad")
    for when in (at(-120), at(367 * 86400)):
        sent = await client.send("session.revisit.request", {"revisit_id": "rb", "at": when})
        error = await client.recv_type("session.error")
        assert error["payload"]["error_code"] == "invalid_revisit", error
        assert error["payload"]["fatal"] is False
        assert error["payload"]["ref_message_id"] == sent["message_id"]
    for kind, payload in (
        ("session.revisit.request", {"revisit_id": "re", "at": at(5)}),
        ("session.revisit.cancel", {"revisit_id": "re"}),
    ):
        sent = await edge.send(kind, payload)
        error = await edge.recv_type("session.error")
        assert error["payload"]["error_code"] == "direction", error
        assert error["payload"]["fatal"] is False
        assert error["payload"]["ref_message_id"] == sent["message_id"]
    types = {f["type"] for f in await logged(master, "s-wake-bad")}
    assert "session.revisit.request" not in types
    assert "session.revisit.cancel" not in types
    assert await master.store.list_wakes("default", due_only=False, after=None, limit=10) == []
    assert await statuses(master, "s-wake-bad") == []


async def test_a_revisit_up_to_60_s_late_is_due_at_once(start_master: MakeMaster) -> None:
    """Clock skew: an ``at`` 30 s in the past is accepted and woken at once."""
    master = await start_master()
    client = await open_session(master, "s-wake-skew")
    await client.send("session.revisit.request", {"revisit_id": "r1", "at": at(-30)})
    assert (await client.recv_type("session.wake"))["payload"]["revisit_id"] == "r1"


async def test_the_101st_pending_revisit_is_refused(start_master: MakeMaster) -> None:
    """100 pending revisits are kept; the 101st is too_many_revisits; rescheduling one is not."""
    master = await start_master()
    client = await open_session(master, "s-wake-many")
    for i in range(100):
        await client.send("session.revisit.request", {"revisit_id": f"r{i}", "at": at(3600)})
    sent = await client.send("session.revisit.request", {"revisit_id": "r100", "at": at(3600)})
    error = await client.recv_type("session.error")
    assert error["payload"]["error_code"] == "too_many_revisits", error
    assert error["payload"]["ref_message_id"] == sent["message_id"]
    await client.send("session.revisit.request", {"revisit_id": "r5", "at": at(7200)})
    assert await client.no_frame(0.3)
    session = master.hub.sessions["s-wake-many"]
    assert len(session.state.pending_revisits) == 100
    await wait_until(
        lambda: _has(master.store.list_wakes("default", due_only=False, after=None, limit=500), 100)
    )
    records = await master.store.list_wakes("default", due_only=False, after=None, limit=500)
    assert len(records) == 100


async def test_cancel_withdraws_and_an_unknown_cancel_is_a_logged_no_op(
    start_master: MakeMaster,
) -> None:
    """A cancelled revisit never wakes; cancelling an unknown id is logged without an error;
    the status returns to idle with the cancel."""
    master = await start_master()
    client = await open_session(master, "s-wake-cancel")
    await client.send("session.revisit.request", {"revisit_id": "r1", "at": at(1.0)})
    unknown = await client.send("session.revisit.cancel", {"revisit_id": "nope"})
    await client.send("session.revisit.cancel", {"revisit_id": "r1"})
    assert await client.no_frame(2.0)  # past the time asked for: no wake, no error
    log = await logged(master, "s-wake-cancel")
    assert any(f["message_id"] == unknown["message_id"] for f in log)
    assert await wakes_in(master, "s-wake-cancel") == []
    assert await statuses(master, "s-wake-cancel") == ["rescheduling", "idle"]


async def test_the_same_revisit_id_reschedules(start_master: MakeMaster) -> None:
    """A second request with the same id replaces the first: one wake, at the new time."""
    master = await start_master()
    client = await open_session(master, "s-wake-again")
    await client.send("session.revisit.request", {"revisit_id": "r1", "at": at(0.5)})
    later = at(1.5)
    await client.send("session.revisit.request", {"revisit_id": "r1", "at": later})
    got = await client.recv_type("session.wake", timeout=5.0)
    assert dt.datetime.fromisoformat(got["payload"]["at"]) == dt.datetime.fromisoformat(later)
    await asyncio.sleep(0.5)
    assert len(await wakes_in(master, "s-wake-again")) == 1


async def _away_and_woken(master: Master, session_id: str, **open_args: Any) -> Peer:
    """A client that asks for a revisit 1 s ahead and leaves; returns once the wake is
    logged (the client detached)."""
    client = await Peer.open(
        master.ws_url, session_id, token=API_KEY, create=True, participant_id=None, **open_args
    )
    await client.send("session.revisit.request", {"revisit_id": "r1", "at": at(1.0)})
    await wait_until(lambda: master.hub.sessions[session_id].state.pending_revisits)
    await client.close()
    await detached(master, session_id, client)
    await wait_until(
        lambda: master.store.list_wakes("default", due_only=True, after=None, limit=10),
        timeout=5.0,
    )
    assert len(await wakes_in(master, session_id)) == 1
    return client


async def test_a_detached_client_gets_its_wake_in_its_backlog_once(
    start_master: MakeMaster,
) -> None:
    """A wake due while the client is away is logged, listed due, and reaches the client in
    its backlog when it resumes — once (not again after the backlog)."""
    master = await start_master()
    client = await _away_and_woken(master, "s-wake-away")
    due = await master.store.list_wakes("default", due_only=True, after=None, limit=10)
    assert [(r.session_id, r.revisit_id, r.state) for r in due] == [("s-wake-away", "r1", "due")]
    back = await Peer.open(
        master.ws_url,
        "s-wake-away",
        token=API_KEY,
        participant_id=client.participant_id,
        resume={"last_seq": 1},
    )
    history = await back.recv_type("session.history")
    inner = [f["type"] for f in history["payload"]["frames"]]
    assert inner.count("session.wake") == 1
    assert await back.no_frame(0.5)  # not sent a second time after the backlog
    assert await master.store.list_wakes("default", due_only=True, after=None, limit=10) == []


@pytest.mark.parametrize("hello", ["fresh", "none_buffer"])
async def test_a_client_whose_backlog_lacks_the_wake_still_gets_it_once(
    start_master: MakeMaster, hello: str
) -> None:
    """A client that comes back with no resume (a scheduler's fresh agent) or a NONE buffer
    gets the wake right after its welcome, once."""
    master = await start_master()
    client = await _away_and_woken(master, f"s-wake-{hello}")
    args: dict[str, Any] = {}
    if hello == "none_buffer":
        args = {
            "participant_id": client.participant_id,
            "resume": {"last_seq": 1},
            "buffer": {"policy": "NONE", "capacity_bytes": 0},
        }
    back = await Peer.open(master.ws_url, f"s-wake-{hello}", token=API_KEY, **args)
    frames = await back.recv_until(lambda f: f["type"] == "session.wake")
    wake = frames[-1]
    assert wake["payload"]["revisit_id"] == "r1"
    for frame in frames:
        if frame["type"] == "session.history":
            assert "session.wake" not in [f["type"] for f in frame["payload"]["frames"]]
    assert await back.no_frame(0.5)
    await back.close()
    await detached(master, f"s-wake-{hello}", back)
    if hello == "none_buffer":
        args["participant_id"] = back.participant_id
    again = await Peer.open(master.ws_url, f"s-wake-{hello}", token=API_KEY, **args)
    with pytest.raises(TimeoutError):
        await again.recv_type("session.wake", timeout=0.5)  # given once: not again


async def test_a_deleted_session_drops_its_pending_revisits(start_master: MakeMaster) -> None:
    """Deleting a session with a revisit pending drops it: nothing is woken later."""
    master = await start_master()
    client = await open_session(master, "s-wake-deleted")
    await client.send("session.revisit.request", {"revisit_id": "r1", "at": at(1.0)})
    await wait_until(lambda: master.hub.sessions["s-wake-deleted"].state.pending_revisits)
    await wait_until(
        lambda: master.store.list_wakes("default", due_only=False, after=None, limit=10)
    )
    assert await master.hub.delete("s-wake-deleted", reason="user_request", deleted_by="edge")
    assert await master.store.list_wakes("default", due_only=False, after=None, limit=10) == []
    await asyncio.sleep(1.5)
    assert await master.store.list_wakes("default", due_only=False, after=None, limit=10) == []


async def test_a_wake_due_while_the_master_was_down_is_logged_once_after_restart(
    tmp_path: Path,
) -> None:
    """SQLite: the master stops before the wake is due and starts after: it is logged once;
    a claim the stopped master held (killed between "due" and "logged") is taken back at
    start and logged once too."""
    path = tmp_path / "rawp.db"
    first = Master(settings_for(reattach_window_s=30.0), store=SqliteStore(path))
    await first.start()
    try:
        client = await open_session(first, "s-wake-restart")
        await client.send("session.revisit.request", {"revisit_id": "r1", "at": at(1.5)})
        await client.send("session.revisit.request", {"revisit_id": "r2", "at": at(1.5)})
        await wait_until(
            lambda: len(first.hub.sessions["s-wake-restart"].state.pending_revisits) == 2
        )
        await wait_until(
            lambda: _count(first.store.list_wakes("default", due_only=False, after=None, limit=9))
        )
    finally:
        await first.stop()
    # The stopped master claimed r2 and died before logging it: its claim is in the file.
    store = SqliteStore(path)
    await store.start()
    await asyncio.sleep(1.6)
    claimed = await store.claim_due_wakes(int(dt.datetime.now(dt.UTC).timestamp() * 1000), 600_000)
    await store.close()
    assert {r.revisit_id for r in claimed} == {"r1", "r2"}
    second = Master(settings_for(reattach_window_s=30.0), store=SqliteStore(path))
    await second.start()
    try:
        await wait_until(lambda: _has(wakes_in(second, "s-wake-restart"), 2), timeout=5.0)
        await asyncio.sleep(0.6)
        wakes = await wakes_in(second, "s-wake-restart")
        assert sorted(f["payload"]["revisit_id"] for f in wakes) == ["r1", "r2"]
        back = await Peer.open(second.ws_url, "s-wake-restart", token=API_KEY)
        got = [(await back.recv_type("session.wake"))["payload"]["revisit_id"] for _ in range(2)]
        assert sorted(got) == ["r1", "r2"]
    finally:
        await second.stop()


async def _count(listing: Awaitable[list[Any]]) -> int:
    return len(await listing)


async def _has(listing: Awaitable[list[Any]], n: int) -> bool:
    return len(await listing) >= n


async def test_the_wakes_listing_shows_due_and_pending_by_workspace_and_pages(
    start_master: MakeMaster,
) -> None:
    """GET /v1/wakes: pending and due ones without due=true, only due ones with it; paged by
    cursor; another workspace's key sees none; a bad cursor or limit is 400."""
    master = await start_master()
    await _away_and_woken(master, "s-list-due")
    client = await open_session(master, "s-list-pending")
    for i in range(3):
        await client.send(
            "session.revisit.request", {"revisit_id": f"p{i}", "at": at(3600), "reason": "<b>"}
        )
    await wait_until(
        lambda: _has(master.store.list_wakes("default", due_only=False, after=None, limit=9), 4)
    )
    status, body = await http(master, "GET", "/v1/wakes?due=true")
    assert status == 200, body
    assert [(w["session_id"], w["revisit_id"], w["state"]) for w in body["wakes"]] == [
        ("s-list-due", "r1", "due")
    ]
    assert body["wakes"][0]["webhook"] is None
    assert body["next_cursor"] is None
    seen: list[tuple[str, str]] = []
    cursor = ""
    while True:
        status, body = await http(master, "GET", f"/v1/wakes?limit=2{cursor}")
        assert status == 200, body
        seen += [(w["session_id"], w["state"]) for w in body["wakes"]]
        if body["next_cursor"] is None:
            break
        cursor = f"&cursor={body['next_cursor']}"
    assert sorted(seen) == [("s-list-due", "due")] + [("s-list-pending", "pending")] * 3
    status, body = await http(master, "GET", "/v1/wakes", token=OTHER_KEY)
    assert (status, body["wakes"]) == (200, [])
    for query in ("cursor=nope", "limit=501", "due=maybe"):
        status, body = await http(master, "GET", f"/v1/wakes?{query}")
        assert status == 400, (query, body)


async def test_a_request_whose_record_was_lost_is_scheduled_when_its_session_loads(
    tmp_path: Path,
) -> None:
    """The log holds a revisit request whose store record is gone (the store refused it, or
    the master died between the two writes): loading the session puts the record back and
    the wake comes."""
    path = tmp_path / "rawp.db"
    first = Master(settings_for(reattach_window_s=30.0), store=SqliteStore(path))
    await first.start()
    try:
        client = await open_session(first, "s-wake-repair")
        await client.send("session.revisit.request", {"revisit_id": "r1", "at": at(1.5)})
        await wait_until(
            lambda: first.store.list_wakes("default", due_only=False, after=None, limit=9)
        )
        await client.close()
    finally:
        await first.stop()
    store = SqliteStore(path)
    await store.start()
    await store.cancel_wake("s-wake-repair", "r1")  # the record lost, the request logged
    await store.close()
    second = Master(settings_for(reattach_window_s=30.0), store=SqliteStore(path))
    await second.start()
    try:
        status, _ = await http(second, "GET", "/v1/sessions/s-wake-repair")  # loads it
        assert status == 200
        await wait_until(lambda: _has(wakes_in(second, "s-wake-repair"), 1), timeout=5.0)
        await asyncio.sleep(0.5)
        assert len(await wakes_in(second, "s-wake-repair")) == 1
    finally:
        await second.stop()


async def test_a_fork_carries_its_pending_revisits(start_master: MakeMaster) -> None:
    """A fork's copied log holds the revisit as pending: the fork is rescheduling and is woken
    too, once, beside the source."""
    master = await start_master()
    client = await open_session(master, "s-wake-src")
    await client.send("session.revisit.request", {"revisit_id": "r1", "at": at(1.5)})
    await wait_until(lambda: master.hub.sessions["s-wake-src"].state.pending_revisits)
    async with aiohttp.ClientSession() as web_client:
        forked = await web_client.post(
            f"{master.http_url}/v1/sessions/s-wake-src/fork",
            json={"session_id": "s-wake-fork"},
            headers={"Authorization": f"Bearer {API_KEY}"},
        )
        assert forked.status == 201, await forked.text()
        assert (await forked.json())["session"]["status"] == "rescheduling"
    for sid in ("s-wake-src", "s-wake-fork"):
        await wait_until(lambda sid=sid: _has(wakes_in(master, sid), 1), timeout=5.0)
    await asyncio.sleep(0.5)
    assert len(await wakes_in(master, "s-wake-fork")) == 1
    assert len(await wakes_in(master, "s-wake-src")) == 1


async def test_a_pending_revisit_holds_the_session_past_its_reattach_window(
    make_master: Callable[..., Awaitable[Master]],
) -> None:
    """A detached client's window runs from its last wake, not its detach: the session
    outlives the 1 s window until the wake 2 s out, is woken, and ends a window later."""
    master = await make_master(reattach_window_s=1.0)
    client = await open_session(master, "s-wake-hold")
    await client.send("session.revisit.request", {"revisit_id": "r1", "at": at(2.0)})
    await wait_until(lambda: master.hub.sessions["s-wake-hold"].state.pending_revisits)
    await client.close()
    await detached(master, "s-wake-hold", client)
    await asyncio.sleep(1.5)  # past the window: still live, rescheduling
    status, body = await http(master, "GET", "/v1/sessions/s-wake-hold")
    assert (status, body["status"]) == (200, "rescheduling")
    await wait_until(lambda: _has(wakes_in(master, "s-wake-hold"), 1), timeout=5.0)

    async def ended() -> bool:
        header = await master.store.get_session("s-wake-hold")
        return header is None or header.archived

    await wait_until(ended, timeout=5.0)  # a window after the wake, it ends as before
