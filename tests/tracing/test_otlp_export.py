"""End to end: ``mcp-registry serve`` configured by ``OTEL_*`` variables alone exports its spans
over OTLP/HTTP (protobuf) to a receiver on loopback, which decodes them; the duration histogram
arrives too (``OTEL_METRICS_EXPORTER=otlp``), at the latest when the server stops."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from tests.factories import prompt_body
from tests.interop.mcp_wire import ACCEPT_BOTH
from tests.serve_process import ServerProcess
from tests.tracing.otlp_receiver import OtlpReceiver

SPAN_KIND_SERVER = 2  # opentelemetry.proto.trace.v1.Span.SpanKind
STATUS_ERROR = 2


def test_a_server_process_exports_mcp_and_admin_spans_over_otlp_http(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        server = ServerProcess(
            tmp_path / "data",
            env={
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                "OTEL_BSP_SCHEDULE_DELAY": "100",  # ms: spans go out promptly
                "OTEL_METRICS_EXPORTER": "otlp",
                "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=test",
            },
        )
        with server:
            with server.admin() as admin:
                created = admin.post("/api/v1/prompts", json=prompt_body("traced-greeting"))
                assert created.status_code == 201, created.text
            trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
            message = {
                "jsonrpc": "2.0",
                "id": 12,
                "method": "prompts/get",
                "params": {
                    "name": "traced-greeting",
                    "arguments": {"who": "world"},
                    "_meta": {
                        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                        "io.modelcontextprotocol/clientCapabilities": {},
                        "traceparent": f"00-{trace_id}-{parent_id}-01",
                    },
                },
            }
            headers = {
                "Accept": ACCEPT_BOTH,
                "Content-Type": "application/json",
                "MCP-Protocol-Version": "2026-07-28",
                "Mcp-Method": "prompts/get",
                "Mcp-Name": "traced-greeting",
            }
            with server.client() as http:
                answer = http.post("/mcp", content=json.dumps(message), headers=headers)
                assert answer.status_code == 200, answer.text
                assert "result" in answer.json()

            span = receiver.wait_for_span("prompts/get traced-greeting")
            assert span.kind == SPAN_KIND_SERVER
            assert (span.trace_id, span.parent_span_id) == (trace_id, parent_id)
            assert span.attributes["mcp.method.name"] == "prompts/get"
            assert span.attributes["gen_ai.prompt.name"] == "traced-greeting"
            assert span.attributes["mcp.protocol.version"] == "2026-07-28"
            assert span.attributes["jsonrpc.request.id"] == "12"
            assert span.attributes["mcp_registry.entry.version"] == 1
            assert span.attributes["network.transport"] == "tcp"
            assert "world" not in json.dumps(span.attributes)
            assert span.resource["service.name"] == "mcp-registry"
            assert span.resource["deployment.environment.name"] == "test"

            admin_span = receiver.wait_for_span("POST /api/v1/prompts")
            assert admin_span.kind == SPAN_KIND_SERVER
            assert admin_span.attributes["http.response.status_code"] == 201
        # Stopped (SIGTERM): the metrics still pending are exported on the way out.
        receiver.wait_for_metric("mcp.server.operation.duration")
