"""MCP server spans as the OpenTelemetry MCP conventions have them, read from an in-memory
exporter: over streamable HTTP (both protocol eras), legacy SSE and stdio, errors, the parent
from ``_meta`` and from HTTP headers, the registry's own attributes, arguments only when switched
on, the duration histogram, and a webhook that continues the caller's trace."""

from __future__ import annotations

import asyncio
import io
import json
import secrets
import threading
from collections.abc import Sequence
from typing import Any

import httpx
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from registry.mcp.server import McpServer
from registry.mcp.sessions import ClientState
from registry.mcp.transports.stdio import StdioTransport
from registry.runtime import Registry
from tests.factories import prompt_body, tool_body
from tests.http import TLS
from tests.interop.mcp_wire import ACCEPT_BOTH, INITIALIZED, StreamableHttpClient, article_initialize, iter_sse
from tests.tracing.conftest import Traced, in_memory_tracing
from tests.webhooks.conftest import WebhookServer

MODERN = "2026-07-28"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "tracing-test", "version": "1.0.0"},
}
#: A value that must never reach a span unless arguments are switched on.
SECRET_ARGUMENT = "s3cr3t-argument-value"


def traceparent() -> tuple[str, str, str]:
    """A caller's ``traceparent`` and its trace and span ids (hex)."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def trace_hex(span: ReadableSpan) -> str:
    assert span.context is not None
    return format(span.context.trace_id, "032x")


def parent_hex(span: ReadableSpan) -> str | None:
    return None if span.parent is None else format(span.parent.span_id, "016x")


def no_argument_values(spans: Sequence[ReadableSpan]) -> None:
    for span in spans:
        for key, value in (span.attributes or {}).items():
            assert SECRET_ARGUMENT not in str(value), (span.name, key)
        assert SECRET_ARGUMENT not in (span.status.description or ""), span.name


def create(traced: Traced, collection: str, body: dict[str, Any]) -> None:
    with traced.admin() as admin:
        response = admin.post(f"/api/v1/{collection}", json=body)
        assert response.status_code == 201, response.text


def session(traced: Traced, version: str = "2025-11-25") -> StreamableHttpClient:
    client = StreamableHttpClient(httpx.Client(base_url=traced.server.url, timeout=30, verify=TLS))
    client.initialize(version)
    return client


def modern_call(traced: Traced, method: str, params: dict[str, Any], **headers: str) -> dict[str, Any]:
    message = {"jsonrpc": "2.0", "id": "m-1", "method": method, "params": params}
    sent = {
        "Accept": ACCEPT_BOTH,
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
        **headers,
    }
    if "name" in params:
        sent["Mcp-Name"] = params["name"]
    with httpx.Client(base_url=traced.server.url, timeout=30, verify=TLS) as http:
        response = http.post("/mcp", content=json.dumps(message), headers=sent)
    answer = response.json()
    assert isinstance(answer, dict), response.text
    return answer


def test_a_session_request_is_a_server_span_named_after_its_prompt_with_the_callers_parent(traced: Traced) -> None:
    create(traced, "prompts", prompt_body("greet", team=None))
    client = session(traced)
    header, trace_id, span_id = traceparent()
    params = {"name": "greet", "arguments": {"who": SECRET_ARGUMENT}, "_meta": {"traceparent": header}}
    assert "result" in client.request("prompts/get", params, request_id=41)

    span = traced.span("prompts/get greet")
    assert span.kind is SpanKind.SERVER
    assert trace_hex(span) == trace_id and parent_hex(span) == span_id
    attributes = dict(span.attributes or {})
    assert attributes["mcp.method.name"] == "prompts/get"
    assert attributes["gen_ai.prompt.name"] == "greet"
    assert attributes["jsonrpc.request.id"] == "41"
    assert attributes["mcp.protocol.version"] == "2025-11-25"
    assert attributes["mcp.session.id"] == client.session_id
    assert attributes["network.transport"] == "tcp"
    assert attributes["network.protocol.name"] == "http"
    assert attributes["network.protocol.version"] == "1.1"
    assert attributes["client.address"] == "127.0.0.1"
    assert attributes["mcp_registry.entry.version"] == 1
    assert attributes["mcp_registry.label"] == "production"
    assert attributes["mcp_registry.agent"] == "anonymous"
    assert "error.type" not in attributes and span.status.status_code is StatusCode.UNSET
    assert "gen_ai.operation.name" not in attributes  # tools/call only
    no_argument_values(list(traced.exporter.get_finished_spans()))

    initialize = traced.span("initialize")
    assert initialize.attributes is not None
    assert initialize.attributes["mcp.protocol.version"] == "2025-11-25"
    assert traced.span("notifications/initialized").kind is SpanKind.SERVER


def test_meta_context_is_the_parent_and_the_http_headers_a_link(traced: Traced) -> None:
    create(traced, "prompts", prompt_body("greet"))
    client = session(traced)
    in_meta, meta_trace, meta_span = traceparent()
    in_headers, header_trace, header_span = traceparent()
    params = {"name": "greet", "_meta": {"traceparent": in_meta, "baggage": "tenant=blue"}}
    message = {"jsonrpc": "2.0", "id": 5, "method": "prompts/get", "params": params}
    assert client.post(message, traceparent=in_headers).status_code == 200
    span = traced.span("prompts/get greet")
    assert (trace_hex(span), parent_hex(span)) == (meta_trace, meta_span)
    assert [(format(link.context.trace_id, "032x"), format(link.context.span_id, "016x")) for link in span.links] == [
        (header_trace, header_span)
    ]

    # Without one in _meta, the HTTP request's context is the parent.
    traced.exporter.clear()
    message = {"jsonrpc": "2.0", "id": 6, "method": "prompts/get", "params": {"name": "greet"}}
    assert client.post(message, traceparent=in_headers).status_code == 200
    span = traced.span("prompts/get greet")
    assert (trace_hex(span), parent_hex(span)) == (header_trace, header_span)
    assert not span.links


def test_a_stateless_request_has_its_era_and_no_session(traced: Traced) -> None:
    create(traced, "prompts", prompt_body("greet"))
    header, trace_id, span_id = traceparent()
    answer = modern_call(traced, "prompts/get", {"name": "greet", "_meta": {**MODERN_META, "traceparent": header}})
    assert answer["result"]["resultType"] == "complete"
    span = traced.span("prompts/get greet")
    attributes = dict(span.attributes or {})
    assert (trace_hex(span), parent_hex(span)) == (trace_id, span_id)
    assert attributes["mcp.protocol.version"] == MODERN
    assert attributes["jsonrpc.request.id"] == "m-1"
    assert "mcp.session.id" not in attributes
    assert attributes["network.transport"] == "tcp"


def test_a_json_rpc_error_sets_error_type_and_status(traced: Traced) -> None:
    client = session(traced)
    answer = client.request("prompts/get", {"name": "missing"}, request_id=3)
    assert answer["error"]["code"] == -32602
    span = traced.span("prompts/get missing")
    attributes = dict(span.attributes or {})
    assert attributes["error.type"] == "-32602"
    assert attributes["rpc.response.status_code"] == "-32602"
    assert span.status.status_code is StatusCode.ERROR
    # An invalid-params message may quote what the caller sent: the span says what went wrong instead.
    assert span.status.description == "invalid params"
    assert "mcp_registry.entry.version" not in attributes

    client.request("resources/read", {"uri": "docs://nothing/here"}, request_id=4)
    span = traced.span("resources/read")  # no URI in the name: unbounded cardinality
    assert span.status.description == "resource not found"
    assert "mcp.resource.uri" not in (span.attributes or {})  # what was asked for, not what was served


def _read_templated(traced: Traced) -> ReadableSpan:
    suffix = secrets.token_hex(3)
    template = f"cust{suffix}://{{customer}}/notes"
    body = {"name": f"customer-notes-{suffix}", "uriTemplate": template, "kind": "template", "text": "{{ customer }}"}
    create(traced, "resources", body)
    client = session(traced)
    answer = client.request("resources/read", {"uri": f"cust{suffix}://{SECRET_ARGUMENT}/notes"})
    assert SECRET_ARGUMENT in answer["result"]["contents"][0]["text"]
    found = [
        s for s in traced.spans("resources/read") if s.attributes and s.attributes.get("mcp_registry.entry.version")
    ]
    assert len(found) == 1
    return found[0]


def test_a_templated_resource_is_recorded_by_its_template(traced: Traced) -> None:
    """A template's URI is filled in by the caller (``cust://{customer}/notes``): its values are
    arguments, so ``mcp.resource.uri`` is the template unless argument values may be recorded."""
    span = _read_templated(traced)
    uri = str((span.attributes or {})["mcp.resource.uri"])
    assert uri.endswith("://{customer}/notes")
    no_argument_values(traced.exporter.get_finished_spans())


def test_a_templated_resource_is_recorded_as_asked_when_arguments_are_switched_on(traced_arguments: Traced) -> None:
    span = _read_templated(traced_arguments)
    assert str((span.attributes or {})["mcp.resource.uri"]).endswith(f"://{SECRET_ARGUMENT}/notes")


def test_tool_calls_reach_the_webhook_with_the_callers_trace(traced: Traced, webhook_server: WebhookServer) -> None:
    create(traced, "tools", tool_body("inspect", webhook_server.url("/inspect"), team=None))
    create(traced, "tools", tool_body("failing", webhook_server.url("/call-tool-error")))
    client = session(traced)
    header, trace_id, span_id = traceparent()
    params = {"name": "inspect", "arguments": {"text": SECRET_ARGUMENT}, "_meta": {"traceparent": header}}
    result = client.request("tools/call", params, request_id=8)["result"]
    seen = result["structuredContent"]["headers"]

    # The webhook got a traceparent of the caller's trace, whose parent is the registry's client span.
    sent = seen["traceparent"].split("-")
    assert sent[1] == trace_id
    server_span = traced.span("tools/call inspect")
    client_span = traced.span("POST")
    assert client_span.kind is SpanKind.CLIENT
    assert format(client_span.context.span_id, "016x") == sent[2]  # type: ignore[union-attr]
    assert parent_hex(client_span) == format(server_span.context.span_id, "016x")  # type: ignore[union-attr]
    assert (trace_hex(server_span), parent_hex(server_span)) == (trace_id, span_id)
    attributes = dict(client_span.attributes or {})
    assert attributes["http.request.method"] == "POST"
    assert attributes["server.address"] == "127.0.0.1"
    assert attributes["server.port"] == webhook_server.port
    assert attributes["url.full"] == webhook_server.url("/REDACTED")  # a webhook path may be its key
    assert attributes["http.response.status_code"] == 200
    server_attributes = dict(server_span.attributes or {})
    assert server_attributes["gen_ai.tool.name"] == "inspect"
    assert server_attributes["gen_ai.operation.name"] == "execute_tool"
    no_argument_values(list(traced.exporter.get_finished_spans()))

    assert client.request("tools/call", {"name": "failing", "arguments": {}}, request_id=9)["result"]["isError"]
    failing = traced.span("tools/call failing")
    assert (failing.attributes or {})["error.type"] == "tool_error"
    assert failing.status.status_code is StatusCode.ERROR


def test_arguments_are_recorded_only_when_switched_on(traced_arguments: Traced, webhook_server: WebhookServer) -> None:
    create(traced_arguments, "tools", tool_body("inspect", webhook_server.url("/inspect")))
    client = session(traced_arguments)
    client.request("tools/call", {"name": "inspect", "arguments": {"text": SECRET_ARGUMENT}})
    span = traced_arguments.span("tools/call inspect")
    assert json.loads(str((span.attributes or {})["gen_ai.tool.call.arguments"])) == {"text": SECRET_ARGUMENT}


def test_the_legacy_sse_transport_gets_the_same_spans(traced: Traced) -> None:
    create(traced, "prompts", prompt_body("greet"))
    header, trace_id, _ = traceparent()
    answers: dict[Any, dict[str, Any]] = {}
    endpoint: list[str] = []
    ready, answered = threading.Event(), threading.Event()

    with httpx.Client(base_url=traced.server.url, timeout=30, verify=TLS) as http:

        def listen() -> None:
            with http.stream("GET", "/sse", headers={"Accept": "text/event-stream"}) as stream:
                for event in iter_sse(stream.iter_lines()):
                    if event.event == "endpoint":
                        endpoint.append(event.data)
                        ready.set()
                    elif event.data:
                        message = event.json()
                        answers[message.get("id")] = message
                        if message.get("id") == 2:
                            answered.set()
                            return

        reader = threading.Thread(target=listen, daemon=True)
        reader.start()
        assert ready.wait(15), "no endpoint event"
        initialize = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2024-11-05",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        assert http.post(endpoint[0], json=initialize).status_code == 202
        http.post(endpoint[0], json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        params = {"name": "greet", "_meta": {"traceparent": header}}
        assert http.post(endpoint[0], json={"jsonrpc": "2.0", "id": 2, "method": "prompts/get", "params": params})
        assert answered.wait(15), answers
    span = traced.span("prompts/get greet")
    attributes = dict(span.attributes or {})
    assert trace_hex(span) == trace_id
    assert attributes["mcp.protocol.version"] == "2024-11-05"
    assert attributes["network.transport"] == "tcp"
    assert attributes["mcp.session.id"]


def test_the_stdio_transport_gets_the_same_spans_in_both_eras(traced: Traced) -> None:
    create(traced, "prompts", prompt_body("greet"))
    registry: Registry = traced.server.registry
    tracing, exporter, _ = in_memory_tracing()
    session_trace, stateless_trace = traceparent(), traceparent()
    lines = [
        article_initialize("2025-06-18"),
        INITIALIZED,
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "prompts/get",
            "params": {"name": "greet", "_meta": {"traceparent": session_trace[0]}},
        },
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "prompts/get",
            "params": {"name": "greet", "_meta": {**MODERN_META, "traceparent": stateless_trace[0]}},
        },
    ]

    async def run() -> bytes:
        server = McpServer(registry.catalog, tracing=tracing)
        transport = StdioTransport(server, ClientState(label="production", principal="stdio", visible_teams=None))
        reader = asyncio.StreamReader()
        for line in lines:
            reader.feed_data(json.dumps(line).encode() + b"\n")
        reader.feed_eof()
        out = io.BytesIO()
        await transport.run(reader, out)
        await server.aclose()
        return out.getvalue()

    written = [json.loads(line) for line in asyncio.run(run()).splitlines()]
    assert {m["id"] for m in written if "result" in m} == {1, 2, 3}
    spans = {
        (span.name, (span.attributes or {}).get("mcp.protocol.version")): span for span in exporter.get_finished_spans()
    }
    session_span = spans[("prompts/get greet", "2025-06-18")]
    stateless_span = spans[("prompts/get greet", MODERN)]
    assert trace_hex(session_span) == session_trace[1]
    assert trace_hex(stateless_span) == stateless_trace[1]
    for span in (session_span, stateless_span):
        attributes = dict(span.attributes or {})
        assert attributes["network.transport"] == "pipe"
        assert "network.protocol.name" not in attributes and "mcp.session.id" not in attributes
        assert attributes["mcp_registry.agent"] == "stdio"
    tracing.shutdown()


def test_the_duration_histogram_has_the_conventions_buckets(traced: Traced) -> None:
    create(traced, "prompts", prompt_body("greet"))
    client = session(traced)
    client.request("prompts/get", {"name": "greet"})
    client.request("prompts/get", {"name": f"made-up-{secrets.token_hex(4)}"})
    data = traced.metrics.get_metrics_data()
    assert data is not None
    metrics = [m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics]
    duration = next(m for m in metrics if m.name == "mcp.server.operation.duration")
    assert duration.unit == "s"
    points = {tuple(sorted(p.attributes.items())): p for p in duration.data.data_points}  # type: ignore[union-attr]
    ok = next(p for key, p in points.items() if ("gen_ai.prompt.name", "greet") in key)
    assert tuple(ok.explicit_bounds) == (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
    assert ok.count == 1
    failed = [dict(key) for key in points if ("error.type", "-32602") in key]
    assert failed and all("gen_ai.prompt.name" not in key for key in failed)  # made-up names: no series


def test_admin_api_and_ui_requests_are_server_spans_named_by_route(traced: Traced) -> None:
    create(traced, "prompts", prompt_body("greet"))
    header, trace_id, span_id = traceparent()
    with traced.admin() as admin:
        assert admin.get("/api/v1/prompts/greet", headers={"traceparent": header}).status_code == 200
        assert admin.get("/healthz").status_code == 200
        admin.get("/ui/")
    span = traced.span("GET /api/v1/prompts/{name}")
    attributes = dict(span.attributes or {})
    assert span.kind is SpanKind.SERVER
    assert (trace_hex(span), parent_hex(span)) == (trace_id, span_id)
    assert attributes["http.route"] == "/api/v1/prompts/{name}"
    assert attributes["http.response.status_code"] == 200
    assert attributes["url.path"] == "/api/v1/prompts/greet"
    posts = traced.spans("POST /api/v1/prompts")
    assert (posts[0].attributes or {})["http.response.status_code"] == 201
    assert any(name.startswith("GET /ui") for name in traced.names())
    assert not any("/healthz" in name for name in traced.names())


def test_an_admin_requests_query_values_are_not_recorded(traced: Traced) -> None:
    """A query carries single-sign-on codes, search terms, filters: its names are kept, its values not."""
    with traced.admin() as admin:
        assert admin.get("/api/v1/prompts", params={"q": SECRET_ARGUMENT, "limit": "5"}).status_code == 200
    span = traced.span("GET /api/v1/prompts")
    assert (span.attributes or {})["url.query"] == "q=REDACTED&limit=REDACTED"
    no_argument_values([span])


def test_an_http_resource_fetch_is_a_client_span_sending_the_trace(
    traced: Traced, webhook_server: WebhookServer
) -> None:
    url = webhook_server.url("/inspect") + "?key=secret-query"
    create(traced, "resources", {"name": "status", "kind": "http", "uri": "status://payments", "url": url})
    client = session(traced)
    header, trace_id, _ = traceparent()
    params = {"uri": "status://payments", "_meta": {"traceparent": header}}
    contents = client.request("resources/read", params)["result"]["contents"]
    seen = json.loads(contents[0]["text"])
    assert seen["headers"]["traceparent"].split("-")[1] == trace_id
    fetch = traced.span("GET")
    assert fetch.kind is SpanKind.CLIENT and trace_hex(fetch) == trace_id
    assert (fetch.attributes or {})["url.full"] == webhook_server.url("/REDACTED")  # path and query may hold a key
    read = traced.span("resources/read")
    assert parent_hex(fetch) == format(read.context.span_id, "016x")  # type: ignore[union-attr]
    assert (read.attributes or {})["mcp.resource.uri"] == "status://payments"


def test_an_unsampled_caller_is_not_recorded_but_its_decision_reaches_the_webhook(
    traced: Traced, webhook_server: WebhookServer
) -> None:
    create(traced, "tools", tool_body("inspect", webhook_server.url("/inspect")))
    client = session(traced)
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    params = {"name": "inspect", "arguments": {}, "_meta": {"traceparent": f"00-{trace_id}-{span_id}-00"}}
    seen = client.request("tools/call", params)["result"]["structuredContent"]["headers"]
    version, sent_trace, _, flags = seen["traceparent"].split("-")
    assert (version, sent_trace, flags) == ("00", trace_id, "00")  # parent-based: not sampled downstream either
    assert "tools/call inspect" not in traced.names()
