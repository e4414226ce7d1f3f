"""A client's answer to a server-to-client request, POSTed to the other replica.

Behind a round-robin balancer with no affinity, the POST carrying a client's response to
``elicitation/create`` may reach a replica that is not running the tool call. That replica
forwards it over PostgreSQL NOTIFY to the one waiting; an answer too large for a NOTIFY payload is
refused there (413, naming the limit), and the waiting call is told at once instead of timing out.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import httpx

from registry.mcp.client_requests import MAX_FORWARD_BYTES
from tests.factories import tool_body
from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient, iter_sse
from tests.replica_pairs import replicas_fixture
from tests.serve_process import ServerProcess

ADMIN = "replica-admin-" + secrets.token_hex(6)
TOOL = "ask-the-user"


def _add_tool(a: ServerProcess, _b: ServerProcess) -> None:
    tool = tool_body(
        TOOL,
        "builtin://conformance-elicitation",  # an input-asking built-in hook
        properties={"message": {"type": "string"}},
        description="Asks the user for a name and an email address",
    )
    with httpx.Client(base_url=a.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=15, verify=TLS) as admin:
        assert admin.post("/api/v1/tools", json=tool).status_code == 201


replicas = replicas_fixture("client-responses", admin_token=ADMIN, setup=_add_tool)


def _client(replica: ServerProcess, session_id: str | None = None) -> StreamableHttpClient:
    client = StreamableHttpClient(httpx.Client(base_url=replica.url, timeout=30, verify=TLS))
    if session_id:
        client.session_id = session_id
        client.protocol_version = "2025-11-25"
    return client


def _call(a: ServerProcess, b: ServerProcess, content: dict[str, Any]) -> tuple[dict[str, Any], httpx.Response]:
    """tools/call on A; the elicitation it sends is answered through B. (A's answer, B's reply.)"""
    caller = _client(a)
    caller.initialize("2025-11-25", capabilities={"elicitation": {}})
    other = _client(b, caller.session_id)
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": TOOL, "arguments": {}}}
    posted: httpx.Response | None = None
    with caller.http.stream("POST", "/mcp", content=json.dumps(message), headers=caller.headers()) as response:
        for event in iter_sse(response.iter_lines()):
            if not event.data:
                continue
            frame = event.json()
            if frame.get("method") == "elicitation/create":
                assert posted is None, "asked twice"
                reply = {"jsonrpc": "2.0", "id": frame["id"], "result": {"action": "accept", "content": content}}
                posted = other.post(reply)
            elif frame.get("id") == 1:
                assert posted is not None, "answered without asking"
                return frame, posted
    raise AssertionError("the call's stream ended without an answer")


def test_a_response_posted_to_the_other_replica_reaches_the_call(replicas: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = replicas
    answer, posted = _call(a, b, {"username": "ada", "email": "ada@example.com"})
    assert posted.status_code == 202, posted.text
    result = answer["result"]
    assert result["isError"] is False, result
    assert result["content"][0]["text"] == (
        'User response: action=accept, content={"username":"ada","email":"ada@example.com"}'
    )


def test_a_response_too_large_to_forward_is_refused_and_the_call_told(
    replicas: tuple[ServerProcess, ServerProcess],
) -> None:
    a, b = replicas
    answer, posted = _call(a, b, {"username": "x" * (MAX_FORWARD_BYTES + 100), "email": "e"})
    assert posted.status_code == 413, posted.text
    assert str(MAX_FORWARD_BYTES) in posted.json()["error"]["message"]
    result = answer["result"]
    assert result["isError"] is True
    text = result["content"][0]["text"]
    assert "NOTIFY" in text and str(MAX_FORWARD_BYTES) in text, text
