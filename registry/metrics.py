"""Prometheus metrics, one registry per application (tests run several apps in one process).

Under ``serve --workers N`` each worker answers ``/metrics`` for itself: every sample then carries
a ``worker`` label (its number, stable across restarts) and ``registry_worker_info`` names the
worker's pid, so series of different workers are never mixed up or summed by accident.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

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
        self.session_rows_pending = Gauge(
            "mcp_session_rows_pending",
            "New MCP sessions of this replica whose rows are not written yet (written in batches)",
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
        self.event_deliveries = Counter(
            "registry_event_deliveries",
            "Change-event delivery attempts this process made, by outcome: delivered; retry (sent again later); "
            "failed (given up after the last attempt); unrecorded (the lease moved on meanwhile)",
            ["outcome"],
            registry=self.registry,
        )
        self.event_lease_held = Gauge(
            "registry_event_lease_held",
            "1 while this process holds the change-event delivery lease (one replica delivers)",
            registry=self.registry,
        )
        self.request_latency = LoopHistogram(
            "mcp_request_duration_seconds", "MCP request handling time by method", "method", LATENCY_BUCKETS
        )
        self.registry.register(self.request_latency)

        #: What ``render`` exposes: the registry itself, or (a worker) its samples labelled.
        self._exposed = self.registry

    def identify_worker(self, index: int) -> None:
        """Label every sample with ``worker="<index>"`` and expose the worker's pid (``serve --workers``)."""
        info = Gauge(
            "registry_worker_info", "The worker process answering (serve --workers)", ["pid"], registry=self.registry
        )
        info.labels(str(os.getpid())).set(1)
        self._exposed = CollectorRegistry(auto_describe=False)
        self._exposed.register(_Labelled(self.registry, "worker", str(index)))

    def bind_gauges(
        self, sessions: Callable[[], int], streams: Callable[[], int], pending: Callable[[], int] | None = None
    ) -> None:
        self.sessions_open.set_function(lambda: float(sessions()))
        self.streams_open.set_function(lambda: float(streams()))
        if pending is not None:
            self.session_rows_pending.set_function(lambda: float(pending()))

    def observe_request(self, method: str, seconds: float) -> None:
        self.request_latency.observe(method, seconds)

    def render(self) -> bytes:
        return generate_latest(self._exposed)


class LoopHistogram(Collector):
    """A histogram with one label, observed only on the event loop's thread (every MCP request).

    ``prometheus_client``'s Histogram takes a lock and increments two locked values per
    observation, several microseconds on a path whose whole budget is tens of them; one thread
    needs neither. Exposed as a standard histogram (``_bucket``, ``_count``, ``_sum``).
    """

    def __init__(self, name: str, documentation: str, label: str, buckets: tuple[float, ...]) -> None:
        self.name = name
        self.documentation = documentation
        self.label = label
        self.bounds = tuple(sorted(buckets))
        #: label value -> [count per bucket (the last: above every bound)], and the sums.
        self._counts: dict[str, list[int]] = {}
        self._sums: dict[str, float] = {}

    def observe(self, value: str, seconds: float) -> None:
        counts = self._counts.get(value)
        if counts is None:
            counts = self._counts[value] = [0] * (len(self.bounds) + 1)
            self._sums[value] = 0.0
        counts[bisect_left(self.bounds, seconds)] += 1  # a bucket counts values <= its bound
        self._sums[value] += seconds

    def collect(self) -> Iterable[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=[self.label])
        for value, counts in list(self._counts.items()):
            cumulative, total = [], 0
            for bound, count in zip((*self.bounds, float("inf")), counts, strict=True):
                total += count
                cumulative.append(("+Inf" if bound == float("inf") else repr(bound), total))
            family.add_metric([value], cumulative, self._sums[value])
        yield family

    def describe(self) -> Iterable[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=[self.label])


class _Labelled(Collector):
    """Another registry's metrics, with one more label on every sample."""

    def __init__(self, source: CollectorRegistry, name: str, value: str) -> None:
        self._source = source
        self._label = {name: value}

    def collect(self) -> Iterable[Metric]:
        for family in self._source.collect():
            labelled = Metric(family.name, family.documentation, family.type, family.unit)
            labelled.samples = [s._replace(labels={**s.labels, **self._label}) for s in family.samples]
            yield labelled
