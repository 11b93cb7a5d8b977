"""REST writes of a node paused past ``--node-dead-after`` are fenced (docs/operations.md).

Two real ``rawp serve`` nodes on a real redis-server of the test's own (tests/faults/harness.py).
A REST append or rename is sent to node A over a raw socket, all but the last byte of its
body; A is SIGSTOPped while the request is in flight, node B sweeps it, the last byte goes
out and A is SIGCONTed. The request must be refused (503 ``store_unavailable``) and be
absent from the log and the header; sent again, A (under its new lease) serves it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from protocol import codec
from tests.faults.harness import API_KEY, FaultCluster, Node

__all__: list[str] = []

pytestmark = [
    pytest.mark.redis,
    pytest.mark.timeout(120),
    pytest.mark.asyncio(loop_scope="module"),
]


async def _http(node: Node, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.request(
            method,
            f"http://127.0.0.1:{node.http_port}{path}",
            json=body,
            headers={"Authorization": f"Bearer {API_KEY}"},
            timeout=aiohttp.ClientTimeout(total=15),
        ) as r,
    ):
        return r.status, await r.json(content_type=None)


async def _paused_mid_request(
    cluster: FaultCluster, victim: Node, method: str, path: str, body: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    """Send the request to ``victim`` but the body's last byte, pause the victim until it is
    swept, send the last byte, resume it; the status and JSON body of its answer."""
    data = json.dumps(body).encode()
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {API_KEY}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    ).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", victim.http_port)
    try:
        writer.write(head + data[:-1])
        await writer.drain()
        await asyncio.sleep(0.5)  # the node has the request and waits for the rest of it
        cluster.pause(victim)
        assert cluster.store is not None
        async with asyncio.timeout(30):  # the other node claims and sweeps the victim
            while (await cluster.store.node_ages()).get(victim.node_id, -1) != -1:
                await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # past the claim: the sweep itself
        writer.write(data[-1:])
        await writer.drain()
        cluster.resume(victim)
        async with asyncio.timeout(20):
            answer = await reader.read()
    finally:
        writer.close()
        cluster.resume(victim)
    status_line, _, rest = answer.partition(b"\r\n")
    headers, _, payload = rest.partition(b"\r\n\r\n")
    assert b"application/problem+json" in headers.lower() or int(status_line.split()[1]) < 400
    return int(status_line.split()[1]), json.loads(payload) if payload else {}


async def _new_session(node: Node, name: str) -> str:
    sid = f"s-{codec.new_message_id()}"
    status, _ = await _http(node, "POST", "/v1/sessions", {"session_id": sid, "name": name})
    assert status == 201
    return sid


async def _wait_serving(node: Node, sid: str) -> None:
    """Until the resumed node answers reads again (it re-registered under a new lease)."""
    async with asyncio.timeout(20):
        while (await _http(node, "GET", f"/v1/sessions/{sid}"))[0] != 200:
            await asyncio.sleep(0.1)


async def test_a_rest_append_in_flight_on_a_paused_node_is_refused(
    cluster: FaultCluster,
) -> None:
    """A user message POSTed to a node that is paused mid-request and swept is answered 503
    store_unavailable and never logged; sent again after the resume it is logged once."""
    victim, other = cluster.nodes
    sid = await _new_session(other, "fenced-append")
    frame = {"type": "user.message", "payload": {"text": "late"}, "message_id": "m-late"}
    status, problem = await _paused_mid_request(
        cluster, victim, "POST", f"/v1/sessions/{sid}/events", frame
    )
    assert status == 503, problem
    assert problem["code"] == "store_unavailable"
    assert "m-late" not in [e.message_id for e in await cluster.log(sid)]
    await _wait_serving(victim, sid)
    await asyncio.sleep(0.5)
    async with asyncio.timeout(20):  # its next lease is confirmed within a heartbeat or two
        while (await _http(victim, "POST", f"/v1/sessions/{sid}/events", frame))[0] == 503:
            await asyncio.sleep(0.2)
    assert [e.message_id for e in await cluster.log(sid)].count("m-late") == 1


async def test_a_rest_rename_in_flight_on_a_paused_node_is_refused(
    cluster: FaultCluster,
) -> None:
    """A rename PATCHed to a node that is paused mid-request and swept is answered 503
    store_unavailable: neither the log nor the header has the new name."""
    victim, other = cluster.nodes
    sid = await _new_session(other, "before")
    status, problem = await _paused_mid_request(
        cluster, victim, "PATCH", f"/v1/sessions/{sid}", {"name": "after-sweep"}
    )
    assert status == 503, problem
    assert problem["code"] == "store_unavailable"
    assert not [e for e in await cluster.log(sid) if e.type == "session.renamed"]
    assert cluster.store is not None
    header = await cluster.store.get_session(sid)
    assert header is not None
    assert header.name == "before"
    status, described = await _http(other, "GET", f"/v1/sessions/{sid}")
    assert (status, described["name"]) == (200, "before")
    await _wait_serving(victim, sid)
    async with asyncio.timeout(20):
        while (await _http(victim, "PATCH", f"/v1/sessions/{sid}", {"name": "again"}))[0] == 503:
            await asyncio.sleep(0.2)
    header = await cluster.store.get_session(sid)
    assert header is not None
    assert header.name == "again"
