"""The seed article's eight JSON-RPC steps, verbatim, over every transport the registry serves.

Streamable HTTP and legacy HTTP+SSE run against the real server on a loopback port; stdio runs
``mcp-registry stdio`` as a child process. Each walk is checked against the article's answers
(see ``mcp_wire.run_article_walk``), on protocol 2024-11-05 (the article's) and 2025-11-25.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from registry.catalog.values import WriteOptions
from registry.runtime import Registry
from tests.conftest import LiveServer
from tests.http import TLS
from tests.interop.mcp_wire import (
    INITIALIZED,
    StdioProcess,
    StreamableHttpClient,
    article_initialize,
    child_env,
    iter_sse,
    mcp_registry_command,
    run_article_walk,
)

VERSIONS = ["2024-11-05", "2025-11-25"]


# ---------------------------------------------------------------- Streamable HTTP


@pytest.mark.parametrize("version", VERSIONS)
def test_article_walk_streamable_http(server: LiveServer, version: str) -> None:
    with server.client(token=None) as http:
        client = StreamableHttpClient(http, send_version_header=version >= "2025-06-18")

        def rpc(message: dict[str, Any]) -> dict[str, Any] | None:
            if message["method"] == "initialize":
                response = client.post(message)
                assert response.status_code == 200, response.text
                assert response.headers["content-type"].startswith("application/json")
                session_id = response.headers.get("mcp-session-id")
                # The session id: visible ASCII only (spec), enough entropy not to be guessed.
                assert session_id and re.fullmatch(r"[\x21-\x7e]{32,}", session_id), session_id
                client.session_id = session_id
                answer: dict[str, Any] = response.json()
                client.protocol_version = answer["result"]["protocolVersion"]
                return answer
            if message is INITIALIZED:
                response = client.post(message)
                assert response.status_code == 202, response.text
                assert response.content == b""
                return None
            return client.rpc(message)

        run_article_walk(rpc, version)

        # The session is the client's to end; afterwards it no longer exists.
        ended = http.delete("/mcp", headers=client.headers())
        assert ended.status_code == 204, ended.text
        gone = client.post({"jsonrpc": "2.0", "id": 9, "method": "ping"})
        assert gone.status_code == 404, gone.text


@pytest.mark.parametrize("version", VERSIONS)
def test_article_walk_streamable_http_sse_only_accept(server: LiveServer, version: str) -> None:
    """A client that accepts only text/event-stream for POST answers gets each answer as an SSE event."""
    with server.client(token=None) as http:
        client = StreamableHttpClient(http, extra_headers={"Accept": "text/event-stream"})
        init = client.post(article_initialize(version))
        assert init.status_code == 200, init.text
        client.session_id = init.headers["mcp-session-id"]
        client.protocol_version = version
        assert client.post(INITIALIZED).status_code == 202
        response = client.post(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"message": "Hello from MCP client!"}},
            }
        )
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [e for e in iter_sse(iter([*response.text.splitlines(), ""])) if e.data]
        assert [e.json() for e in events] == [
            {
                "jsonrpc": "2.0",
                "id": 3,
                "result": {"content": [{"type": "text", "text": "Echo: Hello from MCP client!"}], "isError": False},
            }
        ]


# ---------------------------------------------------------------- legacy HTTP+SSE


@pytest.mark.parametrize("version", VERSIONS)
def test_article_walk_legacy_sse(server: LiveServer, version: str) -> None:
    with (
        httpx.Client(base_url=server.url, timeout=httpx.Timeout(30.0), verify=TLS) as http,
        http.stream("GET", "/sse", headers={"Accept": "text/event-stream"}) as stream,
    ):
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        events = iter_sse(stream.iter_lines())
        first = next(events)
        assert first.event == "endpoint"
        endpoint = first.data
        assert re.fullmatch(r"/messages\?session_id=[\x21-\x7e]+", endpoint), endpoint

        def rpc(message: dict[str, Any]) -> dict[str, Any] | None:
            posted = http.post(endpoint, content=json.dumps(message), headers={"Content-Type": "application/json"})
            assert posted.status_code == 202, posted.text
            if "id" not in message:
                return None
            for event in events:
                if event.event != "message":
                    continue
                answer: dict[str, Any] = event.json()
                if answer.get("id") == message["id"]:
                    return answer
            raise AssertionError("the SSE stream ended before the answer")

        run_article_walk(rpc, version)

        # Another client cannot post into this session without its id; an unknown id is 404.
        unknown = http.post("/messages?session_id=nope", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert unknown.status_code == 404
        missing = http.post("/messages", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert missing.status_code == 400


# ---------------------------------------------------------------- stdio


@pytest.fixture
def stdio_child(demo: Registry, database_url: str, tmp_path: Path) -> Iterator[StdioProcess]:
    argv = [*mcp_registry_command(), "stdio", "--database-url", database_url, "--data-dir", str(tmp_path / "stdio")]
    child = StdioProcess(argv, child_env())
    try:
        yield child
    finally:
        if child.proc.poll() is None:
            child.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_article_walk_stdio(stdio_child: StdioProcess, version: str) -> None:
    run_article_walk(stdio_child.rpc, version)
    # Closing stdin ends the server cleanly; stdout carried nothing but the eight answers.
    assert stdio_child.close() == 0
    assert stdio_child.lines.get(timeout=10) is None


def test_stdio_first_start_seeds_the_demo(tmp_path: Path) -> None:
    """``mcp-registry stdio --data-dir DIR`` on a new folder: SQLite there, the demo bundle loaded."""
    argv = [*mcp_registry_command(), "stdio", "--data-dir", str(tmp_path / "fresh")]
    child = StdioProcess(argv, child_env())
    try:
        run_article_walk(child.rpc, "2024-11-05")
    finally:
        code = child.close()
    assert code == 0
    assert (tmp_path / "fresh" / "registry.db").exists()


def test_stdio_protocol_errors_stay_on_the_wire(stdio_child: StdioProcess) -> None:
    """Bad input is answered on stdout as JSON-RPC errors; the server keeps serving."""
    stdio_child.proc.stdin.write(b"{not json\n")  # type: ignore[union-attr]
    stdio_child.proc.stdin.flush()  # type: ignore[union-attr]
    parse_error = stdio_child.receive()
    assert parse_error["error"]["code"] == -32700 and parse_error["id"] is None
    before_init = stdio_child.rpc({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert before_init is not None and before_init["error"]["code"] == -32600
    init = stdio_child.rpc(article_initialize("2025-11-25"))
    assert init is not None and init["result"]["protocolVersion"] == "2025-11-25"
    unknown = stdio_child.rpc({"jsonrpc": "2.0", "id": 2, "method": "no/such"})
    assert unknown is not None and unknown["error"]["code"] == -32601


# ---------------------------------------------------------------- labels on the other transports


@pytest.fixture
def staging_prompt(demo: Registry) -> Registry:
    demo.catalog.create(
        "prompt", {"name": "staging-only", "template": "Soon"}, WriteOptions(actor="t", labels=["staging"])
    )
    return demo


def test_stdio_serves_the_label_it_is_given(staging_prompt: Registry, database_url: str, tmp_path: Path) -> None:
    argv = [*mcp_registry_command(), "stdio", "--database-url", database_url, "--data-dir", str(tmp_path / "stdio")]
    child = StdioProcess([*argv, "--label", "staging"], child_env())
    try:
        child.rpc(article_initialize("2025-11-25"))
        listed = child.rpc({"jsonrpc": "2.0", "id": 2, "method": "prompts/list"})
        assert listed is not None
        assert [p["name"] for p in listed["result"]["prompts"]] == ["staging-only"]
    finally:
        assert child.close() == 0


def test_legacy_sse_label_query_parameter(staging_prompt: Registry, server: LiveServer) -> None:
    with (
        httpx.Client(base_url=server.url, timeout=httpx.Timeout(30.0), verify=TLS) as http,
        http.stream("GET", "/sse?label=staging", headers={"Accept": "text/event-stream"}) as stream,
    ):
        events = iter_sse(stream.iter_lines())
        endpoint = next(events).data

        def rpc(message: dict[str, Any]) -> dict[str, Any]:
            assert http.post(endpoint, json=message).status_code == 202
            return next(e.json() for e in events if e.event == "message")

        assert rpc(article_initialize("2024-11-05"))["result"]["protocolVersion"] == "2024-11-05"
        listed = rpc({"jsonrpc": "2.0", "id": 2, "method": "prompts/list"})
        assert [p["name"] for p in listed["result"]["prompts"]] == ["staging-only"]
