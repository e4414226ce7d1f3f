"""Streamable HTTP at ``/mcp``: the protocol's edge cases, against the real server on a loopback port.

Each test speaks raw HTTP with httpx, the way a client on the wire would, and checks both the
HTTP status and the JSON-RPC error code where the spec fixes one.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from registry.catalog.values import WriteOptions
from registry.config import Settings
from registry.limits import Limits
from registry.runtime import Registry
from tests.conftest import LiveServer
from tests.http import TLS
from tests.interop.mcp_wire import ACCEPT_BOTH, StreamableHttpClient, article_initialize, iter_sse

PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


@pytest.fixture
def http(server: LiveServer) -> Iterator[httpx.Client]:
    """An anonymous client (the server is loopback-bound, so anonymous agents are allowed)."""
    with server.client(token=None) as client:
        yield client


@pytest.fixture
def mcp(http: httpx.Client) -> StreamableHttpClient:
    """An initialized 2025-11-25 session."""
    client = StreamableHttpClient(http)
    client.initialize("2025-11-25")
    return client


@pytest.fixture
def make_server(demo: Registry, settings: Settings) -> Iterator[Callable[..., LiveServer]]:
    """Another live server on the same database, with some settings changed."""
    started: list[tuple[LiveServer, Registry]] = []

    def make(**overrides: Any) -> LiveServer:
        registry = Registry(dataclasses.replace(settings, **overrides))
        registry.prepare()
        server = LiveServer(registry)
        server.start()
        started.append((server, registry))
        return server

    yield make
    for server, registry in started:
        server.stop()
        registry.close()


def rpc_error(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert body["jsonrpc"] == "2.0" and "result" not in body, body
    error: dict[str, Any] = body["error"]
    return error


# ---------------------------------------------------------------- HTTP-level rules


def test_accept_without_json_or_sse_is_406(http: httpx.Client) -> None:
    response = http.post(
        "/mcp",
        json=article_initialize("2025-11-25"),
        headers={"Accept": "text/html", "Content-Type": "application/json"},
    )
    assert response.status_code == 406
    assert rpc_error(response)["code"] == -32600


def test_content_type_must_be_json(http: httpx.Client) -> None:
    response = http.post(
        "/mcp", content=json.dumps(PING), headers={"Accept": ACCEPT_BOTH, "Content-Type": "text/plain"}
    )
    assert response.status_code == 415


def test_other_http_methods_are_405(http: httpx.Client) -> None:
    response = http.put("/mcp", json=PING, headers={"Accept": ACCEPT_BOTH})
    assert response.status_code == 405
    assert set(response.headers["allow"].replace(" ", "").split(",")) == {"GET", "POST", "DELETE"}


def test_request_without_session_id_is_400(http: httpx.Client) -> None:
    response = StreamableHttpClient(http).post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    assert response.status_code == 400
    assert "Mcp-Session-Id" in rpc_error(response)["message"]


def test_unknown_session_is_404(http: httpx.Client) -> None:
    client = StreamableHttpClient(http, session_id="no-such-session")
    response = client.post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    assert response.status_code == 404
    get = http.get("/mcp", headers={"Accept": "text/event-stream", "Mcp-Session-Id": "no-such-session"})
    assert get.status_code == 404


def test_delete_ends_the_session(mcp: StreamableHttpClient, http: httpx.Client) -> None:
    assert mcp.request("ping")["result"] == {}
    ended = http.delete("/mcp", headers=mcp.headers())
    assert ended.status_code == 204
    after = mcp.post({"jsonrpc": "2.0", "id": 2, "method": "ping"})
    assert after.status_code == 404
    assert http.delete("/mcp", headers=mcp.headers()).status_code == 404
    stream = http.get("/mcp", headers={**mcp.headers(), "Accept": "text/event-stream"})
    assert stream.status_code == 404


def test_unsupported_protocol_version_header_is_400(mcp: StreamableHttpClient) -> None:
    response = mcp.post(PING, **{"MCP-Protocol-Version": "1999-01-01"})
    assert response.status_code == 400
    assert "1999-01-01" in rpc_error(response)["message"]
    # Also on initialize itself.
    init = mcp.http.post(
        "/mcp",
        json=article_initialize("2025-11-25"),
        headers={"Accept": ACCEPT_BOTH, "MCP-Protocol-Version": "2099-12-31"},
    )
    assert init.status_code == 400


def test_absent_protocol_version_header_is_accepted(http: httpx.Client) -> None:
    client = StreamableHttpClient(http, send_version_header=False)
    client.initialize("2025-11-25")
    response = client.post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    assert response.status_code == 200
    assert "MCP-Protocol-Version" not in response.request.headers
    assert sorted(t["name"] for t in response.json()["result"]["tools"]) == ["add", "echo"]


def test_foreign_origin_is_403(http: httpx.Client, server: LiveServer) -> None:
    # "http://[x" does not parse at all: refused like a foreign origin (it was a 500).
    for origin in ("https://evil.example", "http://127.0.0.1.evil.example", "null", "http://[x"):
        response = http.post(
            "/mcp", json=article_initialize("2025-11-25"), headers={"Accept": ACCEPT_BOTH, "Origin": origin}
        )
        assert response.status_code == 403, origin
        assert "Origin" in rpc_error(response)["message"]
    # The legacy transport is guarded the same way.
    assert http.get("/sse", headers={"Origin": "https://evil.example"}).status_code == 403


def test_same_origin_and_loopback_origins_are_allowed(http: httpx.Client, server: LiveServer) -> None:
    for origin in (server.url, f"http://localhost:{server.port}", "http://localhost:6274", "http://[::1]:3000"):
        response = http.post(
            "/mcp", json=article_initialize("2025-11-25"), headers={"Accept": ACCEPT_BOTH, "Origin": origin}
        )
        assert response.status_code == 200, (origin, response.text)


def test_non_loopback_host_is_403(http: httpx.Client, server: LiveServer) -> None:
    """DNS rebinding: a loopback-bound server refuses requests naming another host."""
    response = http.post(
        "/mcp", json=article_initialize("2025-11-25"), headers={"Accept": ACCEPT_BOTH, "Host": "evil.example"}
    )
    assert response.status_code == 403
    assert "Host" in rpc_error(response)["message"]
    malformed = http.post(  # no host name at all (it was a 500)
        "/mcp", json=article_initialize("2025-11-25"), headers={"Accept": ACCEPT_BOTH, "Host": "[x"}
    )
    assert malformed.status_code == 403 and "Host" in rpc_error(malformed)["message"]
    ok = http.post(
        "/mcp",
        json=article_initialize("2025-11-25"),
        headers={"Accept": ACCEPT_BOTH, "Host": f"localhost:{server.port}"},
    )
    assert ok.status_code == 200


# ---------------------------------------------------------------- JSON-RPC errors


def test_malformed_json_is_parse_error_with_400(mcp: StreamableHttpClient) -> None:
    response = mcp.http.post("/mcp", content=b'{"jsonrpc": "2.0", "id": 1,', headers=mcp.headers())
    assert response.status_code == 400
    body = response.json()
    assert body["id"] is None
    assert body["error"]["code"] == -32700


def test_invalid_request_is_32600(mcp: StreamableHttpClient) -> None:
    wrong_version = mcp.post({"jsonrpc": "1.0", "id": 5, "method": "ping"})
    assert wrong_version.status_code == 400
    assert wrong_version.json()["id"] == 5
    assert rpc_error(wrong_version)["code"] == -32600
    no_method = mcp.post({"jsonrpc": "2.0", "id": 6})
    assert no_method.status_code == 400
    assert rpc_error(no_method)["code"] == -32600
    null_id = mcp.post({"jsonrpc": "2.0", "id": None, "method": "ping"})
    assert rpc_error(null_id)["code"] == -32600
    not_an_object = mcp.post(["not", "messages"])
    assert not_an_object.status_code == 400


def test_batches_only_on_protocols_that_had_them(http: httpx.Client) -> None:
    modern = StreamableHttpClient(http)
    modern.initialize("2025-11-25")
    refused = modern.post([PING, {"jsonrpc": "2.0", "id": 2, "method": "ping"}])
    assert refused.status_code == 400
    assert rpc_error(refused)["code"] == -32600
    old = StreamableHttpClient(http)
    old.initialize("2025-03-26")
    batch = old.post(
        [
            PING,
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "no/such"},
        ]
    )
    assert batch.status_code == 200
    answers = {a["id"]: a for a in batch.json()}
    assert answers[1]["result"] == {}
    assert answers[2]["error"]["code"] == -32601


def test_unknown_method_is_32601(mcp: StreamableHttpClient) -> None:
    answer = mcp.request("prompts/frobnicate", {})
    assert answer["error"]["code"] == -32601
    assert "prompts/frobnicate" in answer["error"]["message"]


def test_unknown_prompt_is_32602(mcp: StreamableHttpClient) -> None:
    answer = mcp.request("prompts/get", {"name": "no-such-prompt"})
    assert answer["error"]["code"] == -32602
    assert "no-such-prompt" in answer["error"]["message"]


def test_missing_required_prompt_argument_is_32602_with_a_clear_message(mcp: StreamableHttpClient) -> None:
    answer = mcp.request("prompts/get", {"name": "summarize", "arguments": {"max_words": "20"}})
    assert answer["error"]["code"] == -32602
    assert answer["error"]["message"] == "prompt summarize: missing required argument(s): text"
    wrong_enum = mcp.request("prompts/get", {"name": "code-review", "arguments": {"diff": "x", "language": "cobol"}})
    assert wrong_enum["error"]["code"] == -32602
    assert "language" in wrong_enum["error"]["message"] and "python" in wrong_enum["error"]["message"]


def test_unknown_resource_is_32002(mcp: StreamableHttpClient) -> None:
    answer = mcp.request("resources/read", {"uri": "info://no-such-thing"})
    assert answer["error"]["code"] == -32002
    assert answer["error"]["data"] == {"uri": "info://no-such-thing"}


def test_invalid_cursor_is_32602(mcp: StreamableHttpClient) -> None:
    for cursor in ("not a cursor!", base64.urlsafe_b64encode(b'{"o": 100000}').decode(), 42):
        answer = mcp.request("prompts/list", {"cursor": cursor})
        assert answer["error"]["code"] == -32602, cursor
        assert "cursor" in answer["error"]["message"]


def test_requests_between_initialize_and_initialized_are_answered(http: httpx.Client) -> None:
    """The session exists from the initialize answer on; ping before notifications/initialized works."""
    client = StreamableHttpClient(http)
    response = client.post(article_initialize("2025-11-25"))
    client.session_id = response.headers["mcp-session-id"]
    # No notifications/initialized yet: requests are still answered (the spec only says SHOULD NOT).
    assert client.request("ping")["result"] == {}


def test_pagination_walks_every_prompt_once(demo: Registry, server: LiveServer, http: httpx.Client) -> None:
    created = [f"bulk-{i:03d}" for i in range(130)]
    for name in created:
        demo.catalog.create("prompt", {"name": name, "template": f"Prompt {name}"}, WriteOptions(actor="t"))
    client = StreamableHttpClient(http)
    client.initialize("2025-11-25")
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params = {"cursor": cursor} if cursor else {}
        result = client.request("prompts/list", params)["result"]
        pages += 1
        assert len(result["prompts"]) <= 100
        seen += [p["name"] for p in result["prompts"]]
        cursor = result.get("nextCursor")
        if cursor is None:
            break
        assert isinstance(cursor, str) and cursor
    assert pages == 2
    assert len(seen) == len(set(seen))
    assert set(seen) == {*created, "bug-analysis-report", "code-review", "incident-postmortem", "summarize"}


def test_body_over_the_limit_is_413(make_server: Callable[..., LiveServer]) -> None:
    small = make_server(limits=Limits(body_bytes=2048))
    with small.client(token=None) as http:
        client = StreamableHttpClient(http)
        client.initialize("2025-11-25")
        big = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "prompts/get",
            "params": {"name": "summarize", "arguments": {"text": "x" * 4096}},
        }
        response = client.post(big)
        assert response.status_code == 413
        assert rpc_error(response)["code"] == -32600
        # Without Content-Length (chunked), the limit holds too.

        def chunks() -> Iterator[bytes]:
            data = json.dumps(big).encode()
            for start in range(0, len(data), 512):
                yield data[start : start + 512]

        chunked = http.post("/mcp", content=chunks(), headers=client.headers())
        assert "content-length" not in chunked.request.headers
        assert chunked.status_code == 413
        # Under the limit, the same session still works.
        assert client.request("ping")["result"] == {}


# ---------------------------------------------------------------- methods


def test_tool_call_with_invalid_arguments_is_an_error_result(mcp: StreamableHttpClient) -> None:
    answer = mcp.request("tools/call", {"name": "add", "arguments": {"a": "forty-two"}})
    assert "error" not in answer
    result = answer["result"]
    assert result["isError"] is True
    (content,) = result["content"]
    assert content["type"] == "text"
    assert "add" in content["text"]
    assert "'forty-two' is not of type 'number'" in content["text"]
    assert "'b' is a required property" in content["text"]
    unknown_tool = mcp.request("tools/call", {"name": "no-such-tool", "arguments": {}})
    assert unknown_tool["error"]["code"] == -32602


def test_completion_for_a_prompt_enum_argument(mcp: StreamableHttpClient) -> None:
    answer = mcp.request(
        "completion/complete",
        {"ref": {"type": "ref/prompt", "name": "code-review"}, "argument": {"name": "language", "value": "py"}},
    )
    assert answer["result"]["completion"] == {"values": ["python"], "total": 1, "hasMore": False}
    everything = mcp.request(
        "completion/complete",
        {"ref": {"type": "ref/prompt", "name": "code-review"}, "argument": {"name": "language", "value": ""}},
    )
    languages = ["python", "typescript", "go", "java", "rust", "sql", "other"]
    assert everything["result"]["completion"]["values"] == languages


def test_completion_for_a_resource_template_variable_remembers_used_values(mcp: StreamableHttpClient) -> None:
    read = mcp.request("resources/read", {"uri": "sprint://payments/current"})
    assert "# Sprint status: payments" in read["result"]["contents"][0]["text"]
    answer = mcp.request(
        "completion/complete",
        {
            "ref": {"type": "ref/resource", "uri": "sprint://{team}/current"},
            "argument": {"name": "team", "value": "pa"},
        },
    )
    assert answer["result"]["completion"]["values"] == ["payments"]


def test_logging_set_level(mcp: StreamableHttpClient) -> None:
    assert mcp.request("logging/setLevel", {"level": "info"}) == {"jsonrpc": "2.0", "id": 99, "result": {}}
    wrong = mcp.request("logging/setLevel", {"level": "loud"})
    assert wrong["error"]["code"] == -32602


def test_get_stream_opens_with_a_priming_event(mcp: StreamableHttpClient, server: LiveServer) -> None:
    with (
        httpx.Client(base_url=server.url, timeout=httpx.Timeout(5.0), verify=TLS) as http,
        http.stream("GET", "/mcp", headers={**mcp.headers(), "Accept": "text/event-stream"}) as stream,
    ):
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        first = next(iter_sse(stream.iter_lines()))
        # 2025-11-25: an event with an id and empty data first, so the client can resume from it.
        assert first.id is not None and first.id.isdigit()
        assert first.data == ""
        assert first.retry == 3000


def test_get_stream_without_priming_on_older_protocol(http: httpx.Client, server: LiveServer) -> None:
    client = StreamableHttpClient(http)
    client.initialize("2025-06-18")
    with (
        httpx.Client(base_url=server.url, timeout=httpx.Timeout(5.0), verify=TLS) as stream_http,
        stream_http.stream("GET", "/mcp", headers={**client.headers(), "Accept": "text/event-stream"}) as stream,
    ):
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")


def test_get_stream_needs_sse_accept(mcp: StreamableHttpClient) -> None:
    response = mcp.http.get("/mcp", headers={**mcp.headers(), "Accept": "application/json"})
    assert response.status_code == 406


def test_get_stream_carries_list_changed(mcp: StreamableHttpClient, server: LiveServer, api: httpx.Client) -> None:
    with (
        httpx.Client(base_url=server.url, timeout=httpx.Timeout(10.0), verify=TLS) as http,
        http.stream("GET", "/mcp", headers={**mcp.headers(), "Accept": "text/event-stream"}) as stream,
    ):
        events = iter_sse(stream.iter_lines())
        next(events)  # priming
        created = api.post("/api/v1/prompts", json={"name": "fresh", "template": "Hi"})
        assert created.status_code == 201, created.text
        deadline = time.monotonic() + 10
        for event in events:
            if event.data:
                assert event.json() == {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"}
                assert event.id is not None
                break
            assert time.monotonic() < deadline
        else:
            raise AssertionError("the stream ended without notifications/prompts/list_changed")
    assert "fresh" in {p["name"] for p in mcp.request("prompts/list")["result"]["prompts"]}


# ---------------------------------------------------------------- authentication and labels


@pytest.fixture
def labelled(demo: Registry) -> Registry:
    """``release-notes`` v1 in production and v2 in staging only; ``staging-only`` in staging only."""
    demo.catalog.create(
        "prompt", {"name": "release-notes", "description": "v1 notes", "template": "Notes v1"}, WriteOptions(actor="t")
    )
    demo.catalog.update(
        "prompt",
        "release-notes",
        {"name": "release-notes", "description": "v2 notes", "template": "Notes v2"},
        WriteOptions(actor="t", labels=["staging"]),
    )
    demo.catalog.create(
        "prompt", {"name": "staging-only", "template": "Soon"}, WriteOptions(actor="t", labels=["staging"])
    )
    return demo


def _prompts(client: StreamableHttpClient) -> dict[str, str | None]:
    return {p["name"]: p.get("description") for p in client.request("prompts/list")["result"]["prompts"]}


def test_authentication_required_when_anonymous_agents_are_off(
    labelled: Registry, make_server: Callable[..., LiveServer]
) -> None:
    locked = make_server(anonymous_agents=False)
    with httpx.Client(base_url=locked.url, timeout=30, verify=TLS) as http:
        anonymous = StreamableHttpClient(http).post(article_initialize("2025-11-25"))
        assert anonymous.status_code == 401
        assert anonymous.headers["www-authenticate"].startswith("Bearer")
        wrong = StreamableHttpClient(http, extra_headers={"Authorization": "Bearer mcpr_not-a-token"})
        response = wrong.post(article_initialize("2025-11-25"))
        assert response.status_code == 401
        assert "invalid_token" in response.headers["www-authenticate"]
        assert http.get("/sse").status_code == 401


def test_agent_tokens_are_served_their_label(labelled: Registry, make_server: Callable[..., LiveServer]) -> None:
    staging_token, _ = labelled.tokens.create("a", ["agent"], label="staging")
    production_token, _ = labelled.tokens.create("b", ["agent"])
    locked = make_server(anonymous_agents=False)
    with httpx.Client(base_url=locked.url, timeout=30, verify=TLS) as http:
        staging = StreamableHttpClient(http, extra_headers={"Authorization": f"Bearer {staging_token}"})
        staging.initialize("2025-11-25")
        production = StreamableHttpClient(http, extra_headers={"Authorization": f"Bearer {production_token}"})
        production.initialize("2025-11-25")

        staging_view, production_view = _prompts(staging), _prompts(production)
        assert staging_view == {"release-notes": "v2 notes", "staging-only": None}
        assert production_view["release-notes"] == "v1 notes"
        assert "staging-only" not in production_view
        assert "summarize" in production_view
        rendered = staging.request("prompts/get", {"name": "release-notes"})["result"]["messages"][0]
        assert rendered["content"]["text"] == "Notes v2"

        # A label asked for in the URL does not override the token's.
        pinned = StreamableHttpClient(
            http, path="/mcp?label=production", extra_headers={"Authorization": f"Bearer {staging_token}"}
        )
        pinned.initialize("2025-11-25")
        assert _prompts(pinned) == staging_view


def test_a_session_belongs_to_its_token(labelled: Registry, make_server: Callable[..., LiveServer]) -> None:
    first_token, _ = labelled.tokens.create("first", ["agent"])
    second_token, _ = labelled.tokens.create("second", ["agent"])
    locked = make_server(anonymous_agents=False)
    with httpx.Client(base_url=locked.url, timeout=30, verify=TLS) as http:
        owner = StreamableHttpClient(http, extra_headers={"Authorization": f"Bearer {first_token}"})
        owner.initialize("2025-11-25")
        thief = StreamableHttpClient(
            http, session_id=owner.session_id, extra_headers={"Authorization": f"Bearer {second_token}"}
        )
        assert thief.post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).status_code == 404
        assert http.delete("/mcp", headers=thief.headers()).status_code == 404
        assert owner.request("ping")["result"] == {}


def test_label_query_parameter_picks_the_label(labelled: Registry, server: LiveServer) -> None:
    with server.client(token=None) as http:
        staging = StreamableHttpClient(http, path="/mcp?label=staging")
        staging.initialize("2025-11-25")
        assert _prompts(staging) == {"release-notes": "v2 notes", "staging-only": None}
        # The label is the session's: later requests without the query keep it.
        staging.path = "/mcp"
        assert _prompts(staging) == {"release-notes": "v2 notes", "staging-only": None}
        production = StreamableHttpClient(http)
        production.initialize("2025-11-25")
        assert _prompts(production)["release-notes"] == "v1 notes"
