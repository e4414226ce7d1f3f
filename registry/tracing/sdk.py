"""Tracing as the serving process holds it (:class:`Tracing`), and the SDK's exporters as the
exporter process builds them from the standard variables (:func:`resource`,
:func:`span_processors`, :func:`metric_readers`).

Imported only when tracing is on (``registry.tracing.from_environment``). The serving process
records MCP and outbound spans as plain records (``registry.tracing.records``) and ships them to
one exporter process (``registry.tracing.pipe``); only the admin API's spans, which FastAPI's
instrumentation makes through a tracer provider, are SDK spans here, and that provider's one
processor forwards them as records down the same pipe (``registry.tracing.convert.Forwarder``).
The providers are this object's own, not OpenTelemetry's global ones: the global provider can be
set once per process, and tests build several servers, each with its own exporter, in one process.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from registry import __version__
from registry.tracing import check, exporter_names
from registry.tracing import sampling as _sampling
from registry.tracing.records import Outlet, Recorder

log = logging.getLogger("registry.tracing")

#: ``service.name`` unless ``OTEL_SERVICE_NAME`` or ``OTEL_RESOURCE_ATTRIBUTES`` says otherwise.
DEFAULT_SERVICE_NAME = "mcp-registry"
#: Longest string attribute value we set from what callers send (names, URIs, ids): a span is
#: the operator's, but one agent must not be able to make every span megabytes long.
MAX_ATTRIBUTE_CHARS = 1024
#: Records waiting for the pipe at most (``OTEL_BSP_MAX_QUEUE_SIZE``, the SDK's default): beyond
#: it records are dropped and counted, never waited for.
DEFAULT_QUEUE_SIZE = 2048
#: How long a stopping server waits for its exporter process to export what is left (seconds).
STOP_TIMEOUT_S = 10.0


class Tracing:
    """What the instrumented code holds: the recorder (MCP and outbound spans), the admin API's
    tracer provider, and whether argument values may be recorded (``REGISTRY_TRACE_ARGUMENTS``)."""

    def __init__(
        self,
        outlet: Outlet,
        *,
        sampler: _sampling.Sampler | None = None,
        metrics: bool = False,
        trace_arguments: bool = False,
    ) -> None:
        from registry.tracing.convert import Forwarder

        self.outlet = outlet
        self.sampler = sampler or _sampling.from_environment()
        self.recorder = Recorder(outlet, self.sampler, metrics=metrics)
        self.trace_arguments = trace_arguments
        #: The admin API's (FastAPI's instrumentation): it samples by the same variables.
        self.provider = TracerProvider()
        self.provider.add_span_processor(Forwarder(outlet))

    @classmethod
    def from_environment(cls, *, trace_arguments: bool = False, environ: Mapping[str, str] = os.environ) -> Tracing:
        """Records shipped to an exporter process (started by :meth:`start`) that reads the
        same variables: exporters, endpoints, headers, batching, resource."""
        check(environ)
        from registry.tracing.pipe import PipeOutlet

        outlet = PipeOutlet(
            [sys.executable, "-m", "registry.tracing.exporter"],
            queue_size=queue_size(environ),
            env=dict(environ),
        )
        return cls(
            outlet,
            sampler=_sampling.from_environment(environ),
            metrics=bool(exporter_names(environ, "OTEL_METRICS_EXPORTER", "none")),
            trace_arguments=trace_arguments,
        )

    @classmethod
    def in_process(
        cls,
        processors: Sequence[SpanProcessor],
        *,
        meter_provider: MeterProvider | None = None,
        trace_arguments: bool = False,
    ) -> Tracing:
        """The exporter process's conversion run in this process (tests: an in-memory exporter)."""
        from registry.tracing.convert import Converter, InProcessOutlet

        converter = Converter(processors, resource=resource(), meter_provider=meter_provider)
        return cls(InProcessOutlet(converter), metrics=meter_provider is not None, trace_arguments=trace_arguments)

    def start(self) -> None:
        """Start the exporter process (the app's lifespan; stdio's run): once per serving process."""
        self.outlet.start()

    def force_flush(self, timeout_ms: int = 30_000) -> None:
        self.provider.force_flush(timeout_ms)
        self.outlet.flush(timeout_ms / 1000)

    def shutdown(self) -> None:
        """Ship what is pending, then let the exporter process export it and exit: within
        :data:`STOP_TIMEOUT_S`, after which it is killed (a collector that is down must not hold
        a stopping server past an orchestrator's grace period)."""
        try:
            self.provider.shutdown()
            self.outlet.close(timeout_s=STOP_TIMEOUT_S)
        except Exception:  # a stuck exporter must not fail a stop
            log.exception("tracing: shutting the exporter down failed")


def queue_size(environ: Mapping[str, str]) -> int:
    raw = environ.get("OTEL_BSP_MAX_QUEUE_SIZE", "").strip()
    try:
        size = int(raw) if raw else DEFAULT_QUEUE_SIZE
    except ValueError:
        size = DEFAULT_QUEUE_SIZE
    return size if size > 0 else DEFAULT_QUEUE_SIZE


class HashedResource(Resource):
    """A resource whose hash is computed once. The OTLP encoder groups a batch's spans by
    resource, hashing it for every span, and ``Resource.__hash__`` serialises the attributes to
    JSON each time: ~5 µs a span, ~8 % of the exporter process's CPU. Equal as any resource."""

    def __init__(self, attributes: Mapping[str, Any], schema_url: str | None = None) -> None:
        super().__init__(attributes, schema_url)
        self._registry_hash = super().__hash__()

    def __hash__(self) -> int:
        return self._registry_hash

    def __eq__(self, other: object) -> bool:
        return super().__eq__(other)


def resource() -> Resource:
    """The SDK's resource (``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SERVICE_NAME``), named
    ``mcp-registry`` where neither names the service."""
    detected = Resource.create({SERVICE_VERSION: __version__})
    if str(detected.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        detected = detected.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    return HashedResource(detected.attributes, detected.schema_url)


def span_processors(environ: Mapping[str, str]) -> list[SpanProcessor]:
    """One batch processor per exporter of ``OTEL_TRACES_EXPORTER`` (default ``otlp``); the SDK
    reads ``OTEL_BSP_*`` and the exporter's endpoint, headers, timeout and compression itself."""
    exporters: list[SpanExporter] = []
    for name in exporter_names(environ, "OTEL_TRACES_EXPORTER", "otlp"):
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporters.append(OTLPSpanExporter())
        elif name == "console":
            exporters.append(ConsoleSpanExporter())
        else:
            raise ValueError(f"OTEL_TRACES_EXPORTER={name!r}: supported are otlp, console and none")
    return [BatchSpanProcessor(exporter) for exporter in exporters]


def metric_readers(environ: Mapping[str, str]) -> list[MetricReader]:
    """Metrics only where ``OTEL_METRICS_EXPORTER`` asks for them (``otlp`` or ``console``): the
    registry's own Prometheus ``/metrics`` serves those who do not."""
    readers: list[MetricReader] = []
    for name in exporter_names(environ, "OTEL_METRICS_EXPORTER", "none"):
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

            readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
        elif name == "console":
            readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter()))
        else:
            raise ValueError(f"OTEL_METRICS_EXPORTER={name!r}: supported are otlp, console and none")
    return readers


def bounded(value: str) -> str:
    """A caller-chosen string as an attribute value: at most :data:`MAX_ATTRIBUTE_CHARS`."""
    return value if len(value) <= MAX_ATTRIBUTE_CHARS else value[:MAX_ATTRIBUTE_CHARS]
