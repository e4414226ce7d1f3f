"""``POST /api/v1/tools/{name}/test`` runs a tool exactly as an agent's ``tools/call`` would: the same
argument validation, the same signed webhook call under the same SSRF guard, the same result
mapping and outputSchema check; it answers the CallToolResult plus the notifications it produced.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from registry.config import Settings
from registry.webhooks import verify
from tests.conftest import LiveServer, start_live_server
from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient
from tests.webhooks.conftest import WebhookServer

SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


def tool(name: str, url: str, **extra: Any) -> dict[str, Any]:
    webhook = {"url": url, **extra.pop("webhook", {})}
    return {"name": name, "description": f"{name} test tool", "inputSchema": SCHEMA, "webhook": webhook, **extra}


def create(server: LiveServer, body: dict[str, Any], **extra: Any) -> None:
    with server.client() as admin:
        created = admin.post("/api/v1/tools", json={**body, **extra})
        assert created.status_code == 201, created.text


def run(server: LiveServer, name: str, arguments: Any, **body: Any) -> dict[str, Any]:
    with server.client() as admin:
        answer = admin.post(f"/api/v1/tools/{name}/test", json={"arguments": arguments, **body})
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def agent_call(server: LiveServer, name: str, arguments: Any) -> dict[str, Any]:
    client = StreamableHttpClient(httpx.Client(base_url=server.url, timeout=30, verify=TLS))
    client.initialize("2025-11-25")
    result: dict[str, Any] = client.request("tools/call", {"name": name, "arguments": arguments})["result"]
    return result


def test_the_webhook_gets_the_signed_call_with_the_stored_headers(
    hooked: LiveServer, webhook_server: WebhookServer
) -> None:
    hook = {"headers": {"X-Api-Key": "key-123"}, "secret": "hook-secret"}
    create(hooked, tool("inspect", webhook_server.url("/inspect"), webhook=hook))
    answer = run(hooked, "inspect", {"text": "hello"})
    assert (answer["version"], answer["label"], answer["notifications"]) == (1, "production", [])
    result = answer["result"]
    assert result["isError"] is False
    seen = result["structuredContent"]
    envelope = json.loads(seen["body"])
    assert envelope["tool"] == "inspect" and envelope["arguments"] == {"text": "hello"}
    assert envelope["request_id"].startswith("test-") and envelope["session"] is None
    assert seen["headers"]["x-api-key"] == "key-123"
    assert verify("hook-secret", seen["body"].encode(), seen["headers"]["x-registry-signature"])


def test_results_are_what_an_agent_gets(hooked: LiveServer, webhook_server: WebhookServer) -> None:
    """Argument errors, a webhook's CallToolResult, an outputSchema violation, an HTTP failure: the
    test endpoint answers each exactly as tools/call does."""
    violated = {"type": "object", "properties": {"pressure": {"type": "number"}}, "required": ["pressure"]}
    create(hooked, tool("native", webhook_server.url("/call-tool-result")))
    create(hooked, tool("barometer", webhook_server.url("/plain-object"), outputSchema=violated))
    create(hooked, tool("broken", webhook_server.url("/status/500")))
    cases = [
        ("native", {"text": 5}),  # invalid arguments: an isError result naming the problem
        ("native", {}),
        ("native", {"text": "hi"}),
        ("barometer", {"text": "hi"}),
        ("broken", {"text": "hi"}),
    ]
    for name, arguments in cases:
        tested = run(hooked, name, arguments)["result"]
        assert tested == agent_call(hooked, name, arguments), (name, arguments)
    assert run(hooked, "native", {"text": 5})["result"]["content"][0]["text"].startswith("invalid arguments")
    assert "outputSchema" in run(hooked, "barometer", {"text": "x"})["result"]["content"][0]["text"]


def test_progress_and_logs_come_back_as_notifications(hooked: LiveServer, webhook_server: WebhookServer) -> None:
    create(hooked, tool("streamer", webhook_server.url("/ndjson"), inputSchema={"type": "object"}))
    answer = run(hooked, "streamer", {})
    assert answer["result"]["content"] == [{"type": "text", "text": "done"}]
    assert answer["result"]["structuredContent"] == {"n": 3}
    notifications = answer["notifications"]
    assert [n["method"] for n in notifications] == [
        "notifications/progress",
        "notifications/message",
        "notifications/progress",
        "notifications/message",
    ]
    assert notifications[0]["params"] == {"progressToken": "test", "progress": 1, "total": 3, "message": "starting"}
    assert notifications[1]["params"] == {"level": "info", "logger": "streamer", "data": {"step": 1}}
    assert notifications[3]["params"]["level"] == "warning"


def test_it_runs_the_version_asked_for(hooked: LiveServer, webhook_server: WebhookServer) -> None:
    create(hooked, tool("weather", webhook_server.url("/plain-object")))
    with hooked.client() as admin:
        staged = tool("weather", webhook_server.url("/call-tool-result"))
        admin.put("/api/v1/tools/weather", json={**staged, "labels": ["staging"]}).raise_for_status()
        assert run(hooked, "weather", {"text": "x"})["result"]["structuredContent"] == {
            "temperature": 21.5,
            "unit": "C",
        }
        for body in ({"label": "staging"}, {"version": 2}):
            answer = run(hooked, "weather", {"text": "x"}, **body)
            assert answer["result"]["structuredContent"] == {"greeting": "hi"}
            assert answer["version"] == 2
        missing = admin.post("/api/v1/tools/weather/test", json={"arguments": {}, "label": "canary"})
        assert missing.status_code == 404 and "no label 'canary'" in missing.json()["detail"]
        unknown = admin.post("/api/v1/tools/nothing/test", json={"arguments": {}})
        assert unknown.status_code == 404
        not_an_object = admin.post("/api/v1/tools/weather/test", json={"arguments": [1, 2]})
        assert not_an_object.status_code == 422


def test_the_ssrf_guard_applies(hooked: LiveServer, settings: Settings, webhook_server: WebhookServer) -> None:
    """Saved where loopback is allowed; tested on a replica (same database) where it is not: the call
    is refused at connect time, as an agent's would be, and nothing reaches the target."""
    create(hooked, tool("internal", webhook_server.url("/inspect")))
    hits = webhook_server.state.hits["/inspect"]
    registry, strict = start_live_server(settings, webhook_allowed_networks="")
    try:
        result = run(strict, "internal", {"text": "x"})["result"]
        assert result["isError"] is True and "refused" in result["content"][0]["text"]
        assert result == agent_call(strict, "internal", {"text": "x"})
        assert webhook_server.state.hits["/inspect"] == hits
    finally:
        strict.stop()
        registry.close()


def test_running_a_tool_takes_an_editor(hooked: LiveServer, webhook_server: WebhookServer) -> None:
    create(hooked, tool("echoed", "builtin://echo", inputSchema={"type": "object"}))
    viewer, _ = hooked.registry.tokens.create("viewer", ["viewer"])
    with hooked.client(viewer) as client:
        refused = client.post("/api/v1/tools/echoed/test", json={"arguments": {"message": "hi"}})
        assert refused.status_code == 403
    answer = run(hooked, "echoed", {"message": "hi"})
    assert answer["result"]["content"][0]["text"] == "Echo: hi"
