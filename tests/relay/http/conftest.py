"""Fixtures for the HTTP API tests: a master per test and a small JSON client for it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from relay.server import Master
from tests.e2e.conftest import API_KEY, make_master, master

__all__ = ["Api", "Reply", "api", "make_master", "master", "wait_head"]


@dataclass
class Reply:
    """One HTTP answer: status, headers, decoded JSON body (or text)."""

    status: int
    headers: Any
    body: Any
    text: str

    @property
    def problem(self) -> dict[str, Any]:
        """The body, checked to be application/problem+json."""
        assert self.headers["Content-Type"].startswith("application/problem+json"), self.text
        assert isinstance(self.body, dict)
        assert self.body["status"] == self.status
        return self.body


class Api:
    """Requests to one master with a bearer credential (the test API key by default)."""

    def __init__(self, http: aiohttp.ClientSession, base: str) -> None:
        self.http = http
        self.base = base

    async def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        token: str | None = API_KEY,
        headers: dict[str, str] | None = None,
        data: bytes | None = None,
    ) -> Reply:
        """Send one request and read the whole answer."""
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        async with self.http.request(
            method, self.base + path, json=json, data=data, headers=sent
        ) as response:
            text = await response.text()
            body: Any = None
            if "json" in response.headers.get("Content-Type", ""):
                body = await response.json(content_type=None)
            return Reply(response.status, response.headers, body, text)

    async def get(self, path: str, **kw: Any) -> Reply:
        """GET."""
        return await self.call("GET", path, **kw)

    async def post(self, path: str, json: Any = None, **kw: Any) -> Reply:
        """POST a JSON body."""
        return await self.call("POST", path, json=json, **kw)

    async def patch(self, path: str, json: Any = None, **kw: Any) -> Reply:
        """PATCH a JSON body."""
        return await self.call("PATCH", path, json=json, **kw)

    async def delete(self, path: str, **kw: Any) -> Reply:
        """DELETE."""
        return await self.call("DELETE", path, **kw)

    async def create(self, session_id: str, **body: Any) -> Reply:
        """POST /v1/sessions for ``session_id``; asserts it was created."""
        reply = await self.post("/v1/sessions", {"session_id": session_id, **body})
        assert reply.status == 201, reply.text
        return reply


async def wait_head(api: Api, session_id: str, head: int) -> dict[str, Any]:
    """GET the session once its log reached ``head`` (WebSocket frames commit asynchronously)."""
    async with asyncio.timeout(5):
        while True:
            reply = await api.get(f"/v1/sessions/{session_id}")
            assert reply.status == 200, reply.text
            if reply.body["head_seq"] >= head:
                body: dict[str, Any] = reply.body
                return body
            await asyncio.sleep(0.01)


@pytest.fixture
async def api(master: Master) -> AsyncIterator[Api]:
    """A JSON client for the test master."""
    async with aiohttp.ClientSession() as http:
        yield Api(http, master.http_url)


@pytest.fixture
def api_for() -> Callable[[aiohttp.ClientSession, Master], Api]:
    """Build an Api for another master."""
    return lambda http, m: Api(http, m.http_url)
