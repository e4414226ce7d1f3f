"""Webhook-backed tools and http resources end to end: MCP client -> registry -> a real webhook server."""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import httpx

from registry.config import Settings
from registry.webhooks import verify
from tests.conftest import LiveServer, start_live_server
from tests.factories import tool_body
from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient, parse_sse_body
from tests.webhooks.conftest import WebhookServer


def _create(server: LiveServer, kind: str, body: dict[str, Any]) -> httpx.Response:
    with server.client() as admin:
        return admin.post(f"/api/v1/{kind}", json=body)


def _session(server: LiveServer) -> StreamableHttpClient:
    client = StreamableHttpClient(httpx.Client(base_url=server.url, timeout=30, verify=TLS))
    client.initialize("2025-11-25")
    return client


def test_the_webhook_gets_the_signed_envelope_with_the_stored_headers(
    hooked: LiveServer, webhook_server: WebhookServer
) -> None:
    tool = tool_body(
        "inspect",
        webhook_server.url("/inspect"),
        webhook={"headers": {"X-Api-Key": "key-123"}, "secret": "hook-secret"},
    )
    assert _create(hooked, "tools", tool).status_code == 201
    client = _session(hooked)
    answer = client.request("tools/call", {"name": "inspect", "arguments": {"text": "hello"}}, request_id=7)
    result = answer["result"]
    assert result["isError"] is False
    seen = result["structuredContent"]  # plain JSON answers are wrapped as text + structuredContent
    assert json.loads(result["content"][0]["text"]) == seen
    envelope = json.loads(seen["body"])
    assert envelope == {
        "tool": "inspect",
        "arguments": {"text": "hello"},
        "request_id": 7,
        "session": client.session_id,
        # What the client can answer if the webhook asks for input (its initialize capabilities).
        "client_capabilities": {"roots": {"listChanged": True}, "sampling": {}},
    }
    assert seen["headers"]["x-api-key"] == "key-123"
    assert verify("hook-secret", seen["body"].encode(), seen["headers"]["x-registry-signature"])
    assert not verify("other-secret", seen["body"].encode(), seen["headers"]["x-registry-signature"])


def test_ndjson_progress_and_logs_reach_the_caller_before_the_result(
    hooked: LiveServer, webhook_server: WebhookServer
) -> None:
    assert _create(hooked, "tools", tool_body("streamer", webhook_server.url("/ndjson"))).status_code == 201
    client = _session(hooked)
    assert client.request("logging/setLevel", {"level": "debug"})["result"] == {}
    response = client.post(
        {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "tools/call",
            "params": {"name": "streamer", "arguments": {}, "_meta": {"progressToken": "tok"}},
        }
    )
    assert response.headers["content-type"].startswith("text/event-stream")
    messages = [e.json() for e in parse_sse_body(response.text) if e.data]
    assert [m.get("method", "result") for m in messages] == [
        "notifications/progress",
        "notifications/message",
        "notifications/progress",
        "notifications/message",
        "result",
    ]
    assert messages[0]["params"] == {"progressToken": "tok", "progress": 1, "total": 3, "message": "starting"}
    assert messages[1]["params"] == {"level": "info", "logger": "streamer", "data": {"step": 1}}
    assert messages[3]["params"]["level"] == "warning"
    assert messages[4]["id"] == 5
    assert messages[4]["result"]["content"] == [{"type": "text", "text": "done"}]


def test_logs_below_the_session_level_are_not_sent(hooked: LiveServer, webhook_server: WebhookServer) -> None:
    assert _create(hooked, "tools", tool_body("streamer", webhook_server.url("/ndjson"))).status_code == 201
    client = _session(hooked)
    client.request("logging/setLevel", {"level": "warning"})
    response = client.post(
        {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "streamer", "arguments": {}}}
    )
    messages = [e.json() for e in parse_sse_body(response.text) if e.data]
    logs = [m for m in messages if m.get("method") == "notifications/message"]
    assert [m["params"]["level"] for m in logs] == ["warning"]
    assert not [m for m in messages if m.get("method") == "notifications/progress"]  # no progressToken sent


