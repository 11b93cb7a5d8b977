"""The HTTP port's own defences (issue 12; relay/http/hardening.py), tried with raw bytes.

Incomplete requests time out, every error is problem+json (aiohttp's own included), no
version banner, CSP ``connect-src`` limited to the master's own origins, and each input
issue 12 saw answered 500 with a traceback now gets a 4xx problem.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from aiohttp import web
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from relay.http.hardening import HardenedRunner, hide_server_version
from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.relay.http.conftest import Api
from tests.relay.http.test_sse import RawStream, auth


class RawAnswer:
    """One HTTP answer read off a raw socket."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def problem(self) -> dict[str, Any]:
        """The body, checked to be a problem+json document for this status."""
        assert self.headers["content-type"].startswith("application/problem+json"), self.body
        document: dict[str, Any] = json.loads(self.body)
        assert document["status"] == self.status
        return document


async def _connect(master: Master) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    url = urlsplit(master.http_url)
    return await asyncio.open_connection(url.hostname, url.port)


async def raw(master: Master, request: bytes) -> RawAnswer:
    """Send ``request`` as is and read one answer (Content-Length or to the close)."""
    reader, writer = await _connect(master)
    try:
        writer.write(request)
        await writer.drain()
        async with asyncio.timeout(10):
            status_line = await reader.readline()
            headers: dict[str, str] = {}
            while (line := (await reader.readline()).decode("latin-1").strip()) != "":
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = headers.get("content-length")
            body = await (reader.readexactly(int(length)) if length else reader.read())
        return RawAnswer(int(status_line.split()[1]), headers, body)
    finally:
        writer.close()


def _get(path: str, *extra: bytes) -> bytes:
    lines = [b"GET " + path.encode() + b" HTTP/1.1", b"Host: 127.0.0.1", *extra]
    return b"\r\n".join(lines) + b"\r\n\r\n"


async def _closed_by_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """Trickle one header byte at a time (slowloris) until the master hangs up."""
    async with asyncio.timeout(15):
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        while True:
            try:
                writer.write(b"X")
                await writer.drain()
            except ConnectionError:
                return True
            try:
                if await asyncio.wait_for(reader.read(1024), 0.2) == b"":
                    return True
            except TimeoutError:
                continue


async def test_slowloris_connections_are_closed(master: Master) -> None:
    """Connections that trickle their headers, or send nothing, are closed by the master."""
    trickling = [await _connect(master) for _ in range(50)]
    silent = [await _connect(master) for _ in range(50)]
    results = await asyncio.gather(*(_closed_by_server(r, w) for r, w in trickling))
    assert all(results)
    for reader, writer in silent:
        async with asyncio.timeout(15):
            assert await reader.read() == b""
        writer.close()
    for _, writer in trickling:
        writer.close()
    assert (await raw(master, _get("/healthz"))).status == 200  # the port still serves


async def test_a_body_that_never_arrives_is_cut(api: Api, master: Master) -> None:
    """A request whose body stops short is answered 408 problem+json, not held open."""
    await api.create("s-body")
    reader, writer = await _connect(master)
    writer.write(
        b"PATCH /v1/sessions/s-body HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + f"Authorization: Bearer {API_KEY}\r\n".encode()
        + b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"name":'
    )
    await writer.drain()
    async with asyncio.timeout(15):
        status_line = await reader.readline()
        rest = await reader.read()
    writer.close()
    assert status_line.split()[1] == b"408"
    assert b"application/problem+json" in rest


async def test_an_unexpected_error_is_a_problem_without_traceback() -> None:
    """A handler that fails unexpectedly answers 500 problem+json with no traceback in it."""

    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError("a bug")

    app = web.Application()
    app.router.add_get("/broken", broken)
    app.on_response_prepare.append(hide_server_version)
    runner = HardenedRunner(app, header_timeout_s=5.0, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /broken HTTP/1.1\r\nHost: x\r\nAccept: text/html\r\n\r\n")
        await writer.drain()
        async with asyncio.timeout(10):
            answer = await reader.read()
        writer.close()
    finally:
        await runner.cleanup()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split()[1] == b"500"
    assert b"application/problem+json" in head
    assert b"Server: rawp" in head
    assert json.loads(body)["code"] == "internal"
    assert b"Traceback" not in body
    assert b"a bug" not in body


async def test_a_stream_outlives_the_header_deadline(api: Api, make_master: Any) -> None:
    """An SSE stream whose request completed is not cut by the header deadline."""
    master = await make_master(heartbeat_interval_s=0.3, hello_timeout_s=0.5)
    await Api(api.http, master.http_url).create("s-long")
    stream = await RawStream.open(master, "/v1/sessions/s-long/events/stream", auth())
    async with asyncio.timeout(15):
        while len(stream.comments) < 6:  # ≥ 1.8 s of pings: more than three deadlines
            await _one_chunk(stream)
    await stream.close()


async def _one_chunk(stream: RawStream) -> None:
    chunk = await stream._chunks()
    assert chunk != "", "the stream ended"
    stream.comments += [line for line in chunk.split("\n") if line.startswith(":")]


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n",
        b"G@T / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/9.9\r\nHost: x\r\n\r\n",
        b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http at all\r\n\r\n",
    ],
    ids=["bad-header", "bad-method", "bad-version", "long-line", "tls-on-http"],
)
async def test_aiohttps_own_errors_are_problem_json(master: Master, request_bytes: bytes) -> None:
    """A request aiohttp's parser refuses is answered 4xx problem+json, Server: rawp."""
    answer = await raw(master, request_bytes)
    assert 400 <= answer.status < 500
    assert answer.problem["code"] == "bad_request"
    assert answer.headers["server"] == "rawp"
    assert b"Traceback" not in answer.body


