"""Webhook tools that ask the user or the model mid-call, end to end, in both protocol eras.

A real loopback webhook asks for a confirmation (elicitation), then for a summary (sampling), then
answers; the registry under test runs in-process under uvicorn (``hooked``), on SQLite and on
PostgreSQL. Session era: the registry sends the requests on the call's SSE stream and the test
answers them by POSTing responses, as a client does. 2026-07-28: the registry answers with
``InputRequiredResult``s and the test retries with ``inputResponses`` and the signed
``requestState``, which is also tampered with, expired, replayed for other arguments.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from registry.catalog.secrets import SecretBox
from registry.config import Settings
from registry.db.models import SpentRequestState
from registry.mcp.input_required import KEY_PURPOSE, MAX_ROUNDS, Binding, RequestStateSigner, RoundState
from registry.mcp.input_required import arguments_digest as digest
from registry.mcp.spent_states import SpentStates, state_digest
from registry.runtime import Registry
from tests.conftest import LiveServer, start_live_server
from tests.factories import tool_body
from tests.http import TLS
from tests.interop.mcp_wire import (
    ACCEPT_BOTH,
    StdioProcess,
    StreamableHttpClient,
    article_initialize,
    child_env,
    iter_sse,
    mcp_registry_command,
)

MODERN = "2026-07-28"
ALL_CAPS = {"elicitation": {}, "sampling": {}, "roots": {"listChanged": True}}


class Hook:
    """The loopback webhook: ``/ask`` asks twice then answers, ``/always`` never stops asking."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                hook.bodies.append(body)
                answer = hook.answer(self.path, body)
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def answer(path: str, body: dict[str, Any]) -> dict[str, Any]:
        responses = body.get("input_responses") or {}
        state = body.get("state")
        confirm = {
            "method": "elicitation/create",
            "params": {
                "message": "Deploy?",
                "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
            },
        }
        summary = {
            "method": "sampling/createMessage",
            "params": {
                "messages": [{"role": "user", "content": {"type": "text", "text": "Summarize"}}],
                "maxTokens": 20,
            },
        }
        if path == "/always":
            return {"input_required": {"requests": {"confirm": confirm}, "state": f"n{len(responses)}"}}
        if state == "asked-summary" and "summary" in responses:
            ok = responses.get("confirm-copy", {}).get("ok")
            text = responses["summary"]["content"]["text"]
            return {"content": [{"type": "text", "text": f"deployed (ok={ok}): {text}"}]}
        if state == "asked-confirm" and "confirm" in responses:
            return {"input_required": {"requests": {"summary": summary}, "state": "asked-summary"}}
        return {"input_required": {"requests": {"confirm": confirm}, "state": "asked-confirm"}}

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def hook() -> Iterator[Hook]:
    server = Hook()
    yield server
    server.close()


def _create_tool(server: LiveServer, name: str, url: str) -> None:
    body = tool_body(name, url, properties={"env": {"type": "string"}}, description=f"{name}: asks before it acts")
    with server.client() as admin:
        assert admin.post("/api/v1/tools", json=body).status_code == 201


def _session(server: LiveServer, capabilities: dict[str, Any]) -> StreamableHttpClient:
    client = StreamableHttpClient(httpx.Client(base_url=server.url, timeout=30, verify=TLS))
    client.initialize("2025-11-25", capabilities=capabilities)
    return client


