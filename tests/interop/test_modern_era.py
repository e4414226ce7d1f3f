"""Protocol 2026-07-28 (stateless) beside the session era on ``/mcp`` and stdio, on the wire.

Raw HTTP with httpx against the real server on a loopback port (and real ``mcp-registry stdio``
children): every rung of the validation ladder with its status, code and echoed id; discovery;
the stamping every stateless result carries; the removed methods; resource-not-found per era;
and the two eras interleaved on one server, serving one catalog.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import httpx
import pytest

from registry.catalog.values import WriteOptions
from registry.config import Settings
from registry.mcp.protocol import (
    ALL_VERSIONS,
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
    META_PROTOCOL_VERSION,
    META_SERVER_INFO,
    META_SUBSCRIPTION_ID,
)
from registry.runtime import Registry
from tests.conftest import LiveServer, start_live_server
from tests.http import TLS
from tests.interop.mcp_wire import (
    ACCEPT_BOTH,
    StdioProcess,
    StreamableHttpClient,
    child_env,
    iter_sse,
    mcp_registry_command,
    response_messages,
)
from tests.waiting import wait_until

MODERN = "2026-07-28"
META: dict[str, Any] = {
    META_PROTOCOL_VERSION: MODERN,
    META_CLIENT_CAPABILITIES: {},
    META_CLIENT_INFO: {"name": "wire-test", "version": "1.0.0"},
}
NAME_FIELDS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
CACHEABLE = ("tools/list", "prompts/list", "resources/list", "resources/templates/list")


def body(method: str, params: dict[str, Any] | None = None, *, request_id: Any = 1, meta: Any = None) -> dict[str, Any]:
    params = dict(params or {})
    params["_meta"] = META if meta is None else meta
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def headers_for(message: dict[str, Any], **extra: str) -> dict[str, str]:
    """The standard request headers a 2026-07-28 client sends for ``message``."""
    headers = {
        "Accept": ACCEPT_BOTH,
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": message["method"],
    }
    field = NAME_FIELDS.get(message["method"])
    if field is not None:
        headers["Mcp-Name"] = message["params"][field]
    headers.update(extra)
    return headers


@pytest.fixture
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with server.client(token=None) as client:
        yield client


def post(http: httpx.Client, message: Any, headers: dict[str, str] | None = None, url: str = "/mcp") -> httpx.Response:
    return http.post(url, content=json.dumps(message), headers=headers or headers_for(message))


def call(http: httpx.Client, method: str, params: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    """A valid modern request; returns its one JSON-RPC answer (checking a JSON 200 or SSE)."""
    message = body(method, params, **kw)
    response = post(http, message)
    messages = response_messages(response)
    answer = messages[-1]
    assert answer["id"] == message["id"], messages
    assert "mcp-session-id" not in response.headers
    return answer


def assert_error(response: httpx.Response, status: int, code: int, request_id: Any) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"] == "application/json"
    answer = response.json()
    assert answer["jsonrpc"] == "2.0" and answer["id"] == request_id, answer
    assert answer["error"]["code"] == code, answer
    error: dict[str, Any] = answer["error"]
    return error


def assert_stamped(result: dict[str, Any], *, cache_scope: str | None) -> None:
    assert result["resultType"] == "complete", result
    info = result["_meta"][META_SERVER_INFO]
    assert info["name"] == "mcp-registry" and isinstance(info["version"], str), info
    if cache_scope is None:
        assert "ttlMs" not in result and "cacheScope" not in result, result
    else:
        assert result["ttlMs"] == 5000 and isinstance(result["ttlMs"], int), result
        assert result["cacheScope"] == cache_scope, result


# ---------------------------------------------------------------- server/discover


def test_discover(http: httpx.Client) -> None:
    message = body("server/discover", request_id="discover-1")
    response = post(http, message)
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    assert "mcp-session-id" not in response.headers
    answer = response.json()
    assert answer["id"] == "discover-1"
    result = answer["result"]
    assert result["supportedVersions"] == list(ALL_VERSIONS)
    assert MODERN in result["supportedVersions"] and "2025-11-25" in result["supportedVersions"]
    capabilities = result["capabilities"]
    for capability in ("prompts", "resources", "tools", "completions", "logging"):
        assert isinstance(capabilities[capability], dict), capabilities
    assert "registry" in result["instructions"]
    assert result["_meta"][META_SERVER_INFO]["title"] == "MCP Registry"
    assert_stamped(result, cache_scope="public")


def test_discover_without_client_info_is_fine(http: httpx.Client) -> None:
    meta = {META_PROTOCOL_VERSION: MODERN, META_CLIENT_CAPABILITIES: {}}
    answer = call(http, "server/discover", meta=meta)
    assert answer["result"]["supportedVersions"] == list(ALL_VERSIONS)


def test_modern_session_header_is_ignored(http: httpx.Client) -> None:
    """An ``Mcp-Session-Id`` on a stateless request neither opens nor names anything."""
    message = body("tools/list")
    response = post(http, message, headers_for(message, **{"Mcp-Session-Id": "no-such-session"}))
    assert response.status_code == 200 and "mcp-session-id" not in response.headers
    assert response.json()["result"]["tools"]


# ---------------------------------------------------------------- the validation ladder


@pytest.mark.parametrize(
    ("params", "request_id"),
    [
        ({}, 101),
        ({"_meta": {META_CLIENT_CAPABILITIES: {}}}, 102),
        ({"_meta": {META_PROTOCOL_VERSION: MODERN}}, 104),
        ({"_meta": {META_PROTOCOL_VERSION: MODERN, META_CLIENT_CAPABILITIES: []}}, "s-105"),
        ({"_meta": "2026-07-28"}, 106),
    ],
)
def test_missing_required_meta_is_400_invalid_params(http: httpx.Client, params: Any, request_id: Any) -> None:
    message = {"jsonrpc": "2.0", "id": request_id, "method": "server/discover", "params": params}
    assert_error(post(http, message, headers_for(message)), 400, -32602, request_id)


def test_unsupported_version_is_400_with_the_supported_list(http: httpx.Client) -> None:
    meta = {**META, META_PROTOCOL_VERSION: "v999.0.0"}
    message = body("server/discover", request_id=301, meta=meta)
    error = assert_error(
        post(http, message, headers_for(message, **{"MCP-Protocol-Version": "v999.0.0"})), 400, -32022, 301
    )
    assert error["data"] == {"supported": list(ALL_VERSIONS), "requested": "v999.0.0"}


def test_unknown_version_header_without_meta_is_unsupported_version(http: httpx.Client) -> None:
    """A session-era client sending a version it was never offered is told the versions served."""
    message = {"jsonrpc": "2.0", "id": 303, "method": "ping"}
    response = http.post(
        "/mcp", content=json.dumps(message), headers={"Accept": ACCEPT_BOTH, "MCP-Protocol-Version": "1999-01-01"}
    )
    error = assert_error(response, 400, -32022, 303)
    assert error["data"] == {"supported": list(ALL_VERSIONS), "requested": "1999-01-01"}
    assert "1999-01-01" in error["message"]


def test_header_and_body_versions_disagree_is_header_mismatch(http: httpx.Client) -> None:
    """The mismatch is found before the version is judged (header 2026-07-28, body v999)."""
    message = body("server/discover", request_id=302, meta={**META, META_PROTOCOL_VERSION: "v999.0.0"})
    error = assert_error(post(http, message), 400, -32020, 302)
    assert "MCP-Protocol-Version" in error["message"]


def test_missing_version_header_with_modern_meta_is_header_mismatch(http: httpx.Client) -> None:
    message = body("tools/list", request_id=7)
    headers = headers_for(message)
    del headers["MCP-Protocol-Version"]
    error = assert_error(post(http, message, headers), 400, -32020, 7)
    assert "missing MCP-Protocol-Version" in error["message"]


@pytest.mark.parametrize(
    ("method", "params", "change"),
    [
        ("tools/list", {}, {"Mcp-Method": "TOOLS/LIST"}),
        ("tools/list", {}, {"Mcp-Method": "prompts/list"}),
        ("tools/list", {}, {"Mcp-Method": None}),
        ("tools/call", {"name": "echo", "arguments": {"message": "x"}}, {"Mcp-Name": None}),
        ("tools/call", {"name": "echo", "arguments": {"message": "x"}}, {"Mcp-Name": "add"}),
        ("tools/call", {"name": "echo", "arguments": {"message": "x"}}, {"Mcp-Name": "ECHO"}),
        ("prompts/get", {"name": "summarize", "arguments": {"text": "t"}}, {"Mcp-Name": "code-review"}),
        ("resources/read", {"uri": "info://server-info"}, {"Mcp-Name": "info://other"}),
        ("resources/read", {"uri": "info://server-info"}, {"Mcp-Name": None}),
        # Malformed encodings match nothing: bad base64, non-canonical padding, bad UTF-8.
        ("tools/call", {"name": "echo", "arguments": {"message": "x"}}, {"Mcp-Name": "=?base64?ZWNobw?=="}),
        ("tools/call", {"name": "echo", "arguments": {"message": "x"}}, {"Mcp-Name": "=?base64?ZWNobx==?="}),
        ("tools/call", {"name": "echo", "arguments": {"message": "x"}}, {"Mcp-Name": "=?base64?/w==?="}),
        ("tools/call", {"name": "echo", "arguments": {"message": "x"}}, {"Mcp-Name": "=?BASE64?ZWNobw==?="}),
    ],
)
def test_header_mismatches_are_400_header_mismatch(
    http: httpx.Client, method: str, params: dict[str, Any], change: dict[str, str | None]
) -> None:
    message = body(method, params, request_id="h-1")
    headers = headers_for(message)
    for name, value in change.items():
        if value is None:
            del headers[name]
        else:
            headers[name] = value
    assert_error(post(http, message, headers), 400, -32020, "h-1")


def test_duplicated_mcp_header_is_header_mismatch(server: LiveServer) -> None:
    message = body("tools/list", request_id=9)
    raw = [
        (b"accept", ACCEPT_BOTH.encode()),
        (b"content-type", b"application/json"),
        (b"mcp-protocol-version", MODERN.encode()),
        (b"mcp-method", b"tools/list"),
        (b"Mcp-Method", b"tools/list"),
    ]
    with httpx.Client(base_url=server.url, timeout=30, verify=TLS) as client:
        response = client.post("/mcp", content=json.dumps(message), headers=raw)
    assert_error(response, 400, -32020, 9)


@pytest.mark.parametrize("name_header", ["  echo  ", "\techo", "=?base64?ZWNobw==?=", "  =?base64?ZWNobw==?= "])
def test_name_header_forms_that_match(server: LiveServer, name_header: str) -> None:
    """OWS around a value is trimmed; the base64 sentinel form is decoded before comparing.
    (http.client: httpx refuses to send a header value with surrounding whitespace.)"""
    message = body("tools/call", {"name": "echo", "arguments": {"message": "hi"}}, request_id=5)
    connection = HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request("POST", "/mcp", json.dumps(message), headers_for(message, **{"Mcp-Name": name_header}))
        response = connection.getresponse()
        status, answer = response.status, json.loads(response.read())
    finally:
        connection.close()
    assert status == 200, answer
    assert answer["result"]["content"] == [{"type": "text", "text": "Echo: hi"}]


def test_non_ascii_names_travel_base64_encoded(demo: Registry, http: httpx.Client) -> None:
    uri = "docs://café/menü"
    demo.catalog.create(
        "resource", {"name": "cafe", "uri": uri, "kind": "static", "text": "Crème"}, WriteOptions(actor="t")
    )
    message = body("resources/read", {"uri": uri}, request_id=6)
    encoded = "=?base64?" + base64.b64encode(uri.encode()).decode() + "?="
    response = post(http, message, headers_for(message, **{"Mcp-Name": encoded}))
    assert response.status_code == 200, response.text
    assert response.json()["result"]["contents"][0]["text"] == "Crème"


@pytest.fixture
def regional_echo(demo: Registry) -> str:
    """An echo tool whose ``message`` argument is mirrored in ``Mcp-Param-Region`` (x-mcp-header)."""
    schema = {
        "type": "object",
        "properties": {"message": {"type": "string", "x-mcp-header": "Region"}},
        "required": ["message"],
    }
    tool = {"name": "regional-echo", "description": "echo", "inputSchema": schema, "webhook": {"url": "builtin://echo"}}
    demo.catalog.create("tool", tool, WriteOptions(actor="t"))
    return "regional-echo"


@pytest.mark.parametrize(
    ("message_value", "param_header", "status"),
    [
        ("Hello", "Hello", 200),
        ("Hello", "=?base64?SGVsbG8=?=", 200),
        ("Grüße", "=?base64?" + base64.b64encode("Grüße".encode()).decode() + "?=", 200),
        ("SGVsbG8=", "SGVsbG8=", 200),  # no sentinel: a literal
        ("=?base64?SGVsbG8=", "=?base64?SGVsbG8=", 200),  # no closing marker: a literal
        ("Hello", "=?base64?SGVsbG8?=", 400),  # bad padding
        ("Hello", "=?base64?SGVs!!!bG8=?=", 400),  # not base64
        ("Hello", "Bye", 400),
        ("Hello", None, 400),
    ],
)
def test_custom_param_headers_mirror_annotated_arguments(
    http: httpx.Client, regional_echo: str, message_value: str, param_header: str | None, status: int
) -> None:
    message = body("tools/call", {"name": regional_echo, "arguments": {"message": message_value}}, request_id=60)
    headers = headers_for(message)
    if param_header is not None:
        headers["Mcp-Param-Region"] = param_header
    response = post(http, message, headers)
    if status == 200:
        assert response.status_code == 200, response.text
        assert response.json()["result"]["content"] == [{"type": "text", "text": f"Echo: {message_value}"}]
    else:
        assert_error(response, 400, -32020, 60)


def test_custom_param_header_without_its_argument_is_refused(http: httpx.Client, regional_echo: str) -> None:
    message = body("tools/call", {"name": regional_echo, "arguments": {}}, request_id=61)
    assert_error(post(http, message, headers_for(message, **{"Mcp-Param-Region": "x"})), 400, -32020, 61)


def test_invalid_log_level_is_invalid_params(http: httpx.Client) -> None:
    message = body("tools/list", request_id=8, meta={**META, META_LOG_LEVEL: "loud"})
    assert_error(post(http, message), 400, -32602, 8)


def test_batch_is_400_invalid_request(http: httpx.Client) -> None:
    batch = [body("tools/list", request_id=1), body("prompts/list", request_id=2)]
    response = http.post("/mcp", content=json.dumps(batch), headers=headers_for(batch[0]))
    assert response.status_code == 400 and response.headers["content-type"] == "application/json"
    assert response.json()["error"]["code"] == -32600


def test_notification_is_202_without_body(http: httpx.Client) -> None:
    message = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1, "_meta": META}}
    response = post(http, message)
    assert response.status_code == 202 and response.content == b""


@pytest.mark.parametrize("verb", ["GET", "DELETE"])
def test_modern_get_and_delete_are_405(http: httpx.Client, verb: str) -> None:
    response = http.request(verb, "/mcp", headers={"Accept": ACCEPT_BOTH, "MCP-Protocol-Version": MODERN})
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert response.headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("initialize", {"protocolVersion": MODERN, "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}),
        ("ping", {}),
        ("logging/setLevel", {"level": "debug"}),
        ("resources/subscribe", {"uri": "info://server-info"}),
        ("resources/unsubscribe", {"uri": "info://server-info"}),
        ("unknown/method", {}),
    ],
)
def test_removed_and_unknown_methods_are_404(http: httpx.Client, method: str, params: dict[str, Any]) -> None:
    message = body(method, params, request_id=f"r-{method}")
    assert_error(post(http, message), 404, -32601, f"r-{method}")


# ---------------------------------------------------------------- results


def test_every_result_is_stamped(http: httpx.Client) -> None:
    for method in CACHEABLE:
        assert_stamped(call(http, method)["result"], cache_scope="public")
    read = call(http, "resources/read", {"uri": "info://server-info"})["result"]
    assert_stamped(read, cache_scope="public")
    assert read["contents"][0]["uri"] == "info://server-info"
    tool = call(http, "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}})["result"]
    assert_stamped(tool, cache_scope=None)
    assert tool["content"] == [{"type": "text", "text": "1 + 2 = 3"}] and tool["isError"] is False
    prompt = call(http, "prompts/get", {"name": "summarize", "arguments": {"text": "t"}})["result"]
    assert_stamped(prompt, cache_scope=None)
    completion = call(
        http,
        "completion/complete",
        {"ref": {"type": "ref/prompt", "name": "code-review"}, "argument": {"name": "language", "value": "py"}},
    )["result"]
    assert_stamped(completion, cache_scope=None)
    assert completion["completion"]["values"] == ["python"]


def test_a_chosen_label_or_a_token_makes_results_private(demo: Registry, server: LiveServer) -> None:
    with server.client(token=None) as anonymous:
        message = body("tools/list")
        staging = post(anonymous, message, url="/mcp?label=staging").json()["result"]
        assert_stamped(staging, cache_scope="private")
    token, _ = demo.tokens.create("modern-agent", ["agent"])
    with server.client(token=token) as agent:
        for method in CACHEABLE:
            assert_stamped(call(agent, method)["result"], cache_scope="private")
        discover = call(agent, "server/discover")["result"]
        assert_stamped(discover, cache_scope="public")


def test_cache_ttl_is_a_setting(demo: Registry, settings: Settings) -> None:
    registry, server = start_live_server(settings, cache_ttl_ms=60000)
    try:
        with server.client(token=None) as client:
            assert call(client, "tools/list")["result"]["ttlMs"] == 60000
            assert call(client, "server/discover")["result"]["ttlMs"] == 60000
    finally:
        server.stop()
        registry.close()


def test_a_label_the_caller_may_not_pick_is_403_with_the_id(http: httpx.Client) -> None:
    message = body("tools/list", request_id="l-1")
    assert_error(post(http, message, url="/mcp?label=unreleased"), 403, -32001, "l-1")


def test_resource_not_found_per_era(http: httpx.Client) -> None:
    uri = "test://nonexistent-resource-for-conformance-testing"
    message = body("resources/read", {"uri": uri}, request_id=11)
    error = assert_error(post(http, message), 400, -32602, 11)
    assert error["data"] == {"uri": uri}
    legacy = StreamableHttpClient(http)
    legacy.initialize("2025-11-25")
    answer = legacy.request("resources/read", {"uri": uri}, request_id=12)
    assert answer["error"]["code"] == -32002 and answer["error"]["data"] == {"uri": uri}


def test_unknown_tool_is_invalid_params_with_its_id(http: httpx.Client) -> None:
    message = body("tools/call", {"name": "nope", "arguments": {}}, request_id=13)
    assert_error(post(http, message), 400, -32602, 13)


def test_modern_completion_history_is_per_token(demo: Registry, server: LiveServer) -> None:
    """A token's stateless requests share completion history; anonymous ones keep none."""
    token, _ = demo.tokens.create("completing-agent", ["agent"])
    ref = {"type": "ref/resource", "uri": "sprint://{team}/current"}
    with server.client(token=token) as agent, server.client(token=None) as anonymous:
        for client in (agent, anonymous):
            call(client, "resources/read", {"uri": "sprint://payments/current"})
        params = {"ref": ref, "argument": {"name": "team", "value": "pay"}}
        assert call(agent, "completion/complete", params)["result"]["completion"]["values"] == ["payments"]
        assert call(anonymous, "completion/complete", params)["result"]["completion"]["values"] == []


