"""W3C trace context (``traceparent``, ``tracestate``) and ``baggage`` as the hot path reads and
writes them, and the current span as outbound calls see it.

A small strict parser rather than OpenTelemetry's propagators: ``propagate.extract`` builds a
``Context`` and a ``NonRecordingSpan`` per carrier, where the recorder needs three strings and a
flag. The accepted form is the propagator's (lower-case hex, version ``00`` exactly 55 characters,
a later version at least that and then ``-``, ids not all zeros, version ``ff`` refused).
``tracestate`` and ``baggage`` are carried along unparsed (bounded), to the spans' links and the
calls this request makes: the default ``OTEL_PROPAGATORS`` (``tracecontext,baggage``) is what this
server honours (``registry.tracing.check`` refuses others).

:data:`CURRENT` is the span of the MCP request an outbound call is made for (a contextvar, so each
request's task sees its own): the webhook's ``traceparent`` continues it.
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from typing import NamedTuple

#: Longest ``tracestate`` or ``baggage`` value carried along (the W3C limits are 512 and 8192).
MAX_TRACESTATE = 512
MAX_BAGGAGE = 8192

_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16


class SpanRef(NamedTuple):
    """A span as context: what a child or a link needs of it."""

    trace_id: str  # 32 lower-case hex digits
    span_id: str  # 16
    sampled: bool
    tracestate: str | None = None
    baggage: str | None = None
    remote: bool = True


#: The current span of this task (an MCP request's whose answer may call out), or None.
CURRENT: ContextVar[SpanRef | None] = ContextVar("registry_tracing_current", default=None)


def parse(traceparent: str, tracestate: str | None = None, baggage: str | None = None) -> SpanRef | None:
    """The span a ``traceparent`` names, or None if it is not a valid one."""
    match = _TRACEPARENT.fullmatch(traceparent.strip())
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return None
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    if tracestate is not None and (len(tracestate) > MAX_TRACESTATE or not tracestate.strip()):
        tracestate = None
    if baggage is not None and (len(baggage) > MAX_BAGGAGE or not baggage.strip()):
        baggage = None
    return SpanRef(trace_id, span_id, bool(int(flags, 16) & 1), tracestate, baggage)


def headers(ref: SpanRef) -> list[tuple[str, str]]:
    """The propagation headers that make ``ref`` the parent of what the receiver does."""
    sent = [("traceparent", f"00-{ref.trace_id}-{ref.span_id}-{'01' if ref.sampled else '00'}")]
    if ref.tracestate:
        sent.append(("tracestate", ref.tracestate))
    if ref.baggage:
        sent.append(("baggage", ref.baggage))
    return sent


#: The header names :func:`headers` writes (an entry's own are replaced).
FIELDS = frozenset({"traceparent", "tracestate", "baggage"})
