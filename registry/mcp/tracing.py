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

**Duration.** ``mcp.server.operation.duration`` (seconds) with the metric's attributes, where
``OTEL_METRICS_EXPORTER`` turns metrics on. A tool's or prompt's name is recorded there only when it
named an entry this caller may use: names that callers make up would be unbounded series.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

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
_ARGUMENT_KEYS = {"tools/call": "gen_ai.tool.call.arguments", "prompts/get": "mcp_registry.prompt.arguments"}
#: The metric's attributes (a subset of the span's: no ids, no URIs).
_METRIC_KEYS = (
    "mcp.method.name",
    "mcp.protocol.version",
    "gen_ai.operation.name",
    "network.transport",
    "network.protocol.name",
    "network.protocol.version",
)


class McpSpans:
    """Wraps the dispatcher's entry points; holds what every span needs, looked up once."""

    def __init__(self, tracing: Tracing) -> None:
        self.tracer = tracing.tracer
        self.duration = tracing.duration
        self.trace_arguments = tracing.trace_arguments
        self.propagator = propagate.get_global_textmap()
        #: The header names the configured propagators read, as ASGI spells them.
        self.header_names = frozenset(name.lower().encode("latin-1") for name in self.propagator.fields)

    def wrap_request(self, answer: Answer) -> Answer:
        async def handle_request(message: Message, ctx: RequestContext) -> dict[str, Any]:
            return await self.request(message, ctx, answer)

        return handle_request

    def wrap_notification(self, notify: Notify) -> Notify:
        async def handle_notification(message: Message, client: ClientState) -> None:
            await self.notification(message, client, notify)

        return handle_notification

    # ------------------------------------------------------------------ parent context
    def _meta_carrier(self, params: Mapping[str, Any]) -> dict[str, str] | None:
        meta = params.get("_meta")
        if not isinstance(meta, dict):
            return None
        carrier: dict[str, str] | None = None
        for key in self.propagator.fields:
            value = meta.get(key)
            if isinstance(value, str) and len(value) <= 8192:
                if carrier is None:
                    carrier = {}
                carrier[key] = value
        return carrier

    def _http_carrier(self, scope: Mapping[str, Any] | None) -> dict[str, str] | None:
        if scope is None:
            return None
        carrier: dict[str, str] | None = None
        names = self.header_names
        for key, value in scope["headers"]:
            if key in names:
                if carrier is None:
                    carrier = {}
                carrier[key.decode("latin-1")] = value.decode("latin-1")
        return carrier

    def _parent(
        self, params: Mapping[str, Any], scope: Mapping[str, Any] | None
    ) -> tuple[otel_context.Context | None, list[Link] | None]:
        """``_meta``'s context as the parent, the HTTP request's as a link; or the HTTP request's
        as the parent; or none (a new trace)."""
        from_meta = self._meta_carrier(params)
        from_http = self._http_carrier(scope)
        http_context = self.propagator.extract(from_http) if from_http is not None else None
        if from_meta is not None:
            meta_context = self.propagator.extract(from_meta)
            if trace.get_current_span(meta_context).get_span_context().is_valid:
                links = None
                if http_context is not None:
                    linked = trace.get_current_span(http_context).get_span_context()
                    if linked.is_valid:
                        links = [Link(linked)]
                return meta_context, links
        return http_context, None

    # ------------------------------------------------------------------ requests
    async def request(self, message: Message, ctx: RequestContext, answer: Answer) -> dict[str, Any]:
        method = message.method
        assert method is not None
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
        elif method in _URI_METHODS:
            uri = params.get("uri")
            if isinstance(uri, str):
                attributes["mcp.resource.uri"] = bounded(uri)
        elif method == "completion/complete":
            ref = params.get("ref")
            if isinstance(ref, dict) and ref.get("type") == "ref/prompt" and isinstance(ref.get("name"), str):
                attributes["gen_ai.prompt.name"] = bounded(ref["name"])
        if client.protocol_version is not None:
            attributes["mcp.protocol.version"] = client.protocol_version
        if ctx.session_id is not None:
            attributes["mcp.session.id"] = ctx.session_id
        scope = ctx.scope
        _network(attributes, scope)
        attributes["mcp_registry.label"] = client.label
        attributes["mcp_registry.agent"] = bounded(client.user or client.principal)
        parent, links = self._parent(params, scope)
        span = self.tracer.start_span(name, parent, SpanKind.SERVER, attributes, links)
        # Current only where the answer may make spans of its own (webhook calls, http resource
        # fetches): attaching and detaching the context costs as much as a few attributes.
        token = otel_context.attach(trace.set_span_in_context(span, parent)) if method in _OUTBOUND_METHODS else None
        started = time.perf_counter()
        try:
            result = await answer(message, ctx)
        except BaseException as exc:  # cancelled: the client went away, or the server is stopping
            if token is not None:
                otel_context.detach(token)
            span.set_attribute("error.type", type(exc).__qualname__)
            span.set_status(Status(StatusCode.ERROR, "request cancelled"))
            span.end()
            raise
        if token is not None:
            otel_context.detach(token)
        if span.is_recording():
            error_type = self._finish(span, method, params, ctx, result)
            span.end()
        else:  # not sampled: nothing to add to it (ending it does nothing either)
            error_type = _error_type(method, result) if self.duration is not None else None
        if self.duration is not None:
            self._record(time.perf_counter() - started, attributes, error_type, ctx)
        return result

    def _finish(
        self, span: trace.Span, method: str, params: Mapping[str, Any], ctx: RequestContext, answer: dict[str, Any]
    ) -> str | None:
        """What only the answer tells: the error, the entry served, the negotiated version (set
        in one call: each call to the span takes its lock and checks every value)."""
        late: dict[str, Any] = {}
        error = answer.get("error")
        error_type: str | None = None
        status: Status | None = None
        if isinstance(error, dict):
            error_type = late["error.type"] = late["rpc.response.status_code"] = str(error.get("code"))
            status = Status(StatusCode.ERROR, bounded(str(error.get("message", ""))))
        else:
            result = answer.get("result")
            if isinstance(result, dict):
                if method == "tools/call" and result.get("isError") is True:
                    error_type = late["error.type"] = "tool_error"
                    status = Status(StatusCode.ERROR, "the tool answered isError")
                elif method == "initialize" and isinstance(result.get("protocolVersion"), str):
                    late["mcp.protocol.version"] = result["protocolVersion"]
        entry = ctx.entry
        if entry is not None:
            late["mcp_registry.entry.version"] = entry.version
            if entry.team is not None:
                late["mcp_registry.entry.team"] = entry.team
        if self.trace_arguments and method in _ARGUMENT_KEYS:
            arguments = params.get("arguments")
            if isinstance(arguments, dict):
                late[_ARGUMENT_KEYS[method]] = _json(arguments)
        if late:
            span.set_attributes(late)
        if status is not None:
            span.set_status(status)
        return error_type

    def _record(
        self, seconds: float, attributes: Mapping[str, Any], error_type: str | None, ctx: RequestContext
    ) -> None:
        assert self.duration is not None
        metric = {key: attributes[key] for key in _METRIC_KEYS if key in attributes}
        if error_type is not None:
            metric["error.type"] = error_type
        if ctx.entry is not None:  # a real entry's name: bounded cardinality
            for key in ("gen_ai.tool.name", "gen_ai.prompt.name"):
                if key in attributes:
                    metric[key] = attributes[key]
        self.duration.record(seconds, metric)

    # ------------------------------------------------------------------ notifications
    async def notification(self, message: Message, client: ClientState, notify: Notify) -> None:
        method = message.method
        assert method is not None
        attributes: dict[str, Any] = {"mcp.method.name": method}
        if client.protocol_version is not None:
            attributes["mcp.protocol.version"] = client.protocol_version
        session_id = getattr(client, "id", None)
        if isinstance(session_id, str) and session_id:
            attributes["mcp.session.id"] = session_id
        parent, links = self._parent(message.params, None)
        started = time.perf_counter()
        with self.tracer.start_as_current_span(
            method, parent, SpanKind.SERVER, attributes, links, record_exception=False, set_status_on_exception=False
        ):
            await notify(message, client)
        if self.duration is not None:
            metric = {key: value for key, value in attributes.items() if key in _METRIC_KEYS}
            self.duration.record(time.perf_counter() - started, metric)


def _error_type(method: str, answer: dict[str, Any]) -> str | None:
    """``error.type`` of an answer, for the histogram of a request whose span is not sampled."""
    error = answer.get("error")
    if isinstance(error, dict):
        return str(error.get("code"))
    result = answer.get("result")
    if method == "tools/call" and isinstance(result, dict) and result.get("isError") is True:
        return "tool_error"
    return None


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
