"""Prometheus metrics, one registry per application (tests run several apps in one process)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class RegistryMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.sessions_open = Gauge("mcp_sessions_open", "MCP sessions cached by this replica", registry=self.registry)
        self.streams_open = Gauge(
            "mcp_streams_open",
            "Server-to-client streams (GET, legacy SSE) open on this replica",
            registry=self.registry,
        )
        self.notifications_sent = Counter(
            "mcp_notifications_sent", "Change notifications queued to client streams", registry=self.registry
        )
        self.notification_lag = Histogram(
            "mcp_notification_lag_seconds",
            "From change commit to notification send",
            buckets=LAG_BUCKETS,
            registry=self.registry,
        )
        self.request_latency = Histogram(
            "mcp_request_duration_seconds",
            "MCP request handling time by method",
            ["method"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

        self._latency_children: dict[str, Any] = {}

    def bind_gauges(self, sessions: Callable[[], int], streams: Callable[[], int]) -> None:
        self.sessions_open.set_function(lambda: float(sessions()))
        self.streams_open.set_function(lambda: float(streams()))

    def observe_request(self, method: str, seconds: float) -> None:
        child = self._latency_children.get(method)
        if child is None:
            child = self._latency_children[method] = self.request_latency.labels(method)
        child.observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