async def test_unknown_methods_and_paths_are_problem_json(master: Master) -> None:
    """Unknown methods (the parser's 400), unrouted ones (405), unknown paths: problem+json."""
    unknown_method = await raw(master, b"BREW /v1/sessions HTTP/1.1\r\nHost: x\r\n\r\n")
    assert unknown_method.status == 400
    assert unknown_method.problem["code"] == "bad_request"
    not_routed = await raw(master, b"PUT /v1/sessions HTTP/1.1\r\nHost: x\r\n\r\n")
    assert not_routed.status == 405
    assert not_routed.problem["status"] == 405
    missing = await raw(master, _get("/nowhere"))
    assert missing.status == 404
    assert missing.problem["status"] == 404


async def test_no_version_banner(master: Master) -> None:
    """Every answer says Server: rawp — no aiohttp or Python version; the WebSocket port too."""
    for path in ("/healthz", "/", "/nowhere", "/v1/sessions"):
        answer = await raw(master, _get(path))
        assert answer.headers["server"] == "rawp", path
    with pytest.raises(InvalidStatus) as info:
        await connect(master.ws_url.replace("/v1/ws", "/elsewhere"))
    assert info.value.response.headers["Server"] == "rawp"


async def test_csp_connect_src_is_only_the_masters_own_origins(master: Master) -> None:
    """The dashboard may connect to its own origin and this master's WebSocket, nothing else."""
    own_host = f"Host: 127.0.0.1:{master.http_port}".encode()
    answer = await raw(master, _get("/").replace(b"Host: 127.0.0.1", own_host))
    assert answer.status == 200
    csp = dict(
        part.strip().split(" ", 1) for part in answer.headers["content-security-policy"].split(";")
    )
    assert csp["connect-src"] == f"'self' ws://127.0.0.1:{master.ws_port}"
    for host in (b"Host: evil.example; connect-src *", b"Host: evil.example"):
        forged = await raw(master, _get("/").replace(b"Host: 127.0.0.1", host))
        if forged.status == 200:
            assert "*" not in forged.headers["content-security-policy"]
            assert (
                ";"
                not in forged.headers["content-security-policy"]
                .split("connect-src")[1]
                .split(";")[0]
            )
        else:
            assert forged.problem["status"] == forged.status


# --- one test per 500 of issue 12 ----------------------------------------------------------

ROUTES = [
    ("GET", "/v1/whoami"),
    ("GET", "/v1/sessions"),
    ("POST", "/v1/sessions"),
    ("GET", "/v1/sessions/s-x"),
    ("PATCH", "/v1/sessions/s-x"),
    ("GET", "/v1/sessions/s-x/events"),
    ("POST", "/v1/sessions/s-x/events"),
    ("GET", "/v1/sessions/s-x/events/stream"),
    ("POST", "/v1/sessions/s-x/cancel"),
    ("POST", "/v1/sessions/s-x/tokens"),
    ("POST", "/v1/sessions/s-x/fork"),
    ("GET", "/v1/sessions/s-x/export"),
    ("DELETE", "/v1/session/s-x"),
    ("DELETE", "/v1/sessions/s-x"),
    ("DELETE", "/v1/tokens/" + "0" * 64),
]


@pytest.mark.parametrize(("method", "path"), ROUTES, ids=[f"{m} {p}" for m, p in ROUTES])
async def test_a_bearer_that_is_not_utf8_is_401(master: Master, method: str, path: str) -> None:
    """A Bearer value of non-UTF-8 bytes is an unknown credential on every route: 401."""
    request = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n".encode()
    answer = await raw(master, request + b"Authorization: Bearer \xff\xfe\xc3(\r\n\r\n")
    assert answer.status == 401
    assert answer.problem["code"] == "bad_credential"


async def test_two_origin_headers_on_the_websocket_handshake_are_403(master: Master) -> None:
    """A handshake with two Origin headers is refused 403 (a forgery), not 500."""
    url = urlsplit(master.ws_url)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    writer.write(
        b"GET /v1/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: rawp.1\r\n"
        + f"Origin: http://127.0.0.1:{master.http_port}\r\n".encode()
        + b"Origin: https://evil.example\r\n\r\n"
    )
    await writer.drain()
    async with asyncio.timeout(10):
        status_line = await reader.readline()
    writer.close()
    assert status_line.split()[1] == b"403"


