"""Client spans of outbound HTTP calls (webhook tool calls, ``http`` resource fetches), as the
OpenTelemetry HTTP client conventions describe them, with the trace context sent along.

Imported by ``registry.webhooks.outbound`` only when its client is made with tracing on. Each call
is a ``CLIENT`` span named after its method (``POST``), child of whatever span is current (the MCP
server span of the request that made the call, or the admin API request's), and the configured
propagators write ``traceparent``/``tracestate`` (and ``baggage``) into the request, replacing any
the entry configured, so the webhook continues the caller's trace.

Attributes: ``http.request.method``, ``server.address``, ``server.port``, ``url.scheme``, ``url.full``
without userinfo or query (a query often carries a key), ``http.response.status_code``, and
``error.type``: the status code as text for 4xx/5xx, else the failure's class name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from registry.tracing.sdk import Tracing


class ClientSpans:
    """One per outbound client: starts a span per call."""

    def __init__(self, tracing: Tracing) -> None:
        self.tracer = tracing.tracer
        self.propagator = propagate.get_global_textmap()
        self.fields = frozenset(name.lower() for name in self.propagator.fields)

    def start(
        self, method: str, scheme: str, host: str, port: int, path: str, headers: Sequence[tuple[str, str]]
    ) -> tuple[ClientSpan, list[tuple[str, str]]]:
        """The call's span, and the headers to send: ``headers`` less any propagation header,
        plus the new span's context."""
        attributes: dict[str, Any] = {
            "http.request.method": method,
            "server.address": host,
            "server.port": port,
            "url.scheme": scheme,
            "url.full": f"{scheme}://{host if ':' not in host else f'[{host}]'}:{port}{path}",
        }
        span = self.tracer.start_span(method, kind=SpanKind.CLIENT, attributes=attributes)
        carrier: dict[str, str] = {}
        self.propagator.inject(carrier, trace.set_span_in_context(span))
        fields = self.fields
        sent = [(name, value) for name, value in headers if name.lower() not in fields]
        sent.extend(carrier.items())
        return ClientSpan(span), sent


class ClientSpan:
    """One call's span: told the status or the failure, ended when the exchange closes."""

    __slots__ = ("_error", "_span")

    def __init__(self, span: Span) -> None:
        self._span = span
        self._error: str | None = None

    def answered(self, status: int) -> None:
        self._span.set_attribute("http.response.status_code", status)
        if status >= 400:
            self._error = str(status)

    def failed(self, exc: BaseException) -> None:
        self._error = type(exc).__qualname__

    def end(self, exc: BaseException | None = None) -> None:
        if exc is not None and self._error is None:
            self._error = type(exc).__qualname__
        if self._error is not None:
            self._span.set_attribute("error.type", self._error)
            self._span.set_status(Status(StatusCode.ERROR))
        self._span.end()