def _call_answering(
    client: StreamableHttpClient, name: str, answers: dict[str, Any], *, respond_to: StreamableHttpClient | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """POST tools/call, answer each server request on its SSE stream by method (POSTed with the
    session id, through ``respond_to``'s server if given); (final answer, requests seen)."""
    responder = respond_to or client
    seen: list[dict[str, Any]] = []
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": {"env": "x"}}}
    with client.http.stream("POST", "/mcp", content=json.dumps(message), headers=client.headers()) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for event in iter_sse(response.iter_lines()):
            if not event.data:
                continue
            frame = event.json()
            if frame.get("id") == 1 and "method" not in frame:
                return frame, seen
            if "method" in frame and "id" in frame:
                seen.append(frame)
                reply = {"jsonrpc": "2.0", "id": frame["id"], "result": answers[frame["method"]]}
                posted = responder.post(reply)
                assert posted.status_code == 202, posted.text
    raise AssertionError("the stream ended without an answer")


ELICIT_OK = {"action": "accept", "content": {"ok": True}}
SAMPLED = {"role": "assistant", "content": {"type": "text", "text": "all green"}, "model": "m", "stopReason": "endTurn"}


def test_session_era_asks_on_the_calls_stream_then_calls_the_webhook_again(hooked: LiveServer, hook: Hook) -> None:
    _create_tool(hooked, "deploy", hook.url + "/ask")
    client = _session(hooked, {"elicitation": {}, "sampling": {}})
    answer, seen = _call_answering(
        client, "deploy", {"elicitation/create": ELICIT_OK, "sampling/createMessage": SAMPLED}
    )
    assert [r["method"] for r in seen] == ["elicitation/create", "sampling/createMessage"]
    assert seen[0]["params"]["message"] == "Deploy?"  # the webhook's params, unchanged
    assert seen[0]["id"] != seen[1]["id"]
    assert answer["result"]["isError"] is False, answer
    assert answer["result"]["content"][0]["text"] == "deployed (ok=None): all green"
    assert len(hook.bodies) == 3
    first, second, third = hook.bodies
    assert "input_responses" not in first and first["client_capabilities"] == {"elicitation": {}, "sampling": {}}
    assert second["input_responses"] == {"confirm": ELICIT_OK} and second["state"] == "asked-confirm"
    assert third["input_responses"] == {"summary": SAMPLED} and third["state"] == "asked-summary"


def test_session_era_client_without_the_capability_gets_an_error_result(hooked: LiveServer, hook: Hook) -> None:
    _create_tool(hooked, "deploy", hook.url + "/ask")
    client = _session(hooked, {"sampling": {}})
    answer = client.request("tools/call", {"name": "deploy", "arguments": {}}, request_id=1)
    result = answer["result"]
    assert result["isError"] is True
    assert "elicitation" in result["content"][0]["text"] and "did not declare" in result["content"][0]["text"]


def test_session_era_json_only_post_cannot_be_asked(hooked: LiveServer, hook: Hook) -> None:
    _create_tool(hooked, "deploy", hook.url + "/ask")
    client = _session(hooked, ALL_CAPS)
    client.extra_headers["Accept"] = "application/json"
    answer = client.request("tools/call", {"name": "deploy", "arguments": {}}, request_id=1)
    assert answer["result"]["isError"] is True
    assert "cannot carry" in answer["result"]["content"][0]["text"]


def test_session_era_rounds_are_bounded(hooked: LiveServer, hook: Hook) -> None:
    _create_tool(hooked, "nag", hook.url + "/always")
    client = _session(hooked, ALL_CAPS)
    answer, seen = _call_answering(client, "nag", {"elicitation/create": ELICIT_OK})
    assert len(seen) == MAX_ROUNDS
    assert answer["result"]["isError"] is True
    assert f"more than {MAX_ROUNDS} times" in answer["result"]["content"][0]["text"]


# ------------------------------------------------------------------ 2026-07-28


def _modern(
    server: LiveServer, name: str, params: dict[str, Any], caps: dict[str, Any] | None = None
) -> httpx.Response:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": ALL_CAPS if caps is None else caps,
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
    }
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": name, **params, "_meta": meta}}
    headers = {
        "Accept": ACCEPT_BOTH,
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
    }
    return httpx.post(server.url + "/mcp", content=json.dumps(body), headers=headers, timeout=30, verify=TLS)