# ---------------------------------------------------------------- both eras on one server


def test_sessions_and_stateless_requests_interleave_on_one_catalog(demo: Registry, http: httpx.Client) -> None:
    legacy = StreamableHttpClient(http)
    legacy.initialize("2025-11-25")

    def both(method: str) -> tuple[Any, Any]:
        old = legacy.request(method, {}, request_id=20)["result"]
        new = call(http, method, request_id=21)["result"]
        return old, new

    for method in CACHEABLE:
        old, new = both(method)
        assert "resultType" not in old and "_meta" not in old and "ttlMs" not in old  # legacy stays as it was
        assert {k: v for k, v in new.items() if k not in ("resultType", "_meta", "ttlMs", "cacheScope")} == old
    demo.catalog.create("prompt", {"name": "interleaved", "template": "Both eras"}, WriteOptions(actor="t"))
    listed: dict[str, set[str]] = {}

    def both_list_it() -> bool:
        old, new = both("prompts/list")
        listed.update(old={p["name"] for p in old["prompts"]}, new={p["name"] for p in new["prompts"]})
        return "interleaved" in listed["old"] and "interleaved" in listed["new"]

    wait_until(both_list_it, lambda: f"both eras to list the new prompt: {listed}")
    # The session still works after the stateless requests (nothing of its state was touched).
    assert legacy.request("ping", None, request_id=22)["result"] == {}


