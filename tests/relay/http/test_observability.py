"""``/metrics`` after real traffic, and the dashboard's static routes."""

from __future__ import annotations

from yarl import URL

from protocol.version import PROTOCOL_VERSION, VERSION
from relay.server import Master
from tests.e2e.conftest import API_KEY
from tests.relay.http.conftest import Api, wait_head
from tests.support.wire import Peer


async def test_metrics_cover_connections_sessions_frames_and_http(api: Api, master: Master) -> None:
    """The exposition names connections, sessions, frames, latencies, errors and HTTP."""
    client = await Peer.open(master.ws_url, "s-met", token=API_KEY, create=True)
    await client.send("user.message", {"text": "a client may not"})  # refused: direction
    await client.recv_type("session.error")
    await api.post("/v1/sessions/s-met/events", {"type": "user.message", "payload": {"text": "x"}})
    await wait_head(api, "s-met", 2)
    await api.get("/v1/sessions/s-none")
    reply = await api.get("/metrics", token=None)
    assert reply.status == 200
    text = reply.text
    for needle in (
        'rawp_connections{role="client"} 1.0',
        "rawp_sessions_loaded 1.0",
        'rawp_sessions_by_status{status="idle"} 1.0',
        "rawp_sessions_client_attached 1.0",
        'rawp_participants_attached{role="client"} 1.0',
        "rawp_frames_in_total",
        "rawp_frames_out_total",
        "rawp_store_append_seconds_count",
        "rawp_relay_seconds",
        'rawp_errors_total{code="direction"} 1.0',
        'rawp_http_requests_total{method="POST",route="/v1/sessions/{session_id}/events",'
        'status="201"} 1.0',
        'rawp_http_problems_total{code="not_found"} 1.0',
        "rawp_http_request_seconds_bucket",
        "rawp_sse_streams 0.0",
        "rawp_tokens_issued_total 0.0",
        "rawp_history_truncations_total 0.0",
    ):
        assert needle in text, needle
    await client.close()


async def test_dashboard_page_config_and_static_files(api: Api, master: Master) -> None:
    """/ serves the page with a strict CSP, /config.json the WebSocket URL, /static/ the bundle."""
    page = await api.get("/", token=None)
    assert page.status == 200
    assert page.headers["Content-Type"].startswith("text/html")
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self';" in csp
    assert "unsafe" not in csp
    ws = URL(master.ws_url)
    assert f"connect-src 'self' ws://{ws.raw_authority};" in csp  # no other origin
    assert '<script type="module" src="/static/dashboard.js">' in page.text
    config = await api.get("/config.json", token=None)
    assert config.body == {
        "ws_url": master.ws_url,
        "protocol_version": "1.0.2",
        "subprotocol": "rawp.1",
    }
    module = await api.get("/static/dashboard.js", token=None)
    assert module.status == 200
    assert "javascript" in module.headers["Content-Type"]
    assert module.headers["X-Content-Type-Options"] == "nosniff"
    css = await api.get("/static/dashboard-style.css", token=None)
    assert css.headers["Content-Type"].startswith("text/css")
    missing = await api.get("/static/nope.js", token=None)
    assert missing.status == 404
    assert missing.problem["status"] == 404
    escape = await api.get("/static/../auth.py", token=None)
    assert escape.status in (403, 404)


async def test_unknown_routes_and_methods_are_problems(api: Api) -> None:
    """aiohttp's own 404 and 405 answers are problem+json too."""
    nowhere = await api.get("/v1/nowhere")
    assert nowhere.status == 404
    assert nowhere.problem["title"] == "Not Found"
    wrong = await api.call("PUT", "/v1/sessions")
    assert wrong.status == 405
    assert wrong.problem["status"] == 405


async def test_the_build_version_is_in_healthz_and_metrics(api: Api) -> None:
    """/healthz names this build's version; /metrics has it as rawp_build_info, labelled."""
    health = await api.get("/healthz", token=None)
    assert health.body == {"status": "ok", "version": VERSION}
    metrics = await api.get("/metrics", token=None)
    line = f'rawp_build_info{{protocol="{PROTOCOL_VERSION}",version="{VERSION}"}} 1.0'
    assert line in metrics.text
