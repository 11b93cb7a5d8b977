"""Identical reads in flight share one round trip; a write makes later reads fresh."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from protocol.errors import BadCredential
from relay.auth import Authenticator
from relay.store.redis import RedisStore
from relay.store.redis.sharing import SharedReads
from tests.contract.test_store_contract import header
from tests.support.redis_server import RedisServer

__all__: list[str] = []


async def test_reads_of_one_key_in_flight_share_one_fetch() -> None:
    """Ten reads of one key while its fetch is out: one fetch, ten answers; another key and a
    read after the landing fetch again."""
    reads: SharedReads[str] = SharedReads()
    fetched: list[str] = []
    gate = asyncio.Event()

    async def fetch(key: str) -> str:
        fetched.append(key)
        await gate.wait()
        return f"value of {key}"

    many = [asyncio.ensure_future(reads.read("a", lambda: fetch("a"))) for _ in range(10)]
    other = asyncio.ensure_future(reads.read("b", lambda: fetch("b")))
    await asyncio.sleep(0)
    gate.set()
    assert await asyncio.gather(*many) == ["value of a"] * 10
    assert await other == "value of b"
    assert fetched == ["a", "b"]
    assert await reads.read("a", lambda: fetch("a")) == "value of a"
    assert fetched == ["a", "b", "a"]


async def test_a_cancelled_reader_leaves_the_read_to_the_others_and_a_failure_reaches_all() -> None:
    """One caller cancelled does not cancel the shared fetch; a failed fetch raises in every
    caller, and the next read fetches again."""
    reads: SharedReads[int] = SharedReads()
    gate = asyncio.Event()
    calls = 0

    async def fetch() -> int:
        nonlocal calls
        calls += 1
        await gate.wait()
        if calls == 1:
            return 1
        raise ConnectionError("store down")

    first = asyncio.ensure_future(reads.read("k", fetch))
    second = asyncio.ensure_future(reads.read("k", fetch))
    await asyncio.sleep(0)
    first.cancel()
    gate.set()
    assert await second == 1
    gate.clear()
    failing = [asyncio.ensure_future(reads.read("k", fetch)) for _ in range(3)]
    await asyncio.sleep(0)
    gate.set()
    for task in failing:
        with pytest.raises(ConnectionError):
            await task
    assert calls == 2


async def test_forget_makes_the_reads_after_a_write_fetch_anew() -> None:
    """A read that starts after :meth:`SharedReads.forget` sends its own, though one from
    before is still on its way."""
    reads: SharedReads[str] = SharedReads()
    gate = asyncio.Event()
    values = iter(["before the write", "after the write"])

    async def fetch() -> str:
        value = next(values)
        await gate.wait()
        return value

    early = asyncio.ensure_future(reads.read("k", fetch))
    await asyncio.sleep(0)
    reads.forget("k")
    late = asyncio.ensure_future(reads.read("k", fetch))
    await asyncio.sleep(0)
    gate.set()
    assert await early == "before the write"
    assert await late == "after the write"


@pytest.mark.redis
async def test_this_nodes_writes_are_read_though_an_older_read_is_still_on_its_way(
    redis_server: RedisServer,
) -> None:
    """Hellos with one token at once share their credential read. A read sent before this
    node revoked the token (or renamed a session) and still on its way when the write is
    done is not what the next hello (attach) gets: it reads anew, revoked (renamed)."""
    store = RedisStore(redis_server.url, node_id="N1")
    try:
        auth = Authenticator(store)
        h = header()
        await store.create_session(h)
        token, record = await auth.issue_token(h.workspace, h.session_id)
        principals = await asyncio.gather(*(auth.authenticate(token) for _ in range(50)))
        assert {p.credential_id for p in principals} == {record.digest}

        client = store._client
        get, hgetall = client.get, client.hgetall
        landing = asyncio.Event()

        async def answered_late(command: Any, *args: Any) -> Any:
            answer = await command(*args)  # read now, before the write below
            await landing.wait()  # its answer held on its way
            return answer

        client.get = lambda *a: answered_late(get, *a)
        client.hgetall = lambda *a: answered_late(hgetall, *a)
        early_hello = asyncio.ensure_future(auth.authenticate(token))
        early_attach = asyncio.ensure_future(store.get_session(h.session_id))
        await asyncio.sleep(0.05)  # both reads answered by Redis, held on their way
        client.get, client.hgetall = get, hgetall
        record.revoked = True
        await store.put_credential(record)  # as a revocation on this node writes it
        await store.rename_session(h.session_id, "renamed")
        later_hello = asyncio.ensure_future(auth.authenticate(token))
        later_attach = asyncio.ensure_future(store.get_session(h.session_id))
        landing.set()  # (were they joined to the early reads, they would get their answers)
        with pytest.raises(BadCredential, match="revoked"):
            await later_hello
        renamed = await later_attach
        assert renamed is not None
        assert renamed.name == "renamed"
        assert (await early_hello).credential_id == record.digest  # read before: accepted
        early = await early_attach
        assert early is not None
        assert early.name == h.name
    finally:
        await store.close()