def test_progress_switches_the_answer_to_sse_without_event_ids(demo: Registry, http: httpx.Client) -> None:
    for name, hook in (("test_tool_with_progress", "progress"), ("test_tool_with_logging", "logging")):
        tool = {"name": name, "description": hook, "webhook": {"url": f"builtin://conformance-{hook}"}}
        demo.catalog.create(
            "tool", {**tool, "inputSchema": {"type": "object", "properties": {}}}, WriteOptions(actor="t")
        )
    params = {"name": "test_tool_with_progress", "arguments": {}}
    meta = {**META, "progressToken": "progress-test-1"}
    message = body("tools/call", params, request_id=31, meta=meta)
    with http.stream("POST", "/mcp", content=json.dumps(message), headers=headers_for(message)) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-accel-buffering"] == "no"
        events = list(iter_sse(response.iter_lines()))
    assert all(event.id is None for event in events), events
    frames = [event.json() for event in events]
    progress = [f for f in frames if f.get("method") == "notifications/progress"]
    assert progress and all(f["params"]["progressToken"] == "progress-test-1" for f in progress)
    assert frames[-1]["id"] == 31 and frames[-1]["result"]["resultType"] == "complete"

    # Logging: only when the request asks for it (logLevel in _meta), only on its stream.
    quiet = response_messages(post(http, body("tools/call", {"name": "test_tool_with_logging"}, request_id=32)))
    assert len(quiet) == 1 and quiet[0]["result"]["resultType"] == "complete", quiet
    message = body(
        "tools/call",
        {"name": "test_tool_with_logging", "arguments": {}},
        request_id=33,
        meta={**META, META_LOG_LEVEL: "info"},
    )
    frames = response_messages(post(http, message))
    logs = [f for f in frames if f.get("method") == "notifications/message"]
    assert [f["params"]["data"] for f in logs] == [
        "Tool execution started",
        "Tool processing data",
        "Tool execution completed",
    ]
    assert frames[-1]["id"] == 33
    message = body(
        "tools/call",
        {"name": "test_tool_with_logging", "arguments": {}},
        request_id=34,
        meta={**META, META_LOG_LEVEL: "error"},
    )
    assert [f for f in response_messages(post(http, message)) if "method" in f] == []


