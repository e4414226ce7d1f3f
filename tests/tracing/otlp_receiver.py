"""A tiny OTLP/HTTP receiver on a loopback port: what the exporter sends, decoded.

Accepts ``POST /v1/traces`` and ``POST /v1/metrics`` (protobuf, as ``OTLPSpanExporter`` and
``OTLPMetricExporter`` send them; gzip too) and answers each with an empty success response.
With ``decode`` it keeps the decoded ``ExportTraceServiceRequest`` spans and metric names and sets
:attr:`changed` on each arrival, so a test waits for what it expects rather than sleeping. Without
it, it only counts the spans (:attr:`span_count`) and discards them (the tracing benchmark's sink).
Runs on a thread of its own.
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass
class ReceivedSpan:
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status_code: int


def _value(value: AnyValue) -> Any:
    field = value.WhichOneof("value")
    return None if field is None else getattr(value, field)


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


class OtlpReceiver:
    def __init__(self, *, decode: bool = True) -> None:
        self.decode = decode
        self.spans: list[ReceivedSpan] = []
        self.metric_names: set[str] = set()
        self.exports = 0
        #: Spans received (decoded or not).
        self.span_count = 0
        self.changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path == "/v1/traces":
                    answer = ExportTraceServiceResponse().SerializeToString()
                    receiver._traces(body)
                elif self.path == "/v1/metrics":
                    answer = ExportMetricsServiceResponse().SerializeToString()
                    receiver._metrics(body)
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="otlp-receiver", daemon=True)

    def _traces(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)  # upb, C: cheap even for the benchmark's sink
        if not self.decode:
            count = sum(len(s.spans) for rs in request.resource_spans for s in rs.scope_spans)
            with self.changed:
                self.exports += 1
                self.span_count += count
            return
        received = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ReceivedSpan(
                            name=span.name,
                            kind=span.kind,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            attributes=_attributes(span.attributes),
                            resource=resource,
                            status_code=span.status.code,
                        )
                    )
        with self.changed:
            self.exports += 1
            self.span_count += len(received)
            self.spans.extend(received)
            self.changed.notify_all()

    def _metrics(self, body: bytes) -> None:
        names: set[str] = set()
        if self.decode:
            request = ExportMetricsServiceRequest.FromString(body)
            for resource_metrics in request.resource_metrics:
                for scope_metrics in resource_metrics.scope_metrics:
                    names.update(metric.name for metric in scope_metrics.metrics)
        with self.changed:
            self.metric_names |= names
            self.changed.notify_all()

    def wait_for_span(self, name: str, timeout: float = 30.0) -> ReceivedSpan:
        """The first span named ``name`` to arrive; fails after ``timeout`` seconds without one."""

        def found() -> ReceivedSpan | None:
            return next((span for span in self.spans if span.name == name), None)

        with self.changed:
            if not self.changed.wait_for(lambda: found() is not None, timeout):
                raise AssertionError(f"no span {name!r} within {timeout:g}s; got {[s.name for s in self.spans]}")
            span = found()
            assert span is not None
            return span

    def wait_for_metric(self, name: str, timeout: float = 30.0) -> None:
        with self.changed:
            if not self.changed.wait_for(lambda: name in self.metric_names, timeout):
                raise AssertionError(f"no metric {name!r} within {timeout:g}s; got {sorted(self.metric_names)}")

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)