@pytest.mark.parametrize("value", ["²", "١٢", "9" * 5000, "-1", "1e3"])
async def test_a_last_event_id_that_is_not_a_seq_is_400(
    api: Api, master: Master, value: str
) -> None:
    """Last-Event-ID must be ASCII digits ("²" passed str.isdigit and crashed int())."""
    await api.create("s-lei")
    answer = await raw(
        master,
        _get(
            "/v1/sessions/s-lei/events/stream",
            f"Authorization: Bearer {API_KEY}".encode(),
            b"Last-Event-ID: " + value.encode(),
        ),
    )
    assert answer.status == 400
    assert answer.problem["code"] == "invalid_query"


BODY_ROUTES = [
    ("POST", "/v1/sessions"),
    ("PATCH", "/v1/sessions/s-deep"),
    ("POST", "/v1/sessions/s-deep/events"),
    ("POST", "/v1/sessions/s-deep/cancel"),
    ("POST", "/v1/sessions/s-deep/tokens"),
    ("POST", "/v1/sessions/s-deep/fork"),
]


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES, ids=[p for _, p in BODY_ROUTES])
async def test_a_50k_deep_json_body_is_400(
    api: Api, master: Master, method: str, path: str
) -> None:
    """A body nested 50,000 deep is refused invalid_body on every route that reads one."""
    await api.create("s-deep")
    depth = 50_000
    for body in (b"[" * depth + b"]" * depth, b'{"payload":' * depth + b"1" + b"}" * depth):
        reply = await api.call(
            method, path, data=body, headers={"Content-Type": "application/json"}
        )
        assert reply.status == 400, reply.text
        assert reply.problem["code"] == "invalid_body"
    wrapped = b'{"type":"user.message","payload":{"text":"x","deep":' + b"[" * depth
    wrapped += b"]" * depth + b"}}"
    reply = await api.post("/v1/sessions/s-deep/events", data=wrapped)
    assert reply.status == 400, reply.text


@pytest.mark.parametrize("name", ["a" * 5000 + ".js", "a" * 300, "%2e%2e", "app.js%00", "."])
async def test_a_long_or_strange_static_path_is_404(master: Master, name: str) -> None:
    """Only the dashboard's own files are served; a 5,000-character name is a 404 problem."""
    answer = await raw(master, _get("/static/" + name))
    assert answer.status == 404
    assert answer.problem["code"] == "not_found"


async def test_a_strange_host_header_still_serves_the_dashboard(master: Master) -> None:
    """A Host header yarl cannot parse does not break / or /config.json."""
    for host in (b"Host: [::1", b"Host: a b", b"Host: \xc3\xa9", b"Host: " + b"x" * 300):
        for path in ("/", "/config.json"):
            answer = await raw(master, _get(path).replace(b"Host: 127.0.0.1", host))
            assert answer.status in (200, 400), (host, path, answer.body[:200])
            if answer.status == 400:
                assert answer.problem["code"] == "bad_request"


async def test_a_body_over_the_size_limit_is_a_413_problem(api: Api) -> None:
    """A body over aiohttp's limit (1 MiB) answers 413 problem+json."""
    reply = await api.post("/v1/sessions", data=b"[" + b"1," * (1 << 20) + b"1]")
    assert reply.status == 413
    assert reply.problem["status"] == 413


async def test_a_body_in_many_small_chunks_is_read_whole(api: Api, master: Master) -> None:
    """A REST body sent chunked, a few KB at a time with pauses, is read to its end."""
    await api.create("s-chunks")
    text = "x" * 600_000
    body = json.dumps({"type": "user.message", "payload": {"text": text}}).encode()

    async def trickle() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 8192):
            yield body[start : start + 8192]
            if start % (64 * 8192) == 0:
                await asyncio.sleep(0.01)

    headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
    url = f"{master.http_url}/v1/sessions/s-chunks/events"
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, data=trickle(), headers=headers) as r,
    ):
        assert r.status == 201, await r.text()
        assert (await r.json())["event"]["payload"]["text"] == text


async def test_the_routers_own_errors_carry_a_code(api: Api) -> None:
    """An unknown route is 404 problem+json with code not_found; a wrong method 405 with
    code method_not_allowed (every error body has a machine-readable code)."""
    missing = await api.get("/v1/nothing-here")
    assert missing.status == 404
    assert missing.headers["Content-Type"].startswith("application/problem+json")
    assert missing.body["code"] == "not_found"
    wrong = await api.call("PUT", "/v1/sessions")
    assert wrong.status == 405
    assert wrong.body["code"] == "method_not_allowed"


@pytest.mark.parametrize("path", ["/v1/sessions/bad%7Bid%7D", "/v1/sessions/a%7D/events"])
async def test_a_session_id_the_router_cannot_match_is_invalid_not_absent(
    api: Api, path: str
) -> None:
    """A path session id with { or } is 400 invalid_session_id like any id outside the
    grammar (notes §16.7), not the router's 404."""
    reply = await api.get(path)
    assert reply.status == 400
    assert reply.body["code"] == "invalid_session_id"