# ---------------------------------------------------------------- subscriptions/listen over HTTP


def test_listen_over_http_acks_then_delivers_list_changes(demo: Registry, http: httpx.Client) -> None:
    message = body("subscriptions/listen", {"notifications": {"promptsListChanged": True}}, request_id="listen-1")
    with http.stream("POST", "/mcp", content=json.dumps(message), headers=headers_for(message)) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-accel-buffering"] == "no"
        events = iter_sse(response.iter_lines())
        ack = next(events)
        assert ack.id is None
        frame = ack.json()
        assert frame["method"] == "notifications/subscriptions/acknowledged"
        assert frame["params"]["_meta"][META_SUBSCRIPTION_ID] == "listen-1"
        assert frame["params"]["notifications"] == {"promptsListChanged": True}
        demo.catalog.create(
            "resource", {"name": "unheard", "uri": "docs://x", "kind": "static", "text": "x"}, WriteOptions(actor="t")
        )
        demo.catalog.create("prompt", {"name": "listened", "template": "x"}, WriteOptions(actor="t"))
        changed = next(event for event in events if event.data)
        assert changed.json() == {
            "jsonrpc": "2.0",
            "method": "notifications/prompts/list_changed",
            "params": {"_meta": {META_SUBSCRIPTION_ID: "listen-1"}},
        }


