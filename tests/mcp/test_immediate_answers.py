"""POSTs to ``/mcp`` answered in the HTTP parser's callback (``StreamableHttpTransport.answer_now``,
through ``registry.serving.HttpProtocol``) answer exactly what the ASGI path answers, and
everything the immediate path must not answer reaches the ASGI path, on SQLite and PostgreSQL.

The same request is sent twice: to ``/mcp`` (offered to ``answer_now``) and to ``/mcp?via=asgi``
(a request target with a query string is never offered, and is served by the same transport).
A wrapper around ``answer_now`` records whether it answered.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer
from tests.interop.mcp_wire import StreamableHttpClient, open_session
from tests.serve_process import issue_token


@pytest.fixture
def answered(live_server: LiveServer, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether ``answer_now`` answered each request it was offered, in order."""
    transport = live_server.app.mcp.streamable_http
    real = transport.answer_now
    record: list[bool] = []

    def recording(raw_headers: list[tuple[bytes, bytes]], body: bytes) -> Any:
        answer = real(raw_headers, body)
        record.append(answer is not None)
        return answer

    monkeypatch.setattr(transport, "answer_now", recording)
    return record


@pytest.fixture
def catalog(api: httpx.Client) -> None:
    prompts = [
        {
            "name": "brief",
            "description": "inline",
            "arguments": [{"name": "topic", "required": True}],
            "template": "About {{ topic }}",
        },
        {
            "name": "branchy",
            "description": "not inline: a block tag renders on a worker thread",
            "arguments": [{"name": "topic", "required": True}],
            "template": "{% if topic %}About {{ topic }}{% endif %}",
        },
    ]
    for prompt in prompts:
        assert api.post("/api/v1/prompts", json=prompt).status_code == 201
    resource = {"name": "guide", "uri": "res://guide", "description": "d", "mimeType": "text/plain", "text": "Guide"}
    assert api.post("/api/v1/resources", json=resource).status_code == 201


def _request(method: str, params: dict[str, Any] | None = None, request_id: Any = 7) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def _both(client: StreamableHttpClient, message: Any, **headers: str) -> tuple[httpx.Response, httpx.Response]:
    offered = client.post(message, **headers)
    client.path = "/mcp?via=asgi"
    try:
        through_asgi = client.post(message, **headers)
    finally:
        client.path = "/mcp"
    return offered, through_asgi


def _same(offered: httpx.Response, through_asgi: httpx.Response) -> None:
    assert offered.status_code == through_asgi.status_code, (offered.text, through_asgi.text)
    assert offered.headers.get("content-type") == through_asgi.headers.get("content-type")
    if offered.headers.get("content-type") == "application/json":
        assert offered.json() == through_asgi.json()
    else:
        assert offered.content == through_asgi.content


AT_ONCE = [
    _request("prompts/get", {"name": "brief", "arguments": {"topic": "caching"}}),
    _request("prompts/get", {"name": "brief", "arguments": {"topic": "caching"}}, request_id="a-string-id"),
    _request("prompts/get", {"name": "brief", "arguments": {"topic": "x" * 100}}, request_id=2**62),
    _request("prompts/get", {"name": "brief", "arguments": {"topic": "y"}}, request_id=2**70),  # beyond 64 bits
    _request("prompts/get", {"name": "brief", "arguments": {"topic": "z"}}, request_id=-(2**63) - 1),
    _request("prompts/get", {"name": "nobody", "arguments": {}}),
    _request("prompts/get", {"name": "brief", "arguments": {}}),  # a required argument missing
    _request("prompts/get", {"name": "brief", "arguments": {"topic": "a", "extra": "b"}}),  # undeclared
    _request("prompts/get", {"name": 5}),
    _request("prompts/list"),
    _request("prompts/list", {"cursor": "not-a-cursor"}),
    _request("resources/list"),
    _request("resources/templates/list"),
    _request("resources/read", {"uri": "res://guide"}),
    _request("resources/read", {"uri": "res://missing"}),
    _request("tools/list"),
    _request("ping"),
    _request(
        "completion/complete",
        {"ref": {"type": "ref/prompt", "name": "brief"}, "argument": {"name": "topic", "value": "c"}},
    ),
]


