"""The API's outermost middleware: problem+json for :class:`ApiError`, and HTTP metrics.

Routes raise :class:`ApiError` for every refusal they decide themselves; RAWP errors
(``BadCredential`` → 401, ``Forbidden`` → 403, …) are turned into problems by
:func:`relay.http.problems.problem_middleware`, which sits inside this one. Here every
answer is counted by route template and status, 401 answers get ``WWW-Authenticate``, and
scrape-time gauges describe the sessions loaded on this node (notes §10 ``/metrics``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from protocol import codec
from protocol.errors import StoreError
from protocol.state import status

from ..faults import reported
from .problems import problem, problem_for_http_error

if TYPE_CHECKING:
    from ..hub import Hub

__all__ = ["HTTP_METRICS", "ApiError", "HttpMetrics", "api_middleware", "store_unavailable"]

_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)
_STREAMING: Final = frozenset({"/v1/sessions/{session_id}/events/stream"})


class ApiError(Exception):
    """A refusal decided by a route: answered as problem+json with ``code``."""

    def __init__(self, status: int, detail: str, *, code: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.code = code
        self.extra = extra

    def response(self) -> web.Response:
        """The problem+json answer."""
        return problem(self.status, self.detail, code=self.code, **self.extra)


def store_unavailable(exc: StoreError) -> ApiError:
    """The 503 ``store_unavailable`` for a store failure under a request: its kind for the
    caller (:func:`relay.faults.shown`), the store's own text for the log."""
    return ApiError(503, reported(exc), code="store_unavailable")


class _SessionsCollector(Collector):
    """Gauges computed at scrape time from the sessions loaded on this node."""

    def __init__(self, hub: Hub) -> None:
        self._hub = hub

    def collect(self) -> Iterator[GaugeMetricFamily]:
        by_status = GaugeMetricFamily(
            "rawp_sessions_by_status", "Loaded sessions by derived status", labels=["status"]
        )
        counts = dict.fromkeys(("idle", "running", "requires_action", "terminated"), 0)
        attached = 0
        participants = {"client": 0, "edge": 0}
        for session in list(self._hub.sessions.values()):
            counts[status(session.state)] += 1
            for p in session.participants.values():
                participants[p.role] += 1
            attached += any(p.role == "client" for p in session.participants.values())
        for name, value in counts.items():
            by_status.add_metric([name], value)
        yield by_status
        yield GaugeMetricFamily(
            "rawp_sessions_client_attached",
            "Loaded sessions whose client is attached (ATTACHED)",
            value=attached,
        )
        per_role = GaugeMetricFamily(
            "rawp_participants_attached", "Attached participants by role", labels=["role"]
        )
        for role, value in participants.items():
            per_role.add_metric([role], value)
        yield per_role


class HttpMetrics:
    """The HTTP side's metrics, registered on the hub's registry (one per master)."""

    def __init__(self, hub: Hub) -> None:
        r = hub.metrics.registry
        self.requests = Counter(
            "rawp_http_requests",
            "HTTP requests answered, by route template, method and status",
            ["route", "method", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "rawp_http_request_seconds",
            "HTTP request latency by route template (streams excluded)",
            ["route"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.problems = Counter(
            "rawp_http_problems", "problem+json answers by code", ["code"], registry=r
        )
        self.streams = Gauge("rawp_sse_streams", "Open SSE event streams", registry=r)
        self.sse_events = Counter("rawp_sse_events", "Events written to SSE streams", registry=r)
        self.sessions_created = Counter(
            "rawp_sessions_created", "Sessions created over HTTP (forks included)", registry=r
        )
        self.tokens_issued = Counter("rawp_tokens_issued", "Session tokens issued", registry=r)
        self.tokens_revoked = Counter("rawp_tokens_revoked", "Session tokens revoked", registry=r)
        r.register(_SessionsCollector(hub))


HTTP_METRICS: web.AppKey[HttpMetrics] = web.AppKey("http_metrics", HttpMetrics)


@web.middleware
async def api_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """Answer :class:`ApiError` as problem+json; count and time every request."""
    started = time.perf_counter()
    try:
        response: web.StreamResponse = await handler(request)
    except ApiError as exc:
        response = exc.response()
    except web.HTTPException as exc:
        # Raised by aiohttp's router (404/405) or a handler; problem_middleware answers it
        # only for the routes it wraps, so answer it here the same way.
        if exc.status < 400:
            raise
        response = problem_for_http_error(request, exc)
    _observe(request, response, time.perf_counter() - started)
    return response


def _observe(request: web.Request, response: web.StreamResponse, elapsed: float) -> None:
    metrics = request.app.get(HTTP_METRICS)
    if response.status == 401 and "WWW-Authenticate" not in response.headers:
        response.headers["WWW-Authenticate"] = 'Bearer realm="rawp"'
    if metrics is None:
        return
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "unmatched"
    metrics.requests.labels(route, request.method, str(response.status)).inc()
    if route not in _STREAMING:
        metrics.latency.labels(route).observe(elapsed)
    if response.status >= 400 and isinstance(response, web.Response):
        code = str(response.status)
        if response.content_type == "application/problem+json" and isinstance(response.body, bytes):
            with contextlib.suppress(Exception):
                code = str(codec.decode_object(response.body).get("code", code))
        metrics.problems.labels(code).inc()
