"""Client spans of outbound HTTP calls (webhook tool calls, ``http`` resource fetches), as the
OpenTelemetry HTTP client conventions describe them, with the trace context sent along.

Imported by ``registry.webhooks.outbound`` only when its client is made with tracing on. Each call
is a ``CLIENT`` span named after its method (``POST``), child of whatever span is current (the MCP
server span of the request that made the call, ``registry.tracing.propagation.CURRENT``, or else the
admin API request's, OpenTelemetry's current span), and ``traceparent``/``tracestate`` (and
``baggage``) go into the request, replacing any the entry configured, so the webhook continues the
caller's trace, sampled or not. The span is a record (``registry.tracing.records``), exported by the
exporter process like the server spans.

Attributes: ``http.request.method``, ``server.address``, ``server.port``, ``url.scheme``, ``url.full``
without userinfo, query or path (a path is ``/REDACTED``: webhook URLs carry their keys there, as
Slack's ``/services/T0/B0/<secret>`` does, and the conventions ask to scrub what is sensitive; the
parent span names the tool or resource), ``http.response.status_code``, and
``error.type``: the status code as text for 4xx/5xx, else the failure's class name.
"""

from __future__ import annotations

from collections.abc import Sequence
from time import time_ns
from typing import Any

from opentelemetry import trace

from registry.tracing.propagation import CURRENT, FIELDS, SpanRef
from registry.tracing.propagation import headers as propagation_headers
from registry.tracing.records import CLIENT, ERROR, UNSET, Recorder
from registry.tracing.sdk import Tracing


def _current() -> SpanRef | None:
    """The span a call is made for: an MCP request's, else the admin API request's."""
    ref = CURRENT.get()
    if ref is not None:
        return ref
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return SpanRef(
        f"{context.trace_id:032x}",
        f"{context.span_id:016x}",
        context.trace_flags.sampled,
        context.trace_state.to_header() or None,
        None,
        context.is_remote,
    )


class ClientSpans:
    """One per outbound client: starts a span per call."""

    def __init__(self, tracing: Tracing) -> None:
        self.recorder = tracing.recorder

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
            "url.full": f"{scheme}://{host if ':' not in host else f'[{host}]'}:{port}{_scrubbed(path)}",
        }
        parent = _current()
        span = self.recorder.child_of(parent)
        sent = [(name, value) for name, value in headers if name.lower() not in FIELDS]
        sent.extend(propagation_headers(span))
        return ClientSpan(self.recorder, method, span, parent, attributes), sent


def _scrubbed(path: str) -> str:
    """``url.full``'s path: ``/REDACTED`` for any but the root (see the module's docstring)."""
    return path if path in ("", "/") else "/REDACTED"


class ClientSpan:
    """One call's span: told the status or the failure, recorded when the exchange closes."""

    __slots__ = ("_attributes", "_error", "_method", "_parent", "_recorder", "_span", "_started")

    def __init__(
        self, recorder: Recorder, method: str, span: SpanRef, parent: SpanRef | None, attributes: dict[str, Any]
    ) -> None:
        self._recorder = recorder
        self._method = method
        self._span = span
        self._parent = parent
        self._attributes = attributes
        self._error: str | None = None
        self._started = time_ns()

    def answered(self, status: int) -> None:
        self._attributes["http.response.status_code"] = status
        if status >= 400:
            self._error = str(status)

    def failed(self, exc: BaseException) -> None:
        self._error = type(exc).__qualname__

    def end(self, exc: BaseException | None = None) -> None:
        if not self._span.sampled:
            return
        if exc is not None and self._error is None:
            self._error = type(exc).__qualname__
        if self._error is not None:
            self._attributes["error.type"] = self._error
        span, parent = self._span, self._parent
        self._recorder.put(
            [
                self._method,
                CLIENT,
                span.trace_id,
                span.span_id,
                None if parent is None else [parent.span_id, parent.remote],
                True,
                span.tracestate,
                self._started,
                time_ns(),
                UNSET if self._error is None else ERROR,
                None,
                self._attributes,
                None,
                None,
                None,
                False,
            ]
        )
