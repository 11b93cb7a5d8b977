"""Prometheus metrics of one master process (served at ``/metrics``)."""

from __future__ import annotations

from typing import get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from protocol.frames import Role
from protocol.version import PROTOCOL_VERSION, VERSION

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class Metrics:
    """Every metric the master exports, on a registry of its own (one per master)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.connections = Gauge(
            "rawp_connections", "Attached WebSocket connections", ["role"], registry=r
        )
        # The build, as a label of a constant 1 (the usual *_build_info gauge): dashboards
        # tell versions apart without a Server header on the HTTP answers.
        self.build_info = Gauge(
            "rawp_build_info", "This build: 1, labelled", ["version", "protocol"], registry=r
        )
        self.build_info.labels(VERSION, PROTOCOL_VERSION).set(1)
        self.sessions = Gauge("rawp_sessions_loaded", "Sessions loaded on this node", registry=r)
        self.frames_in = Counter("rawp_frames_in", "Frames received from participants", registry=r)
        self.frames_out = Counter("rawp_frames_out", "Frames queued to participants", registry=r)
        self.errors = Counter("rawp_errors", "session.error answers by code", ["code"], registry=r)
        self.closes = Counter(
            "rawp_closes", "Connections closed by the master, by code", ["code"], registry=r
        )
        self.truncations = Counter(
            "rawp_history_truncations", "Truncated client histories", registry=r
        )
        self.slow_consumers = Counter("rawp_slow_consumers", "Connections closed 4429", registry=r)
        self.store_errors = Counter("rawp_store_errors", "Store writes refused", registry=r)
        self.store_latency = Histogram(
            "rawp_store_append_seconds",
            "Store append latency",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.relay_latency = Histogram(
            "rawp_relay_seconds",
            "From a frame's arrival to its fan-out",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        # The role's child of ``connections``, looked up once: ``labels()`` takes a lock and
        # builds a key, twice per connection (attach and detach).
        self._connections_of = {role: self.connections.labels(role) for role in get_args(Role)}

    def connected(self, role: str) -> None:
        """One more attached connection of ``role``."""
        self._connections_of[role].inc()

    def disconnected(self, role: str) -> None:
        """One attached connection of ``role`` fewer."""
        self._connections_of[role].dec()
