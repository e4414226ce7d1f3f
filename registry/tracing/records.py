"""Span records: what the serving process keeps of a span, and the :class:`Recorder` that makes them.

The hot path records no OpenTelemetry ``Span``: the SDK's costs ~20 µs per span to start and end
(locks, attribute validation, processors), and encoding it for OTLP ~60 µs more, time taken from
the event loop. A record is a plain list (below), made in a few microseconds and handed to an
:class:`Outlet`: in production :class:`registry.tracing.pipe.PipeOutlet`, which ships batches to the
exporter process (``registry.tracing.exporter``), where the official SDK and OTLP exporter turn
them into spans (:mod:`registry.tracing.convert`, the one conversion path, which tests run
in-process).

A record (a list, so that orjson encodes it fast and it reads back as it was)::

    [name, kind, trace_id, span_id, parent, sampled, tracestate, start_ns, end_ns,
     status_code, status_description, attributes, links, events, scope, histogram]

``kind``/``status_code``: the values of OpenTelemetry's ``SpanKind``/``StatusCode``; ids: lower-case
hex; ``parent``: ``[span_id, is_remote]`` or None (same trace); ``sampled`` false: a record only
for the duration histogram, not exported as a span; ``links``: ``[[trace_id, span_id, sampled,
tracestate], ...]`` or None; ``events``: ``[[name, time_ns, attributes], ...]`` or None;
``scope``: ``[name, version, schema_url]``, None for this server's own; ``histogram``: the record's duration
goes to ``mcp.server.operation.duration``.
"""

from __future__ import annotations

from random import getrandbits
from typing import Any, Protocol

from registry.tracing.propagation import SpanRef
from registry.tracing.sampling import Sampler

__all__ = ["CLIENT", "SERVER", "Outlet", "Record", "Recorder"]

Record = list[Any]

#: OpenTelemetry's SpanKind values.
SERVER = 1
CLIENT = 2
#: OpenTelemetry's StatusCode values.
UNSET = 0
ERROR = 2

# Field positions.
NAME, KIND, TRACE_ID, SPAN_ID, PARENT, SAMPLED, TRACESTATE, START, END = range(9)
STATUS, STATUS_DESCRIPTION, ATTRIBUTES, LINKS, EVENTS, SCOPE, HISTOGRAM = range(9, 16)


class Outlet(Protocol):
    """Where records go. ``put`` is called on the event loop and must never block it."""

    def put(self, record: Record) -> None: ...

    def start(self) -> None: ...

    def flush(self, timeout_s: float = 30.0) -> bool: ...

    def close(self, timeout_s: float = 30.0) -> None: ...


class Recorder:
    """Ids, the sampling decision and the outlet, as the instrumented code needs them."""

    __slots__ = ("metrics", "outlet", "put", "sampler")

    def __init__(self, outlet: Outlet, sampler: Sampler, *, metrics: bool) -> None:
        self.outlet = outlet
        self.put = outlet.put
        self.sampler = sampler
        #: Whether the duration histogram is exported: unsampled requests then send a record too.
        self.metrics = metrics

    def child_of(self, parent: SpanRef | None) -> SpanRef:
        """A new span's context: ``parent``'s trace (or a new one) and the sampler's decision."""
        span_id = f"{getrandbits(64) or 1:016x}"
        if parent is None:
            trace_id = f"{getrandbits(128) or 1:032x}"
            return SpanRef(trace_id, span_id, self.sampler.sample(None, trace_id), None, None, False)
        return SpanRef(
            parent.trace_id,
            span_id,
            self.sampler.sample(parent.sampled, parent.trace_id),
            parent.tracestate,
            parent.baggage,
            False,
        )


def link(ref: SpanRef) -> list[Any]:
    """``ref`` as a record's link."""
    return [ref.trace_id, ref.span_id, ref.sampled, ref.tracestate]
