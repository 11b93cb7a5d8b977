"""An HTTP fuzz run against a live master (issue 12): no 5xx, no traceback in the log.

A master runs on an event loop in a background thread; Hypothesis draws requests — every
route template with fuzzed path segments, unknown paths, methods, query parameters,
credentials (valid, foreign, garbage, non-UTF-8), headers (``Last-Event-ID``, ``Origin``,
``Content-Type``, ``Host``) and bodies (JSON near the real shapes, deep JSON, random bytes)
— and sends each over a real socket with the standard library's HTTP client. Every answer
must be below 500; an error answer must be problem+json; and nothing may be logged at error
level or with a traceback (structlog and the standard library's loggers are both watched).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relay.server import Master
from tests.e2e.conftest import API_KEY, OTHER_KEY
from tests.e2e.conftest import test_settings as settings_for

SID = "s-fuzz-http"
TEMPLATES = [
    ("GET", "/v1/whoami"),
    ("GET", "/v1/sessions"),
    ("POST", "/v1/sessions"),
    ("GET", "/v1/sessions/{s}"),
    ("PATCH", "/v1/sessions/{s}"),
    ("GET", "/v1/sessions/{s}/events"),
    ("POST", "/v1/sessions/{s}/events"),
    ("GET", "/v1/sessions/{s}/events/stream"),
    ("POST", "/v1/sessions/{s}/cancel"),
    ("POST", "/v1/sessions/{s}/tokens"),
    ("POST", "/v1/sessions/{s}/fork"),
    ("GET", "/v1/sessions/{s}/export"),
    ("DELETE", "/v1/session/{s}"),
    ("DELETE", "/v1/sessions/{s}"),
    ("DELETE", "/v1/tokens/{s}"),
    ("GET", "/static/{s}"),
    ("GET", "/"),
    ("GET", "/config.json"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
]
QUERY_KEYS = [
    "after_seq",
    "before_seq",
    "limit",
    "order",
    "format",
    "if_idle",
    "if_absent",
    "after",
    "access_token",
    "x",
]
BODY_KEYS = [
    "session_id",
    "name",
    "agent_id",
    "parent_session_id",
    "token",
    "grants",
    "ttl_s",
    "at_seq",
    "type",
    "payload",
    "message_id",
    "metadata",
    "turn_id",
    "text",
    "interaction_id",
    "response",
]
TYPES = ["user.message", "control.cancel", "control.interaction.response", "session.error", "x.y"]


class LiveMaster:
    """A master serving from a background thread's event loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.master = Master(settings_for(hello_timeout_s=5.0))
        self.run(self.master.start())
        url = urlsplit(self.master.http_url)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 80
        token, _ = self.run(self.master.hub.auth.issue_token("default", SID, grants=frozenset()))
        self.token = token

    def run(self, coro: Any) -> Any:
        """Run a coroutine on the master's loop and wait for it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def stop(self) -> None:
        """Stop the master and its loop."""
        self.run(self.master.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class Watch(logging.Handler):
    """Collects standard-library records at error level or with a traceback."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.bad: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info:
            self.bad.append(f"{record.name}: {record.getMessage()}")


@pytest.fixture(scope="module")
def live() -> Iterator[LiveMaster]:
    """One master for the whole fuzz run, with the fuzz session created."""
    master = LiveMaster()
    _send(
        master,
        "POST",
        "/v1/sessions",
        {"Authorization": f"Bearer {API_KEY}"},
        json.dumps({"session_id": SID}).encode(),
    )
    yield master
    master.stop()


def _send(
    live: LiveMaster, method: str, target: str, headers: dict[str, bytes | str], body: bytes | None
) -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection(live.host, live.port, timeout=10)
    try:
        conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        if "Host" not in headers:
            conn.putheader("Host", f"{live.host}:{live.port}")
        for name, value in headers.items():
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        kind = response.getheader("Content-Type", "")
        # An SSE stream that was granted never ends: its status line is the answer.
        data = b"" if kind.startswith("text/event-stream") else response.read()
        return response.status, kind, data
    finally:
        conn.close()


