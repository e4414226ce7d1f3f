"""The OpenTelemetry SDK as this server uses it: one tracer provider (and, with
``OTEL_METRICS_EXPORTER``, one meter provider) per process, built from the standard variables.

Imported only when tracing is on (``registry.tracing.from_environment``). The providers are this
object's own, not OpenTelemetry's global ones: the global provider can be set once per process,
and tests build several servers, each with its own exporter, in one process. Trace context is
still OpenTelemetry's (``opentelemetry.context``), and propagation uses the configured global
propagators (``OTEL_PROPAGATORS``; W3C ``traceparent``/``tracestate`` and ``baggage`` by default).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from opentelemetry.metrics import Histogram
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Tracer

from registry import __version__
from registry.tracing import check, exporter_names

log = logging.getLogger("registry.tracing")

#: ``service.name`` unless ``OTEL_SERVICE_NAME`` or ``OTEL_RESOURCE_ATTRIBUTES`` says otherwise.
DEFAULT_SERVICE_NAME = "mcp-registry"
#: The instrumentation scope of every span and metric.
SCOPE = "mcp-registry"
#: ``mcp.server.operation.duration`` buckets, as the MCP semantic conventions specify (seconds).
DURATION_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
#: Longest string attribute value we set from what callers send (names, URIs, ids): a span is
#: the operator's, but one agent must not be able to make every span megabytes long.
MAX_ATTRIBUTE_CHARS = 1024


class Tracing:
    """What the instrumented code holds: the tracer, the duration histogram (None without
    metrics) and whether argument values may be recorded (``REGISTRY_TRACE_ARGUMENTS``)."""

    def __init__(
        self,
        provider: TracerProvider,
        *,
        meter_provider: MeterProvider | None = None,
        trace_arguments: bool = False,
    ) -> None:
        self.provider = provider
        self.tracer: Tracer = provider.get_tracer(SCOPE, __version__)
        self.meter_provider = meter_provider
        self.trace_arguments = trace_arguments
        self.duration: Histogram | None = None
        if meter_provider is not None:
            self.duration = meter_provider.get_meter(SCOPE, __version__).create_histogram(
                "mcp.server.operation.duration",
                unit="s",
                description="MCP request or notification duration as observed on the receiver from the time it was "
                "received until the result or ack is sent.",
                explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
            )

    @classmethod
    def from_environment(cls, *, trace_arguments: bool = False, environ: Mapping[str, str] = os.environ) -> Tracing:
        """Providers as the standard variables describe them. The sampler (``OTEL_TRACES_SAMPLER``,
        ``..._ARG``), batching (``OTEL_BSP_*``), the exporters' endpoints, headers, timeouts and
        compression are read by the SDK itself."""
        check(environ)
        resource = _resource()
        provider = TracerProvider(resource=resource)
        for processor in _span_processors(environ):
            provider.add_span_processor(processor)
        readers = _metric_readers(environ)
        meter_provider = MeterProvider(resource=resource, metric_readers=readers) if readers else None
        return cls(provider, meter_provider=meter_provider, trace_arguments=trace_arguments)

    def force_flush(self, timeout_ms: int = 30_000) -> None:
        self.provider.force_flush(timeout_ms)
        if self.meter_provider is not None:
            self.meter_provider.force_flush(timeout_ms)

    def shutdown(self) -> None:
        """Export what is pending, then stop the exporters (the process is stopping)."""
        try:
            self.provider.shutdown()
            if self.meter_provider is not None:
                self.meter_provider.shutdown()
        except Exception:  # an unreachable collector must not fail a stop
            log.exception("tracing: shutting the exporters down failed")


def _resource() -> Resource:
    """The SDK's resource (``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SERVICE_NAME``), named
    ``mcp-registry`` where neither names the service."""
    detected = Resource.create({SERVICE_VERSION: __version__})
    if str(detected.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        detected = detected.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    return detected


def _span_processors(environ: Mapping[str, str]) -> list[SpanProcessor]:
    """One batch processor per exporter of ``OTEL_TRACES_EXPORTER`` (default ``otlp``)."""
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


def _metric_readers(environ: Mapping[str, str]) -> list[MetricReader]:
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