@pytest.mark.usefixtures("catalog")
@pytest.mark.parametrize("message", AT_ONCE, ids=lambda m: f"{m['method']}-{json.dumps(m.get('params'))[:40]}")
def test_reads_are_answered_at_once_and_exactly_as_the_asgi_path_answers(
    live_server: LiveServer, answered: list[bool], message: dict[str, Any]
) -> None:
    client = open_session(live_server.url)
    answered.clear()
    offered, through_asgi = _both(client, message)
    assert answered == [True], "the read was not answered at once"
    _same(offered, through_asgi)
    assert offered.json()["id"] == message["id"]


@pytest.mark.usefixtures("catalog")
def test_what_must_wait_stream_or_write_goes_to_the_asgi_path(live_server: LiveServer, answered: list[bool]) -> None:
    client = open_session(live_server.url)
    cases: list[tuple[Any, dict[str, str]]] = [
        (_request("prompts/get", {"name": "branchy", "arguments": {"topic": "t"}}), {}),  # a worker-thread render
        (_request("tools/call", {"name": "nothing", "arguments": {}}), {}),  # a task of its own, cancellable
        (_request("logging/setLevel", {"level": "debug"}), {}),  # writes the session
        (_request("resources/subscribe", {"uri": "res://guide"}), {}),
        ([_request("ping", request_id=1), _request("ping", request_id=2)], {}),  # a batch
        ({"jsonrpc": "2.0", "method": "notifications/initialized"}, {}),  # 202, no answer
        ({"jsonrpc": "2.0", "id": 7, "result": {}}, {}),  # a client's answer
        (_request("initialize", client_initialize_params()), {}),
        (_request("prompts/list"), {"Accept": "text/event-stream"}),  # an SSE answer
        (_request("prompts/list"), {"Content-Type": "text/plain"}),  # 415
        (_request("prompts/list"), {"Origin": "http://evil.example"}),  # 403
        (_request("prompts/list"), {"Mcp-Session-Id": "0" * 32}),  # an unknown session: 404
        (_request("prompts/list"), {"MCP-Protocol-Version": "2026-07-28"}),  # the stateless era
        (b"{not json", {}),  # 400
        (_request("nonexistent/method"), {}),  # -32601, the usual way
    ]
    for message, headers in cases:
        answered.clear()
        if isinstance(message, bytes):
            offered = client.http.post("/mcp", content=message, headers={**client.headers(), **headers})
            through_asgi = client.http.post("/mcp?via=asgi", content=message, headers={**client.headers(), **headers})
        else:
            offered, through_asgi = _both(client, message, **headers)
        assert answered == [False], (message, headers)
        if message == _request("initialize", client_initialize_params()):
            assert offered.status_code == through_asgi.status_code == 200  # two new sessions
            assert offered.headers["mcp-session-id"] != through_asgi.headers["mcp-session-id"]
            continue
        _same(offered, through_asgi)


def client_initialize_params() -> dict[str, Any]:
    return {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}


@pytest.mark.usefixtures("catalog")
def test_another_tokens_session_is_not_found_either_way(
    live_server: LiveServer, api: httpx.Client, answered: list[bool]
) -> None:
    owner = open_session(live_server.url, issue_token(api, "owner", ["agent"])["token"])
    other = issue_token(api, "other", ["agent"])["token"]
    intruder = open_session(live_server.url, other)
    intruder.session_id = owner.session_id  # the other agent's session id
    assert owner.request("prompts/list")["result"]["prompts"]
    answered.clear()
    offered, through_asgi = _both(intruder, _request("prompts/list"))
    assert answered == [False]
    assert offered.status_code == through_asgi.status_code == 404
    _same(offered, through_asgi)