_segment = st.one_of(
    st.sampled_from([SID, "s-absent", "app.js", "0" * 64, "%7B", "", "a" * 5000]),
    st.text(max_size=40).map(lambda t: quote(t, safe="")),
)
_text = st.text(max_size=30)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _text,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(BODY_KEYS) | _text, inner, max_size=5)
    ),
    max_leaves=20,
)
_body = st.one_of(
    st.none(),
    st.builds(
        lambda d: json.dumps(d).encode(),
        st.fixed_dictionaries(
            {},
            optional={
                "session_id": _text | st.just(SID),
                "name": _text,
                "type": st.sampled_from(TYPES) | _text,
                "payload": _json,
                "grants": st.lists(st.sampled_from(["client", "delete", "x"]) | _text),
                "ttl_s": st.integers() | st.floats(allow_nan=False),
                "at_seq": st.integers(),
                "turn_id": _text,
                "parent_session_id": _text,
                "metadata": _json,
            },
        ),
    ),
    _json.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=200),
    st.integers(1, 20_000).map(lambda n: b"[" * n + b"]" * n),
)
_header_value = st.one_of(
    _text.filter(lambda t: "\r" not in t and "\n" not in t).map(lambda t: t.encode("utf-8")),
    st.binary(max_size=30).filter(lambda b: b"\r" not in b and b"\n" not in b and b"\0" not in b),
)
_auth = st.one_of(
    st.none(),
    st.sampled_from([f"Bearer {API_KEY}", f"Bearer {OTHER_KEY}", "Bearer ", "Basic x"]),
    _header_value.map(lambda v: b"Bearer " + v),
)


@st.composite
def requests(
    draw: st.DrawFn, live: LiveMaster
) -> tuple[str, str, dict[str, bytes | str], bytes | None]:
    """One request: method, target, headers, body."""
    method, template = draw(st.sampled_from(TEMPLATES))
    if draw(st.integers(0, 9)) == 0:
        method = draw(st.sampled_from(["PUT", "HEAD", "OPTIONS", "TRACE", "BREW", "get"]))
    path = template.replace("{s}", draw(_segment))
    if draw(st.integers(0, 9)) == 0:
        path = "/" + draw(_segment)
    query = draw(st.dictionaries(st.sampled_from(QUERY_KEYS), _text, max_size=3))
    target = path + ("?" + urlencode(query) if query else "")
    headers: dict[str, bytes | str] = {}
    auth = draw(_auth | st.just(f"Bearer {live.token}"))
    if auth is not None:
        headers["Authorization"] = auth
    for name in ("Last-Event-ID", "Origin", "Content-Type", "Host", "Accept"):
        if draw(st.integers(0, 3)) == 0:
            headers[name] = draw(_header_value)
    return method, target, headers, draw(_body)


@pytest.mark.timeout(300)
def test_fuzzed_http_requests_never_get_a_5xx_or_a_traceback(live: LiveMaster) -> None:
    """Hundreds of drawn requests: every answer < 500, errors are problem+json, no traceback."""
    watch = Watch()
    root = logging.getLogger()
    root.addHandler(watch)
    answers: dict[int, int] = {}

    @settings(
        max_examples=400,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )
    @given(request=requests(live))
    def one(request: tuple[str, str, dict[str, bytes | str], bytes | None]) -> None:
        method, target, headers, body = request
        status, kind, data = _send(live, method, target, headers, body)
        answers[status] = answers.get(status, 0) + 1
        assert status < 500, (request, status, data[:300])
        if status >= 400 and method != "HEAD":
            assert kind.startswith("application/problem+json"), (request, status, kind, data[:200])
        assert b"Traceback" not in data

    try:
        with structlog.testing.capture_logs() as logs:
            one()
    finally:
        root.removeHandler(watch)
    bad = [e for e in logs if e.get("log_level") in ("error", "critical") or "exc_info" in e]
    assert bad == [], bad[:5]
    assert watch.bad == [], watch.bad[:5]
    assert len(answers) > 3, answers  # the run reached many kinds of answer
