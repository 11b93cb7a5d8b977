"""Paging parameters no store can hold (``after_seq=10^30``, a huge or negative ``limit``,
cursors that are not numbers) answer 400 ``invalid_query`` problem bodies on every HTTP read —
the log page, the SSE stream, the AG-UI stream, the session and wake lists — never a store
error, on memory, SQLite and Redis."""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from relay.server import Master
from tests.e2e.conftest import test_settings as settings_for
from tests.relay.http.conftest import Api
from tests.support.redis_server import RedisServer

HUGE = "1" + "0" * 30  # 10^30: past SQLite's INTEGER and a Redis stream id
PAST_INT64 = str(2**63)

EVENTS = "/v1/sessions/s-page/events"
STREAM = "/v1/sessions/s-page/events/stream"
AGUI = "/v1/sessions/s-page/ag-ui"

REFUSED = [
    f"{EVENTS}?after_seq={HUGE}",
    f"{EVENTS}?after_seq={PAST_INT64}",
    f"{EVENTS}?before_seq={HUGE}",
    f"{EVENTS}?order=asc&after_seq={HUGE}",
    f"{EVENTS}?after_seq=-1",
    f"{EVENTS}?after_seq=abc",
    f"{EVENTS}?after_seq=1e3",
    f"{EVENTS}?after_seq=%EF%BC%91",  # a full-width digit, which int() would take
    f"{EVENTS}?after_seq=1_0",
    f"{EVENTS}?after_seq=%201",
    f"{EVENTS}?limit={HUGE}",
    f"{EVENTS}?limit=-5",
    f"{EVENTS}?limit=0",
    f"{EVENTS}?limit={'9' * 5000}",  # past int()'s digit limit too
    f"{STREAM}?after_seq={HUGE}",
    f"{STREAM}?after_seq=-3",
    f"{STREAM}?after_seq=x",
    "/v1/sessions?limit=-1",
    f"/v1/sessions?limit={HUGE}",
    "/v1/sessions?limit=ten",
    "/v1/sessions?after=%00x",
    "/v1/wakes?limit=-1",
    f"/v1/wakes?limit={HUGE}",
    "/v1/wakes?cursor=!!!",
    "/v1/wakes?cursor=WzEsIDJd",  # [1, 2]: base64 JSON, not the cursor's shape
    "/v1/wakes?cursor=WyJhIl0",  # ["a"]
]


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def api_on(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Api]:
    """A JSON client for a master on each store, holding session ``s-page``."""
    store = "memory"
    if request.param == "sqlite":
        store = f"sqlite:{tmp_path / 'rawp.db'}"
    elif request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        with contextlib.closing(server.client()) as c:
            c.flushall()
        store = server.url
    master = Master(settings_for(store=store))
    await master.start()
    try:
        async with aiohttp.ClientSession() as http:
            api = Api(http, master.http_url)
            await api.create("s-page")
            yield api
    finally:
        await master.stop()


async def _is_query_problem(api: Api, path: str, headers: dict[str, str] | None = None) -> None:
    reply = await api.get(path, headers=headers)
    assert reply.status == 400, (path[:80], reply.status, reply.text[:300])
    assert reply.problem["code"] == "invalid_query", reply.text


async def test_paging_parameters_out_of_range_are_400_on_every_read(api_on: Api) -> None:
    """Every out-of-range or non-numeric paging parameter is a 400 invalid_query problem."""
    for path in REFUSED:
        await _is_query_problem(api_on, path)
    # The session still answers, and the largest seq a store holds is a valid bound.
    page = await api_on.get(f"{EVENTS}?order=asc&after_seq=0")
    assert page.status == 200, page.text
    top = await api_on.get(f"{EVENTS}?after_seq={2**63 - 1}&before_seq={2**63 - 1}")
    assert top.status == 200, top.text
    assert top.body["events"] == []
    # A cursor of the right shape this API never gave (control characters, a long id) is a
    # page (maybe empty) or a 400, never a store error.
    for after in (["\u0000x", ""], ["s" * 4000, "w" * 4000]):
        cursor = base64.urlsafe_b64encode(json.dumps(after).encode()).decode().rstrip("=")
        odd = await api_on.get(f"/v1/wakes?cursor={cursor}")
        assert odd.status in (200, 400), (odd.status, odd.text[:300])


@pytest.mark.parametrize("value", [HUGE, PAST_INT64, "-1", "x", "1.x", "%31"])
async def test_a_last_event_id_no_store_can_hold_is_400(api_on: Api, value: str) -> None:
    """An SSE or AG-UI Last-Event-ID that is not a seq a store can hold is 400 invalid_query."""
    await _is_query_problem(api_on, STREAM, {"Last-Event-ID": value})
    await _is_query_problem(api_on, AGUI, {"Last-Event-ID": value})
