"""Server spans around the one MCP dispatcher, as the OpenTelemetry MCP semantic conventions
(semantic-conventions-genai, ``docs/gen-ai/mcp.md``) describe them.

``McpServer`` wraps its two entry points with :class:`McpSpans` when it is built with tracing,
so every transport (streamable HTTP, legacy SSE, stdio) and both protocol eras get the same spans
from this one place. Imported only then: it imports the OpenTelemetry API.

**A span per request or notification**, kind ``SERVER``, named ``{mcp.method.name} {target}``
where the target is the tool's or the prompt's name (never a resource URI: unbounded cardinality).
Attributes: ``mcp.method.name``, ``jsonrpc.request.id``, ``mcp.protocol.version``,
``mcp.session.id`` (session era), ``mcp.resource.uri``, ``gen_ai.tool.name`` with
``gen_ai.operation.name=execute_tool``, ``gen_ai.prompt.name``, ``network.transport`` (``tcp``,
or ``pipe`` on stdio), ``network.protocol.name``/``.version`` and ``client.address``/``.port`` over
HTTP; on a JSON-RPC error ``error.type`` and ``rpc.response.status_code`` (the code as text) and
status ``ERROR`` with the error's message; ``error.type=tool_error`` for a tool result with
``isError``. The registry's own: ``mcp_registry.entry.version``, ``mcp_registry.entry.team``,
``mcp_registry.label`` and ``mcp_registry.agent`` (the token's name or the signed-in user).
Argument values only with ``REGISTRY_TRACE_ARGUMENTS=true`` (``gen_ai.tool.call.arguments``,
``mcp_registry.prompt.arguments``, JSON, bounded).

**Parent.** The context in ``params._meta`` (``traceparent``, ``tracestate``, ``baggage``) when it
has one; the HTTP request's headers are then a link (the conventions: MCP and transport contexts are
independent). Without one in ``_meta``, the HTTP headers' context is the parent.

**Cost.** No OpenTelemetry span is made here: a request's span is a record (ids, times, attributes;
``registry.tracing.records``) handed to the recorder's outlet, which ships it to the exporter
process; the SDK and the OTLP encoder run there. The parent comes from a small strict W3C parser
(``registry.tracing.propagation``), and the sampling decision from ``registry.tracing.sampling``.

**Duration.** ``mcp.server.operation.duration`` (seconds) with the metric's attributes, where
``OTEL_METRICS_EXPORTER`` turns metrics on. A tool's or prompt's name is recorded there only when it
named an entry this caller may use: names that callers make up would be unbounded series.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, Mapping
from random import getrandbits
from time import time_ns
from typing import TYPE_CHECKING, Any

from registry.mcp.protocol import INVALID_PARAMS, RESOURCE_NOT_FOUND
from registry.tracing.propagation import CURRENT, SpanRef, parse
from registry.tracing.records import ERROR, SERVER, UNSET, link
from registry.tracing.sdk import MAX_ATTRIBUTE_CHARS, Tracing, bounded

if TYPE_CHECKING:
    from registry.mcp.protocol import Message
    from registry.mcp.server import RequestContext
    from registry.mcp.sessions import ClientState

Answer = Callable[["Message", "RequestContext"], Coroutine[Any, Any, dict[str, Any]]]
Notify = Callable[["Message", "ClientState"], Coroutine[Any, Any, None]]

#: Requests whose ``params.uri`` is ``mcp.resource.uri``.
_URI_METHODS = frozenset({"resources/read", "resources/subscribe", "resources/unsubscribe"})
#: Requests whose answer may call out (webhooks, http resources): their span is made current.
_OUTBOUND_METHODS = frozenset({"tools/call", "resources/read"})
#: Where argument values go, with ``REGISTRY_TRACE_ARGUMENTS`` on.
#: Errors whose message quotes what the caller sent (an argument's value, the URI asked for): their
#: span says what went wrong in these words instead, unless argument values may be recorded.
_QUOTING_ERRORS = {INVALID_PARAMS: "invalid params", RESOURCE_NOT_FOUND: "resource not found"}


def _resource_uri(asked: Any, entry: Any, trace_arguments: bool) -> str | None:
    """``mcp.resource.uri`` without argument values: a templated resource's URI is filled in by the
    caller (``sprint://{customer}/...``), so it is recorded as the entry's template, and a URI that
    served nothing not at all; with ``REGISTRY_TRACE_ARGUMENTS``, the URI asked for."""
    if not isinstance(asked, str):
        return None
    if trace_arguments:
        return bounded(asked)
    listing = getattr(entry, "listing", None)
    if not isinstance(listing, dict):
        return None
    fixed = listing.get("uri")
    if isinstance(fixed, str):
        return bounded(fixed)
    template = listing.get("uriTemplate")
    return bounded(template) if isinstance(template, str) else None


_ARGUMENT_KEYS = {"tools/call": "gen_ai.tool.call.arguments", "prompts/get": "mcp_registry.prompt.arguments"}


class McpSpans:
    """Wraps the dispatcher's entry points; holds what every span needs, looked up once."""

    def __init__(self, tracing: Tracing) -> None:
        self.recorder = tracing.recorder
        self.sample = tracing.recorder.sampler.sample
        self.trace_arguments = tracing.trace_arguments
        self._answer: Answer | None = None
        self._notify: Notify | None = None

    def wrap_request(self, answer: Answer) -> Answer:
        """:meth:`request` around ``answer`` (a bound method: no closure's frame per request)."""
        self._answer = answer
        return self.request

    def wrap_notification(self, notify: Notify) -> Notify:
        self._notify = notify
        return self.notification

    # ------------------------------------------------------------------ parent context
    @staticmethod
    def _parent(params: Mapping[str, Any], scope: Mapping[str, Any] | None) -> tuple[SpanRef | None, list[Any] | None]:
        """``_meta``'s context as the parent, the HTTP request's as a link; or the HTTP request's
        as the parent; or none (a new trace)."""
        http: SpanRef | None = None
        if scope is not None:
            traceparent = tracestate = baggage = None
            for key, value in scope["headers"]:
                if key == b"traceparent":
                    traceparent = value.decode("latin-1")
                elif key == b"tracestate":
                    tracestate = value.decode("latin-1")
                elif key == b"baggage":
                    baggage = value.decode("latin-1")
            if traceparent is not None:
                http = parse(traceparent, tracestate, baggage)
        meta = params.get("_meta")
        if isinstance(meta, dict):
            traceparent = meta.get("traceparent")
            if isinstance(traceparent, str) and len(traceparent) <= 8192:
                tracestate, baggage = meta.get("tracestate"), meta.get("baggage")
                parent = parse(
                    traceparent,
                    tracestate if isinstance(tracestate, str) else None,
                    baggage if isinstance(baggage, str) else None,
                )
                if parent is not None:
                    return parent, None if http is None else [link(http)]
        return http, None

    # ------------------------------------------------------------------ requests
    async def request(self, message: Message, ctx: RequestContext) -> dict[str, Any]:
        answer = self._answer
        assert answer is not None
        method = message.method
        assert method is not None
        params = message.params
        scope = ctx.scope
        recorder = self.recorder
        parent, links = self._parent(params, scope)
        # Recorder.child_of, inlined: this runs on every request.
        span_id = f"{getrandbits(64) or 1:016x}"
        if parent is None:
            trace_id = f"{getrandbits(128) or 1:032x}"
            sampled = self.sample(None, trace_id)
        else:
            trace_id = parent.trace_id
            sampled = self.sample(parent.sampled, trace_id)
        # Current only where the answer may call out (webhook calls, http resource fetches).
        token = None
        if method in _OUTBOUND_METHODS:
            if parent is None:
                current = SpanRef(trace_id, span_id, sampled, None, None, False)
            else:
                current = SpanRef(trace_id, span_id, sampled, parent.tracestate, parent.baggage, False)
            token = CURRENT.set(current)
        started = time_ns()
        try:
            result = await answer(message, ctx)
        except BaseException as exc:  # cancelled: the client went away, or the server is stopping
            if token is not None:
                CURRENT.reset(token)
            if sampled:
                name, attributes = self._attributes(method, message, ctx)
                attributes["error.type"] = type(exc).__qualname__
                recorder.put(
                    _record(
                        name, trace_id, span_id, parent, started, ERROR, "request cancelled", attributes, links, False
                    )
                )
            raise
        ended = time_ns()
        if token is not None:
            CURRENT.reset(token)
        # The attributes are made only for a span that is recorded (or counted): an unsampled
        # request pays for its ids and the decision alone.
        if sampled:
            name, attributes = self._attributes(method, message, ctx)
            description = self._finish(attributes, method, params, ctx, result, True)
            status = UNSET if description is None else ERROR
            recorder.put(
                _record(name, trace_id, span_id, parent, started, status, description, attributes, links, True, ended)
            )
        elif recorder.metrics:  # not exported, but its duration counts
            name, attributes = self._attributes(method, message, ctx)
            self._finish(attributes, method, params, ctx, result, False)
            recorder.put(
                _record(name, trace_id, span_id, parent, started, UNSET, None, attributes, None, True, ended, False)
            )
        return result

    @staticmethod
    def _attributes(method: str, message: Message, ctx: RequestContext) -> tuple[str, dict[str, Any]]:
        """The span's name and the attributes the request tells."""
        params = message.params
        client = ctx.client
        attributes: dict[str, Any] = {"mcp.method.name": method, "jsonrpc.request.id": bounded(str(message.id))}
        name = method
        if method == "tools/call" or method == "prompts/get":
            target = params.get("name")
            if isinstance(target, str):
                target = bounded(target)
                attributes["gen_ai.tool.name" if method == "tools/call" else "gen_ai.prompt.name"] = target
                name = f"{method} {target}"
            if method == "tools/call":
                attributes["gen_ai.operation.name"] = "execute_tool"
        elif method == "completion/complete":
            ref = params.get("ref")
            if isinstance(ref, dict) and ref.get("type") == "ref/prompt" and isinstance(ref.get("name"), str):
                attributes["gen_ai.prompt.name"] = bounded(ref["name"])
        if client.protocol_version is not None:
            attributes["mcp.protocol.version"] = client.protocol_version
        if ctx.session_id is not None:
            attributes["mcp.session.id"] = ctx.session_id
        _network(attributes, ctx.scope)
        attributes["mcp_registry.label"] = client.label
        attributes["mcp_registry.agent"] = bounded(client.user or client.principal)
        return name, attributes

    def _finish(
        self,
        attributes: dict[str, Any],
        method: str,
        params: Mapping[str, Any],
        ctx: RequestContext,
        answer: dict[str, Any],
        sampled: bool,
    ) -> str | None:
        """What only the answer tells: the error, the entry served, the negotiated version. The
        status description of an error (None: no error)."""
        error = answer.get("error")
        description: str | None = None
        if isinstance(error, dict):
            code = error.get("code")
            attributes["error.type"] = attributes["rpc.response.status_code"] = str(code)
            quiet = None if self.trace_arguments or not isinstance(code, int) else _QUOTING_ERRORS.get(code)
            description = quiet or bounded(str(error.get("message", "")))
        else:
            result = answer.get("result")
            if isinstance(result, dict):
                if method == "tools/call" and result.get("isError") is True:
                    attributes["error.type"] = "tool_error"
                    description = "the tool answered isError"
                elif method == "initialize" and isinstance(result.get("protocolVersion"), str):
                    attributes["mcp.protocol.version"] = result["protocolVersion"]
        entry = ctx.entry
        if method in _URI_METHODS:
            uri = _resource_uri(params.get("uri"), entry, self.trace_arguments)
            if uri is not None:
                attributes["mcp.resource.uri"] = uri
        if entry is not None:
            attributes["mcp_registry.entry.version"] = entry.version
            if entry.team is not None:
                attributes["mcp_registry.entry.team"] = entry.team
        if sampled and self.trace_arguments and method in _ARGUMENT_KEYS:
            arguments = params.get("arguments")
            if isinstance(arguments, dict):
                attributes[_ARGUMENT_KEYS[method]] = _json(arguments)
        return description

    # ------------------------------------------------------------------ notifications
    async def notification(self, message: Message, client: ClientState) -> None:
        notify = self._notify
        assert notify is not None
        method = message.method
        assert method is not None
        attributes: dict[str, Any] = {"mcp.method.name": method}
        if client.protocol_version is not None:
            attributes["mcp.protocol.version"] = client.protocol_version
        session_id = getattr(client, "id", None)
        if isinstance(session_id, str) and session_id:
            attributes["mcp.session.id"] = session_id
        recorder = self.recorder
        parent, links = self._parent(message.params, None)
        span = recorder.child_of(parent)
        started = time_ns()
        await notify(message, client)
        if span.sampled or recorder.metrics:
            recorder.put(
                _record(
                    method,
                    span.trace_id,
                    span.span_id,
                    parent,
                    started,
                    UNSET,
                    None,
                    attributes,
                    links,
                    True,
                    time_ns(),
                    span.sampled,
                )
            )


def _record(
    name: str,
    trace_id: str,
    span_id: str,
    parent: SpanRef | None,
    started: int,
    status: int,
    description: str | None,
    attributes: dict[str, Any],
    links: list[Any] | None,
    histogram: bool,
    ended: int = 0,
    sampled: bool = True,
) -> list[Any]:
    """A server span's record (``registry.tracing.records``)."""
    return [
        name,
        SERVER,
        trace_id,
        span_id,
        None if parent is None else [parent.span_id, True],
        sampled,
        None if parent is None else parent.tracestate,
        started,
        ended or time_ns(),
        status,
        description,
        attributes,
        links,
        None,
        None,
        histogram,
    ]


def _network(attributes: dict[str, Any], scope: Mapping[str, Any] | None) -> None:
    """``network.*`` and ``client.*`` as the conventions' transport table has them."""
    if scope is None:
        attributes["network.transport"] = "pipe"
        return
    attributes["network.transport"] = "tcp"
    attributes["network.protocol.name"] = "http"
    version = scope.get("http_version")
    if isinstance(version, str):
        attributes["network.protocol.version"] = version
    peer = scope.get("client")
    if peer:
        attributes["client.address"] = str(peer[0])
        attributes["client.port"] = int(peer[1])


def _json(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return text if len(text) <= MAX_ATTRIBUTE_CHARS else text[:MAX_ATTRIBUTE_CHARS]