@pytest.mark.usefixtures("catalog")
def test_a_read_that_waits_after_all_is_answered_by_the_asgi_path(
    live_server: LiveServer, answered: list[bool], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Should ``answers_at_once`` ever accept a request whose handler waits, nothing is lost: the
    waiting run is abandoned before any effect, the error is logged and the ASGI path answers."""
    server = live_server.app.mcp.server
    monkeypatch.setattr(server, "answers_at_once", lambda message, client: True)
    client = open_session(live_server.url)
    answered.clear()
    with caplog.at_level(logging.ERROR, logger="registry.mcp"):
        offered, through_asgi = _both(client, _request("prompts/get", {"name": "branchy", "arguments": {"topic": "t"}}))
    assert answered == [False]
    assert "waited although answers_at_once said it would not" in caplog.text
    _same(offered, through_asgi)
    assert offered.json()["result"]["messages"][0]["content"]["text"] == "About t"


@pytest.mark.usefixtures("catalog")
def test_completion_history_of_an_immediate_answer_is_kept_once_it_is_written(
    live_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prompts/get answered at once leaves the completion history of its values for after its
    answer is written (the agent does not wait for it), and the history is there by the agent's
    next request; its usage count and latency are recorded as it is answered."""
    runtime = live_server.app.mcp
    transport, server, usage = runtime.streamable_http, runtime.server, runtime.usage
    assert usage is not None
    client = open_session(live_server.url)
    session = transport.sessions.peek(client.session_id or "")
    assert session is not None

    def state() -> tuple[int, list[str], int]:
        """(prompts/get uses of "brief" counted, the session's "topic" history, prompts/get latencies observed)"""
        uses = sum(n for key, n in usage.pending().items() if "brief" in key and "get" in key)
        history = server.completions.recall(session, ("ref/prompt", "brief"), "topic")
        return uses, history, sum(runtime.metrics.request_latency._counts.get("prompts/get", []))

    real = transport.answer_now
    seen: list[tuple[str, tuple[int, list[str], int]]] = []

    def watching(raw_headers: list[tuple[bytes, bytes]], body: bytes) -> Any:
        answer = real(raw_headers, body)
        if answer is None or b"prompts/get" not in body:
            return answer
        assert answer[3] is not None, "a prompts/get answered at once left nothing for after its answer"
        then = answer[3]
        seen.append(("answered", state()))

        def then_watched() -> None:
            then()
            seen.append(("written", state()))

        return (*answer[:3], then_watched)

    uses, history, observed = state()
    assert "deferred-caching" not in history
    monkeypatch.setattr(transport, "answer_now", watching)
    got = client.post(_request("prompts/get", {"name": "brief", "arguments": {"topic": "deferred-caching"}}))
    assert got.json()["result"]["messages"][0]["content"]["text"] == "About deferred-caching"
    completion = client.post(
        _request(
            "completion/complete",
            {"ref": {"type": "ref/prompt", "name": "brief"}, "argument": {"name": "topic", "value": "deferred"}},
        )
    )
    assert completion.json()["result"]["completion"]["values"] == ["deferred-caching"]
    assert seen == [
        ("answered", (uses + 1, history, observed + 1)),  # counted, not yet remembered
        ("written", (uses + 1, ["deferred-caching", *history], observed + 1)),
    ]


@pytest.mark.usefixtures("catalog")
def test_a_failure_remembering_values_changes_no_answer_on_either_path(
    live_server: LiveServer, answered: list[bool], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Work left for after an answer cannot change it: answered at once or through the ASGI app,
    a prompts/get whose completion history cannot be kept is answered, and the failure logged."""

    def broken(*args: Any) -> None:
        raise RuntimeError("history broken")

    monkeypatch.setattr(live_server.app.mcp.server.completions, "remember_all", broken)
    client = open_session(live_server.url)
    answered.clear()
    with caplog.at_level(logging.ERROR, logger="registry"):
        offered, through_asgi = _both(client, _request("prompts/get", {"name": "brief", "arguments": {"topic": "x"}}))
    assert answered == [True]
    _same(offered, through_asgi)
    assert offered.json()["result"]["messages"][0]["content"]["text"] == "About x"
    assert caplog.text.count("work after an answer failed") == 2 and "history broken" in caplog.text, caplog.text