def test_listen_with_a_bad_filter_is_invalid_params(http: httpx.Client) -> None:
    message = body("subscriptions/listen", {"notifications": {"resourceSubscriptions": "not-a-list"}}, request_id=41)
    assert_error(post(http, message), 400, -32602, 41)


# ---------------------------------------------------------------- stdio


@pytest.fixture
def stdio_argv(demo: Registry, database_url: str, tmp_path: Path) -> list[str]:
    return [*mcp_registry_command(), "stdio", "--database-url", database_url, "--data-dir", str(tmp_path / "stdio")]


def test_stdio_serves_both_eras(stdio_argv: list[str]) -> None:
    modern = StdioProcess(stdio_argv, child_env())
    legacy = StdioProcess(stdio_argv, child_env())
    try:
        discover = modern.rpc(body("server/discover", request_id="d-1"))
        assert discover is not None
        assert discover["result"]["supportedVersions"] == list(ALL_VERSIONS)
        assert_stamped(discover["result"], cache_scope="public")
        init = legacy.rpc(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "l", "version": "1"},
                },
            }
        )
        assert init is not None and init["result"]["protocolVersion"] == "2025-11-25"
        legacy.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        old = legacy.rpc({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        new = modern.rpc(body("tools/list", request_id=2))
        assert old is not None and new is not None
        assert new["result"]["tools"] == old["result"]["tools"] and "resultType" not in old["result"]
        assert_stamped(new["result"], cache_scope="public")
        # The modern child never initialized: its session-era requests still need initialize,
        # while stateless ones are served; removed methods are not found.
        unready = modern.rpc({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
        assert unready is not None and unready["error"]["code"] == -32600
        assert modern.rpc(body("ping", request_id=4))["error"]["code"] == -32601  # type: ignore[index]
        missing = modern.rpc(
            {"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {"_meta": {META_PROTOCOL_VERSION: MODERN}}}
        )
        assert missing is not None and missing["error"]["code"] == -32602
        future = modern.rpc(body("tools/list", request_id=6, meta={**META, META_PROTOCOL_VERSION: "2099-01-01"}))
        assert future is not None and future["error"]["code"] == -32022
        assert future["error"]["data"] == {"supported": list(ALL_VERSIONS), "requested": "2099-01-01"}
        gone = modern.rpc(body("resources/read", {"uri": "info://nope"}, request_id=7))
        assert gone is not None and gone["error"]["code"] == -32602 and gone["error"]["data"] == {"uri": "info://nope"}
        # A stateless request in the initialized (legacy) child is stateless too.
        mixed = legacy.rpc(body("prompts/list", request_id=8))
        assert mixed is not None
        assert_stamped(mixed["result"], cache_scope="public")
    finally:
        assert modern.close() == 0
        assert legacy.close() == 0


def test_stdio_listen_until_cancelled(demo: Registry, stdio_argv: list[str]) -> None:
    child = StdioProcess(stdio_argv, child_env())
    try:
        child.send(body("subscriptions/listen", {"notifications": {"promptsListChanged": True}}, request_id=50))
        ack = child.receive()
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        assert ack["params"]["_meta"] == {META_SUBSCRIPTION_ID: 50}
        demo.catalog.create("prompt", {"name": "stdio-listened", "template": "x"}, WriteOptions(actor="t"))
        changed = child.receive()
        assert changed == {
            "jsonrpc": "2.0",
            "method": "notifications/prompts/list_changed",
            "params": {"_meta": {META_SUBSCRIPTION_ID: 50}},
        }
        child.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 50}})
        # Requests are still answered, and the cancelled listen writes nothing more.
        assert child.rpc(body("tools/list", request_id=51)) is not None
        demo.catalog.create("prompt", {"name": "stdio-unheard", "template": "x"}, WriteOptions(actor="t"))
        assert child.rpc(body("prompts/list", request_id=52)) is not None
    finally:
        assert child.close() == 0