def test_notifications_cancelled_stops_the_webhook_call(hooked: LiveServer, webhook_server: WebhookServer) -> None:
    key = f"cancel-{uuid.uuid4().hex}"  # the webhook server outlives this test
    url = webhook_server.url(f"/ndjson-forever?key={key}")
    assert _create(hooked, "tools", tool_body("forever", url, webhook={"timeout_s": 60})).status_code == 201
    client = _session(hooked)
    call: dict[str, Any] = {}

    def run_call() -> None:
        started = time.monotonic()
        call["response"] = client.post(
            {"jsonrpc": "2.0", "id": 42, "method": "tools/call", "params": {"name": "forever", "arguments": {}}}
        )
        call["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run_call)
    thread.start()
    assert webhook_server.state.streaming[key].wait(10), "the webhook call did not start streaming"
    assert not webhook_server.state.closed[key].is_set()
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 42, "reason": "user"}}
    assert client.post(cancel).status_code == 202
    assert webhook_server.state.closed[key].wait(10), "the webhook call was not stopped"
    thread.join(timeout=15)
    assert call["seconds"] < 15


def test_output_schema_is_enforced(hooked: LiveServer, webhook_server: WebhookServer) -> None:
    fits = {
        "type": "object",
        "properties": {"temperature": {"type": "number"}, "unit": {"type": "string"}},
        "required": ["temperature", "unit"],
    }
    does_not = {"type": "object", "properties": {"pressure": {"type": "number"}}, "required": ["pressure"]}
    url = webhook_server.url("/plain-object")
    assert _create(hooked, "tools", tool_body("weather", url, outputSchema=fits)).status_code == 201
    assert _create(hooked, "tools", tool_body("barometer", url, outputSchema=does_not)).status_code == 201
    client = _session(hooked)
    good = client.request("tools/call", {"name": "weather", "arguments": {}})["result"]
    assert good["isError"] is False and good["structuredContent"] == {"temperature": 21.5, "unit": "C"}
    bad = client.request("tools/call", {"name": "barometer", "arguments": {}})["result"]
    assert bad["isError"] is True
    assert "outputSchema" in bad["content"][0]["text"] and "pressure" in bad["content"][0]["text"]


def test_webhook_failures_are_tool_errors_not_protocol_errors(
    hooked: LiveServer, webhook_server: WebhookServer
) -> None:
    assert _create(hooked, "tools", tool_body("broken", webhook_server.url("/status/500"))).status_code == 201
    assert (
        _create(
            hooked, "tools", tool_body("slowpoke", webhook_server.url("/slow?s=5"), webhook={"timeout_s": 0.5})
        ).status_code
        == 201
    )
    client = _session(hooked)
    broken = client.request("tools/call", {"name": "broken", "arguments": {}})
    assert "error" not in broken and broken["result"]["isError"] is True
    assert "500" in broken["result"]["content"][0]["text"]
    slow = client.request("tools/call", {"name": "slowpoke", "arguments": {}})["result"]
    assert slow["isError"] is True and "timed out" in slow["content"][0]["text"]


def test_ssrf_guard_at_save_time_and_at_call_time(
    hooked: LiveServer, settings: Settings, webhook_server: WebhookServer
) -> None:
    # Saved through a registry that allows loopback...
    assert _create(hooked, "tools", tool_body("internal", webhook_server.url("/inspect"))).status_code == 201
    hits_before = webhook_server.state.hits["/inspect"]
    # ...served by a replica on the same database that does not: refused when called.
    registry, strict = start_live_server(settings, webhook_allowed_networks="")
    try:
        refused = _create(strict, "tools", tool_body("sneaky", webhook_server.url("/inspect", host="localhost")))
        assert refused.status_code == 422
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert "loopback" in refused.json()["detail"]
        client = _session(strict)
        result = client.request("tools/call", {"name": "internal", "arguments": {}})["result"]
        assert result["isError"] is True
        assert "refused" in result["content"][0]["text"]
        assert webhook_server.state.hits["/inspect"] == hits_before  # nothing reached the target
    finally:
        strict.stop()
        registry.close()


def test_http_resources_are_fetched_and_cached_for_their_ttl(hooked: LiveServer, webhook_server: WebhookServer) -> None:
    resource = {
        "name": "weather-now",
        "uri": "weather://now",
        "kind": "http",
        "mimeType": "application/json",
        "url": webhook_server.url("/plain-object"),
        "cache_ttl_s": 60,
    }
    assert _create(hooked, "resources", resource).status_code == 201
    client = _session(hooked)
    hits = webhook_server.state.hits["/plain-object"]
    for _ in range(3):
        contents = client.request("resources/read", {"uri": "weather://now"})["result"]["contents"]
        assert json.loads(contents[0]["text"]) == {"temperature": 21.5, "unit": "C"}
    assert webhook_server.state.hits["/plain-object"] == hits + 1
