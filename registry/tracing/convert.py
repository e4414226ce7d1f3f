"""The one conversion between span records and the SDK: record → ``ReadableSpan`` (and the
duration histogram) for export, ``ReadableSpan`` → record for the admin API's spans.

The exporter process (``registry.tracing.exporter``) runs :class:`Converter` on what the serving
process ships; tests run the very same code in-process (:class:`InProcessOutlet`, each record
encoded and decoded with orjson as the pipe does), so what they read through an
``InMemorySpanExporter`` is what production exports. Everything used is the SDK's public API:
``ReadableSpan``'s constructor, ``SpanProcessor.on_end``, the metrics API.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode

import orjson
from opentelemetry.context import Context
from opentelemetry.metrics import Histogram
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from registry import __version__
from registry.tracing import records as r
from registry.tracing.records import Record

log = logging.getLogger("registry.tracing")

#: The instrumentation scope of this server's own spans and metric.
SCOPE = "mcp-registry"
#: ``mcp.server.operation.duration`` buckets, as the MCP semantic conventions specify (seconds).
DURATION_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
#: The metric's attributes (a subset of the span's: no ids, no URIs).
METRIC_KEYS = (
    "mcp.method.name",
    "mcp.protocol.version",
    "gen_ai.operation.name",
    "network.transport",
    "network.protocol.name",
    "network.protocol.version",
    "error.type",
)
_KINDS = {kind.value: kind for kind in SpanKind}
_STATUS = {code.value: code for code in StatusCode}
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_UNSAMPLED = TraceFlags(TraceFlags.DEFAULT)
_UNSET_STATUS = Status(StatusCode.UNSET)


def duration_histogram(meter_provider: MeterProvider) -> Histogram:
    return meter_provider.get_meter(SCOPE, __version__).create_histogram(
        "mcp.server.operation.duration",
        unit="s",
        description="MCP request or notification duration as observed on the receiver from the time it was "
        "received until the result or ack is sent.",
        explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
    )


def _trace_state(raw: str | None) -> TraceState | None:
    return TraceState.from_header([raw]) if raw else None


class Converter:
    """Records in, spans to the processors (``BatchSpanProcessor(OTLPSpanExporter())`` in the
    exporter process) and durations to the histogram (with metrics on)."""

    def __init__(
        self,
        processors: Sequence[SpanProcessor],
        *,
        resource: Resource,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        self.processors = list(processors)
        self.resource = resource
        self.meter_provider = meter_provider
        self.duration = None if meter_provider is None else duration_histogram(meter_provider)
        self._own = InstrumentationScope(SCOPE, __version__)
        self._scopes: dict[tuple[str, str | None, str | None], InstrumentationScope] = {
            (SCOPE, __version__, None): self._own
        }

    def export(self, batch: Sequence[Record]) -> None:
        for record in batch:
            try:
                if record[r.SAMPLED]:
                    span = self.span(record)
                    for processor in self.processors:
                        processor.on_end(span)
                if record[r.HISTOGRAM] and self.duration is not None:
                    self._record_duration(record)
            except Exception:  # one malformed record must not stop the others
                log.exception("tracing: a span record could not be exported")

    def span(self, record: Record) -> ReadableSpan:
        trace_id = int(record[r.TRACE_ID], 16)
        flags = _SAMPLED if record[r.SAMPLED] else _UNSAMPLED
        state = _trace_state(record[r.TRACESTATE])
        context = SpanContext(trace_id, int(record[r.SPAN_ID], 16), False, flags, state)
        parent_field = record[r.PARENT]
        parent = (
            None
            if parent_field is None
            else SpanContext(trace_id, int(parent_field[0], 16), bool(parent_field[1]), flags, state)
        )
        links = [
            Link(SpanContext(int(t, 16), int(s, 16), True, _SAMPLED if sampled else _UNSAMPLED, _trace_state(ts)))
            for t, s, sampled, ts in record[r.LINKS] or ()
        ]
        events = [Event(name, attributes, timestamp) for name, timestamp, attributes in record[r.EVENTS] or ()]
        scope_field = record[r.SCOPE]
        scope = self._own if scope_field is None else self._scope(*scope_field)
        return ReadableSpan(
            name=record[r.NAME],
            context=context,
            parent=parent,
            resource=self.resource,
            attributes=record[r.ATTRIBUTES],
            events=events,
            links=links,
            kind=_KINDS.get(record[r.KIND], SpanKind.INTERNAL),
            status=_UNSET_STATUS
            if record[r.STATUS] == r.UNSET
            else Status(_STATUS.get(record[r.STATUS], StatusCode.UNSET), record[r.STATUS_DESCRIPTION]),
            start_time=record[r.START],
            end_time=record[r.END],
            instrumentation_scope=scope,
        )

    def _scope(self, name: str, version: str | None, schema_url: str | None = None) -> InstrumentationScope:
        scope = self._scopes.get((name, version, schema_url))
        if scope is None:
            scope = self._scopes[(name, version, schema_url)] = InstrumentationScope(name, version, schema_url)
        return scope

    def _record_duration(self, record: Record) -> None:
        assert self.duration is not None
        attributes: Mapping[str, Any] = record[r.ATTRIBUTES]
        metric = {key: attributes[key] for key in METRIC_KEYS if key in attributes}
        if "mcp_registry.entry.version" in attributes:  # a real entry's name: bounded cardinality
            for key in ("gen_ai.tool.name", "gen_ai.prompt.name"):
                if key in attributes:
                    metric[key] = attributes[key]
        self.duration.record((record[r.END] - record[r.START]) / 1e9, metric)

    def force_flush(self, timeout_ms: int = 30_000) -> None:
        for processor in self.processors:
            processor.force_flush(timeout_ms)
        if self.meter_provider is not None:
            self.meter_provider.force_flush(timeout_ms)

    def shutdown(self) -> None:
        """Export what is pending, then stop the exporters."""
        for processor in self.processors:
            try:
                processor.shutdown()
            except Exception:  # an unreachable collector must not fail a stop
                log.exception("tracing: shutting a span exporter down failed")
        if self.meter_provider is not None:
            try:
                self.meter_provider.shutdown()
            except Exception:
                log.exception("tracing: shutting the metric exporter down failed")


def _without_query_values(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """FastAPI records ``url.query`` as sent, redacting only a few cloud-signature names; a query
    here carries single-sign-on codes and states (``/ui/sso/callback?code=...``), search terms and
    filters. The names stay, every value reads ``REDACTED``."""
    scrubbed = dict(attributes)
    query = scrubbed.get("url.query")
    if isinstance(query, str) and query:
        scrubbed["url.query"] = urlencode([(name, "REDACTED") for name, _ in parse_qsl(query, keep_blank_values=True)])
    return scrubbed


def from_readable(span: ReadableSpan) -> Record:
    """A finished SDK span (the admin API's, from FastAPI's instrumentation) as a record, its query's
    values scrubbed (``_without_query_values``)."""
    context = span.context
    assert context is not None
    parent = span.parent
    scope = span.instrumentation_scope
    return [
        span.name,
        span.kind.value,
        f"{context.trace_id:032x}",
        f"{context.span_id:016x}",
        None if parent is None else [f"{parent.span_id:016x}", parent.is_remote],
        context.trace_flags.sampled,
        context.trace_state.to_header() or None,
        span.start_time,
        span.end_time,
        span.status.status_code.value,
        span.status.description,
        _without_query_values(span.attributes or {}),
        [
            [
                f"{link.context.trace_id:032x}",
                f"{link.context.span_id:016x}",
                link.context.trace_flags.sampled,
                link.context.trace_state.to_header() or None,
            ]
            for link in span.links
        ]
        or None,
        [[event.name, event.timestamp, dict(event.attributes or {})] for event in span.events] or None,
        None if scope is None else [scope.name, scope.version, scope.schema_url],
        False,
    ]


class Forwarder(SpanProcessor):
    """The admin API's tracer provider's one processor: each finished span goes to the same
    outlet as the MCP spans (one exporter process, one path out)."""

    def __init__(self, outlet: r.Outlet) -> None:
        self.outlet = outlet

    def on_start(self, span: Any, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.trace_flags.sampled:
            self.outlet.put(from_readable(span))

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class InProcessOutlet:
    """The exporter process's conversion run in this process, record by record as they are put
    (each through orjson, as the pipe has it): the tests' outlet."""

    def __init__(self, converter: Converter) -> None:
        self.converter = converter

    def put(self, record: Record) -> None:
        self.converter.export([orjson.loads(orjson.dumps(record, default=str))])

    def start(self) -> None:
        return None

    def flush(self, timeout_s: float = 30.0) -> bool:
        self.converter.force_flush(int(timeout_s * 1000))
        return True

    def close(self, timeout_s: float = 30.0) -> None:
        self.converter.shutdown()
