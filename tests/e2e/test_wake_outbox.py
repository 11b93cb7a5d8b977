"""The wake webhook's durable outbox (notes §17.5) against a real local HTTP receiver: a wake
whose client is away is POSTed once, signed; an attached client's is not; a 503 is tried
again; a master killed mid-POST posts it once after its restart."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from relay.server import Master
from relay.store.sqlite import SqliteStore
from tests.e2e.conftest import API_KEY
from tests.e2e.conftest import test_settings as settings_for
from tests.e2e.util import http, wait_until
from tests.support.masters import MasterProcess
from tests.support.wire import Peer

__all__: list[str] = []

SECRET = "wh-secret-✓"


def at(seconds: float) -> str:
    """An RFC 3339 time ``seconds`` from now."""
    moment = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)
    return moment.isoformat().replace("+00:00", "Z")


@dataclass
class Receiver:
    """A webhook receiver on 127.0.0.1: records every request; answers per ``answers``
    (a status, or "hang"), then 200."""

    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    answered: list[int] = field(default_factory=list)
    answers: list[int | str] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.requests.append({"headers": dict(request.headers), "body": body})
        answer = self.answers.pop(0) if self.answers else 200
        if answer == "hang":
            await asyncio.Event().wait()  # until the master's connection goes
        assert isinstance(answer, int)
        self.answered.append(answer)
        return web.Response(status=answer)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    """A running receiver."""
    got = Receiver()
    app = web.Application()
    app.router.add_post("/hook", got.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    got.url = f"http://127.0.0.1:{port}/hook"
    yield got
    await runner.cleanup()


async def master_with_webhook(receiver: Receiver, tmp_path: Path) -> Master:
    """An in-process master on SQLite whose wakes are posted to ``receiver``."""
    settings = settings_for(
        reattach_window_s=30.0, wake_webhook=receiver.url, wake_webhook_secret=SECRET
    )
    master = Master(settings, store=SqliteStore(tmp_path / "rawp.db"))
    await master.start()
    return master


async def away(ws_url: str, session_id: str, *, seconds: float = 1.0) -> None:
    """A client asks to be woken in ``seconds`` and leaves."""
    client = await Peer.open(ws_url, session_id, token=API_KEY, create=True)
    await client.send("session.revisit.request", {"revisit_id": "r1", "at": at(seconds)})
    await asyncio.sleep(0.2)  # logged (its record put) before the socket goes
    await client.close()


async def test_a_wake_of_a_client_away_is_posted_once_and_signed(
    receiver: Receiver, tmp_path: Path
) -> None:
    """One POST with the wake's fields, an HMAC-SHA256 signature that checks under the
    secret; the listing then says the webhook was sent."""
    master = await master_with_webhook(receiver, tmp_path)
    try:
        await away(master.ws_url, "s-hook")
        await wait_until(lambda: receiver.answered, timeout=5.0)
        await asyncio.sleep(0.6)  # later sweeps post nothing more
        assert len(receiver.requests) == 1
        request = receiver.requests[0]
        body = json.loads(request["body"])
        assert (body["session_id"], body["revisit_id"]) == ("s-hook", "r1")
        wake = [
            json.loads(e.data)
            for e in await master.store.read("s-hook")
            if e.type == "session.wake"
        ]
        assert body["wake_seq"] == wake[0]["seq"]
        stamp, _, mac = request["headers"]["RAWP-Signature"].partition(",v1=")
        expected = hmac.new(
            SECRET.encode(),
            stamp.removeprefix("t=").encode() + b"." + request["body"],
            hashlib.sha256,
        ).hexdigest()
        assert hmac.compare_digest(mac, expected)
        status, page = await http(master, "GET", "/v1/wakes?due=true")
        assert status == 200
        (listed,) = page["wakes"]
        assert listed["webhook"]["state"] == "sent"
        assert listed["webhook"]["attempts"] == 1
    finally:
        await master.stop()


async def test_an_attached_clients_wake_is_not_posted(receiver: Receiver, tmp_path: Path) -> None:
    """The webhook is for clients that are away: an attached client's wake posts nothing."""
    master = await master_with_webhook(receiver, tmp_path)
    try:
        client = await Peer.open(master.ws_url, "s-hook-here", token=API_KEY, create=True)
        await client.send("session.revisit.request", {"revisit_id": "r1", "at": at(0.5)})
        await client.recv_type("session.wake")
        await asyncio.sleep(1.0)
        assert receiver.requests == []
    finally:
        await master.stop()


async def test_a_refused_post_is_tried_again(receiver: Receiver, tmp_path: Path) -> None:
    """A 503 is retried with backoff: the second attempt delivers, and nothing follows."""
    receiver.answers = [503]
    master = await master_with_webhook(receiver, tmp_path)
    try:
        await away(master.ws_url, "s-hook-retry")
        await wait_until(lambda: receiver.answered == [503, 200], timeout=8.0)
        await asyncio.sleep(0.6)
        assert receiver.answered == [503, 200]
        status, page = await http(master, "GET", "/v1/wakes?due=true")
        assert status == 200
        assert page["wakes"][0]["webhook"]["state"] == "sent"
        assert page["wakes"][0]["webhook"]["attempts"] == 2
    finally:
        await master.stop()


async def test_a_master_killed_mid_post_posts_once_after_restart(
    receiver: Receiver, tmp_path: Path
) -> None:
    """``rawp serve`` on SQLite is SIGKILLed while its POST of a due wake waits for an answer;
    restarted, it posts that wake once (and logs it once)."""
    receiver.answers = ["hang"]
    store = f"sqlite:{tmp_path / 'rawp.db'}"

    def node(name: str) -> MasterProcess:
        master = MasterProcess(name, store, api_key=API_KEY, log_dir=tmp_path, reattach_window=30)
        master.argv += ["--wake-webhook", receiver.url, "--wake-webhook-secret", SECRET]
        return master

    first = node("first")
    first.spawn()
    await asyncio.to_thread(first.wait_ready)
    second: MasterProcess | None = None
    try:
        await away(first.ws_url, "s-hook-kill")
        await wait_until(lambda: receiver.requests, timeout=5.0)  # the POST is in flight
        first.kill()
        assert receiver.answered == []
        second = node("second")
        second.spawn()
        await asyncio.to_thread(second.wait_ready)
        # At once, not after the dead claim's lease (12 s): a restarted sole owner takes its
        # claims back.
        await wait_until(lambda: receiver.answered, timeout=5.0)
        await asyncio.sleep(0.8)
        assert receiver.answered == [200]  # posted once after the restart
        bodies = {r["body"] for r in receiver.requests}
        assert len(bodies) == 1  # the same wake both times
        client = await Peer.open(second.ws_url, "s-hook-kill", token=API_KEY)
        await client.recv_type("session.wake")
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            try:
                frame = await client.recv(0.2)
            except TimeoutError:
                continue
            assert frame["type"] != "session.wake"
    finally:
        first.stop()
        if second is not None:
            await asyncio.to_thread(second.stop)
    check = SqliteStore(tmp_path / "rawp.db")
    await check.start()
    try:
        entries = await check.read("s-hook-kill")
        assert [e.type for e in entries].count("session.wake") == 1
    finally:
        await check.close()