def _result(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    answer = response.json()
    assert "result" in answer, answer
    return dict(answer["result"])


def test_stateless_era_input_required_results_and_retries(hooked: LiveServer, hook: Hook) -> None:
    _create_tool(hooked, "deploy", hook.url + "/ask")
    args = {"arguments": {"env": "prod"}}
    first = _result(_modern(hooked, "deploy", args))
    assert first["resultType"] == "input_required"
    assert list(first["inputRequests"]) == ["confirm"]
    assert first["inputRequests"]["confirm"]["method"] == "elicitation/create"
    assert "ttlMs" not in first  # input-required results are never cacheable
    second = _result(
        _modern(
            hooked, "deploy", {**args, "inputResponses": {"confirm": ELICIT_OK}, "requestState": first["requestState"]}
        )
    )
    assert second["resultType"] == "input_required" and list(second["inputRequests"]) == ["summary"]
    assert second["requestState"] != first["requestState"]
    # An answer nobody asked for is dropped; the requested one goes through.
    responses = {"summary": SAMPLED, "unasked": {"x": 1}}
    third = _result(
        _modern(hooked, "deploy", {**args, "inputResponses": responses, "requestState": second["requestState"]})
    )
    assert third["resultType"] == "complete" and third["isError"] is False
    assert third["content"][0]["text"] == "deployed (ok=None): all green"
    assert hook.bodies[1]["state"] == "asked-confirm" and hook.bodies[2]["input_responses"] == {"summary": SAMPLED}
    # The webhook's own state travels inside the registry's token, readable but signed.
    assert "asked-confirm" not in first["requestState"]  # base64url, not plain text

    # Missing the requested answer: the webhook asks again (a new InputRequiredResult, not an error).
    fresh = _result(_modern(hooked, "deploy", args))["requestState"]
    again = _result(_modern(hooked, "deploy", {**args, "inputResponses": {}, "requestState": fresh}))
    assert again["resultType"] == "input_required"


def test_stateless_era_anonymous_calls_count_against_their_address(
    hooked: LiveServer, hook: Hook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An anonymous stateless request has no token, user or session: its webhook call is counted
    against the per-caller outbound cap as its client address's, not as every anonymous agent's."""
    client = hooked.app.mcp.server.http_client()
    callers: list[str | None] = []
    stream = client.stream

    def watched(*args: Any, **kwargs: Any) -> Any:
        callers.append(kwargs.get("caller"))
        return stream(*args, **kwargs)

    monkeypatch.setattr(client, "stream", watched)
    _create_tool(hooked, "deploy", hook.url + "/ask")
    assert _result(_modern(hooked, "deploy", {"arguments": {"env": "prod"}}))["resultType"] == "input_required"
    assert callers == ["address:127.0.0.1"]


def test_stateless_era_refuses_tampered_expired_and_replayed_states(hooked: LiveServer, hook: Hook) -> None:
    _create_tool(hooked, "deploy", hook.url + "/ask")
    args = {"arguments": {"env": "prod"}}
    state = _result(_modern(hooked, "deploy", args))["requestState"]
    retry = {"inputResponses": {"confirm": ELICIT_OK}}

    def error(params: dict[str, Any]) -> dict[str, Any]:
        response = _modern(hooked, "deploy", params)
        answer = response.json()
        assert "error" in answer, answer
        assert answer["id"] == 7
        return dict(answer["error"])

    tampered = error({**args, **retry, "requestState": state + "-TAMPERED"})
    assert tampered["code"] == -32602 and "integrity" in tampered["message"]
    body, _, mac = state.partition(".")
    flipped = error(
        {**args, **retry, "requestState": body[:-2] + ("A" if body[-2] != "A" else "B") + body[-1] + "." + mac}
    )
    assert flipped["code"] == -32602
    other_args = error({"arguments": {"env": "dev"}, **retry, "requestState": state})
    assert other_args["code"] == -32602 and "another call" in other_args["message"]

    # An expired one, signed with the registry's real key (the test settings' secret key).
    signer = RequestStateSigner(SecretBox("test-secret-key").derive_key(KEY_PURPOSE), clock=lambda: time.time() - 3600)
    tool_version = 1
    binding = Binding("tool", "deploy", tool_version, "production", "anonymous", None, digest({"env": "prod"}))
    old = signer.sign(binding, RoundState(1, time.time() - 3600, {"confirm": "elicitation/create"}, "asked-confirm"))
    expired = error({**args, **retry, "requestState": old})
    assert expired["code"] == -32602, expired
    assert "expired" in expired["message"], expired

    malformed = error({**args, "inputResponses": {"confirm": 12345}})
    assert malformed["code"] == -32602
    assert error({**args, "inputResponses": None})["code"] == -32602
    bad_shape = error({**args, "inputResponses": {"confirm": {"action": "maybe"}}, "requestState": state})
    assert bad_shape["code"] == -32602 and "action" in bad_shape["message"]


def _replayed(response: httpx.Response) -> None:
    answer = response.json()
    assert answer.get("id") == 7 and answer["error"]["code"] == -32602, answer
    assert "already used" in answer["error"]["message"], answer


def test_stateless_era_a_replayed_state_runs_the_webhook_once(hooked: LiveServer, hook: Hook) -> None:
    """The same requestState and answer sent three times (issue 24: "DEPLOY EXECUTED #1, #2, #3"):
    the webhook runs once for it, the two replays get -32602, and the call goes on from the state
    the first retry was given."""
    _create_tool(hooked, "deploy", hook.url + "/ask")
    args = {"arguments": {"env": "prod"}}
    first = _result(_modern(hooked, "deploy", args))
    retry = {**args, "inputResponses": {"confirm": ELICIT_OK}, "requestState": first["requestState"]}
    second = _result(_modern(hooked, "deploy", retry))
    assert second["resultType"] == "input_required"
    _replayed(_modern(hooked, "deploy", retry))
    _replayed(_modern(hooked, "deploy", retry))
    assert len(hook.bodies) == 2, hook.bodies  # the first call and the one retry: no replay reached it
    assert [b.get("state") for b in hook.bodies] == [None, "asked-confirm"]
    done = _result(
        _modern(
            hooked, "deploy", {**args, "inputResponses": {"summary": SAMPLED}, "requestState": second["requestState"]}
        )
    )
    assert done["resultType"] == "complete" and done["isError"] is False
    assert len(hook.bodies) == 3


def test_stateless_era_a_state_spent_on_one_replica_is_refused_on_another(
    hooked: LiveServer, hook: Hook, settings: Settings
) -> None:
    """Two registries on one database (two replicas behind a load balancer): a state answered by
    one is refused by the other, and the webhook runs once."""
    _create_tool(hooked, "deploy", hook.url + "/ask")
    registry, other = start_live_server(settings, webhook_allowed_networks="127.0.0.0/8")
    try:
        args = {"arguments": {"env": "prod"}}
        first = _result(_modern(hooked, "deploy", args))
        retry = {**args, "inputResponses": {"confirm": ELICIT_OK}, "requestState": first["requestState"]}
        assert _result(_modern(other, "deploy", retry))["resultType"] == "input_required"
        _replayed(_modern(hooked, "deploy", retry))
        _replayed(_modern(other, "deploy", retry))
        assert len(hook.bodies) == 2, hook.bodies
    finally:
        other.stop()
        registry.close()


def test_spent_states_are_pruned_once_expired(registry: Registry) -> None:
    """Only a digest is kept, and only until the state's expiry: the ledger does not grow."""
    spent = SpentStates(registry.db)
    now = time.time()
    assert asyncio.run(spent.spend("state-a", now - 1))  # already expired
    assert asyncio.run(spent.spend("state-b", now + 600))
    assert not asyncio.run(spent.spend("state-b", now + 600))
    with registry.db.session() as session:
        stored = set(session.scalars(select(SpentRequestState.digest)))
    assert stored == {state_digest("state-a"), state_digest("state-b")}
    assert "state-b" not in stored
    assert spent.prune() == 1
    with registry.db.session() as session:
        assert list(session.scalars(select(SpentRequestState.digest))) == [state_digest("state-b")]


def test_stateless_era_never_asks_for_an_undeclared_capability(hooked: LiveServer, hook: Hook) -> None:
    _create_tool(hooked, "deploy", hook.url + "/ask")
    response = _modern(hooked, "deploy", {"arguments": {}}, caps={"sampling": {}})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == -32021
    assert error["data"] == {"requiredCapabilities": {"elicitation": {}}}
    url_only = _modern(hooked, "deploy", {"arguments": {}}, caps={"elicitation": {"url": {}}})
    assert url_only.json()["error"]["code"] == -32021  # form mode needs form (or {})


def test_stateless_era_rounds_are_bounded(hooked: LiveServer, hook: Hook) -> None:
    _create_tool(hooked, "nag", hook.url + "/always")
    params: dict[str, Any] = {"arguments": {}}
    for _ in range(MAX_ROUNDS):
        result = _result(_modern(hooked, "nag", params))
        assert result["resultType"] == "input_required"
        params = {"arguments": {}, "inputResponses": {"confirm": ELICIT_OK}, "requestState": result["requestState"]}
    last = _result(_modern(hooked, "nag", params))
    assert last["resultType"] == "complete" and last["isError"] is True
    assert f"more than {MAX_ROUNDS} times" in last["content"][0]["text"]


# ------------------------------------------------------------------ stdio (session era)


def test_stdio_asks_the_host_on_stdout_and_reads_its_answer_line(tmp_path: Path) -> None:
    """``mcp-registry stdio`` with the conformance bundle: test_elicitation writes its request on
    stdout, the host answers with a response line, the call completes."""
    argv = [
        *mcp_registry_command(),
        "stdio",
        "--seed",
        "conformance",
        "--database-url",
        f"sqlite:///{tmp_path / 'stdio.db'}",
        "--data-dir",
        str(tmp_path / "data"),
    ]
    child = StdioProcess(argv, child_env())
    try:
        init = article_initialize("2025-11-25")
        init["params"]["capabilities"] = {"elicitation": {}}
        assert "result" in (child.rpc(init) or {})
        child.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        call = {"name": "test_elicitation", "arguments": {"message": "Who are you?"}}
        child.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
        request = child.receive()
        assert request["method"] == "elicitation/create" and request["params"]["message"] == "Who are you?"
        content = {"username": "ada", "email": "ada@example.com"}
        child.send({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept", "content": content}})
        answer = child.receive()
        assert answer["id"] == 2, answer
        assert answer["result"]["content"][0]["text"].startswith("User response: action=accept")
    finally:
        child.close()
