"""call_webhook against a real loopback server: request shape, response mapping, failures."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import pytest

from registry.webhooks import DEFAULT_MAX_RESPONSE_BYTES, OutboundClient, WebhookTarget, call_webhook, sign, verify

from .conftest import WebhookServer

PAYLOAD = {"city": "Paris", "units": "metric", "note": "café"}


def _text(result: dict[str, Any]) -> str:
    text: str = result["content"][0]["text"]
    return text


def _assert_error(result: dict[str, Any], *fragments: str) -> str:
    assert result["isError"] is True, result
    assert [item["type"] for item in result["content"]] == ["text"]
    text = _text(result)
    for fragment in fragments:
        assert fragment in text, text
    return text


class Recorder:
    """Collects progress and log callbacks in arrival order."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.events.append(("progress", progress, total, message))

    async def log(self, level: str, data: Any) -> None:
        self.events.append(("log", level, data))


# --------------------------------------------------------------------------- the request


async def test_request_is_signed_json_with_registry_headers(
    webhook_server: WebhookServer, client: OutboundClient
) -> None:
    target = WebhookTarget(
        url=webhook_server.url("/inspect"),
        headers={"X-Api-Key": "k-123", "Content-Type": "text/plain", "Host": "evil.example"},
        secret="topsecret",
    )
    result = await call_webhook(target, PAYLOAD, client=client)
    assert result["isError"] is False
    seen = result["structuredContent"]
    headers = seen["headers"]
    body = seen["body"].encode()

    assert seen["method"] == "POST"
    assert json.loads(body) == PAYLOAD
    assert headers["content-type"] == "application/json"  # the tool's own Content-Type is ignored
    assert headers["host"] == f"127.0.0.1:{webhook_server.port}"  # so is its Host
    assert headers["accept"] == "application/json, application/x-ndjson"
    assert headers["user-agent"] == "mcp-registry"
    assert headers["x-api-key"] == "k-123"

    signature = headers["x-registry-signature"]
    assert verify("topsecret", body, signature)
    assert not verify("wrong", body, signature)
    timestamp = int(signature.split(",")[0].removeprefix("t="))
    assert abs(timestamp - time.time()) < 60
    assert sign("topsecret", body, timestamp=timestamp) == signature


async def test_no_signature_without_secret_and_method_is_honoured(
    webhook_server: WebhookServer, client: OutboundClient
) -> None:
    target = WebhookTarget(url=webhook_server.url("/inspect"), method="put")
    result = await call_webhook(target, {}, client=client)
    assert result["structuredContent"]["method"] == "PUT"
    assert "x-registry-signature" not in result["structuredContent"]["headers"]


def test_target_repr_hides_credentials() -> None:
    target = WebhookTarget(url="https://example.com/hook", headers={"Authorization": "Bearer abc"}, secret="xyz")
    assert "abc" not in repr(target) and "xyz" not in repr(target)
    assert "example.com" in repr(target)


# --------------------------------------------------------------------------- response mapping


async def test_call_tool_result_is_passed_through(webhook_server: WebhookServer, client: OutboundClient) -> None:
    result = await call_webhook(WebhookTarget(url=webhook_server.url("/call-tool-result")), {}, client=client)
    assert result == {
        "content": [{"type": "text", "text": "hi"}, {"type": "image", "data": "AAAA", "mimeType": "image/png"}],
        "structuredContent": {"greeting": "hi"},
        "isError": False,
    }
    result = await call_webhook(WebhookTarget(url=webhook_server.url("/call-tool-error")), {}, client=client)
    assert result == {"content": [{"type": "text", "text": "nope"}], "isError": True}


async def test_plain_json_is_wrapped(webhook_server: WebhookServer, client: OutboundClient) -> None:
    result = await call_webhook(WebhookTarget(url=webhook_server.url("/plain-object")), {}, client=client)
    assert result == {
        "content": [{"type": "text", "text": json.dumps({"temperature": 21.5, "unit": "C"})}],
        "structuredContent": {"temperature": 21.5, "unit": "C"},
        "isError": False,
    }
    result = await call_webhook(WebhookTarget(url=webhook_server.url("/plain-list")), {}, client=client)
    assert result == {"content": [{"type": "text", "text": '[1, "two", {"three": 3}]'}], "isError": False}


async def test_empty_body_is_success_without_content(webhook_server: WebhookServer, client: OutboundClient) -> None:
    result = await call_webhook(WebhookTarget(url=webhook_server.url("/empty")), {}, client=client)
    assert result == {"content": [], "isError": False}


async def test_ndjson_progress_log_and_result_in_order(webhook_server: WebhookServer, client: OutboundClient) -> None:
    recorder = Recorder()
    result = await call_webhook(
        WebhookTarget(url=webhook_server.url("/ndjson")),
        {},
        client=client,
        on_progress=recorder.progress,
        on_log=recorder.log,
    )
    assert recorder.events == [
        ("progress", 1, 3, "starting"),
        ("log", "info", {"step": 1}),
        ("progress", 2, 3, None),
        ("log", "warning", "almost"),
    ]
    assert result == {"content": [{"type": "text", "text": "done"}], "structuredContent": {"n": 3}, "isError": False}


async def test_ndjson_without_callbacks_and_plain_result(webhook_server: WebhookServer, client: OutboundClient) -> None:
    result = await call_webhook(WebhookTarget(url=webhook_server.url("/ndjson")), {}, client=client)
    assert _text(result) == "done"
    result = await call_webhook(WebhookTarget(url=webhook_server.url("/ndjson-plain-result")), {}, client=client)
    assert result == {
        "content": [{"type": "text", "text": '{"answer": 42}'}],
        "structuredContent": {"answer": 42},
        "isError": False,
    }


async def test_ndjson_stream_without_result_is_an_error(webhook_server: WebhookServer, client: OutboundClient) -> None:
    recorder = Recorder()
    result = await call_webhook(
        WebhookTarget(url=webhook_server.url("/ndjson-no-result")), {}, client=client, on_progress=recorder.progress
    )
    _assert_error(result, "ended without a result")
    assert recorder.events == [("progress", 1, None, None)]


async def test_ndjson_invalid_line_is_an_error(webhook_server: WebhookServer, client: OutboundClient) -> None:
    result = await call_webhook(WebhookTarget(url=webhook_server.url("/ndjson-bad-line")), {}, client=client)
    _assert_error(result, "line 2", "not valid JSON")


@pytest.mark.parametrize(
    ("event", "fragment"),
    [
        ({"progress": "half"}, "'progress' and 'total' must be numbers"),
        ({"progress": True}, "'progress' and 'total' must be numbers"),
        ({"progress": 1, "total": "2"}, "'progress' and 'total' must be numbers"),
        ({"progress": 1, "message": 3}, "'message' must be a string"),
        ({"log": "oops"}, "'log' must be an object"),
        ({"log": {"level": "loud"}}, "'log' must be an object"),
        ({"log": {"level": ["info"]}}, "'log' must be an object"),
        ({"result": {"content": "not a list"}, "x": 1}, None),  # not CallToolResult-shaped: wrapped
        ({"result": {"content": [{"type": "text", "text": "ok"}], "isError": "yes"}}, "'isError' must be a boolean"),
    ],
)
async def test_ndjson_event_validation(
    webhook_server: WebhookServer, client: OutboundClient, event: dict[str, Any], fragment: str | None
) -> None:
    recorder = Recorder()
    result = await call_webhook(
        WebhookTarget(url=webhook_server.url("/ndjson-echo")),
        event,
        client=client,
        on_progress=recorder.progress,
        on_log=recorder.log,
    )
    if fragment is None:
        assert result["isError"] is False
        assert result["structuredContent"] == event["result"]
    else:
        _assert_error(result, fragment)
    assert recorder.events == []


# --------------------------------------------------------------------------- failures


@pytest.mark.parametrize("code", [400, 404, 500, 503])
async def test_non_2xx_is_an_error_with_status_and_snippet(
    webhook_server: WebhookServer, client: OutboundClient, code: int
) -> None:
    result = await call_webhook(WebhookTarget(url=webhook_server.url(f"/status/{code}")), {}, client=client)
    text = _assert_error(result, f"HTTP {code}", "upstream exploded")
    assert len(text) < 700  # the 5 KB body is cut to a snippet


async def test_redirects_are_not_followed(webhook_server: WebhookServer, client: OutboundClient) -> None:
    before = webhook_server.state.hits["/plain-object"]
    result = await call_webhook(WebhookTarget(url=webhook_server.url("/redirect")), {}, client=client)
    _assert_error(result, "HTTP 302", "redirects are not followed")
    assert webhook_server.state.hits["/plain-object"] == before


async def test_timeout_is_an_error(webhook_server: WebhookServer, client: OutboundClient) -> None:
    started = time.monotonic()
    result = await call_webhook(WebhookTarget(url=webhook_server.url("/slow?s=3"), timeout_s=0.3), {}, client=client)
    _assert_error(result, "timed out after 0.3 s")
    assert time.monotonic() - started < 2


async def test_timeout_bounds_the_whole_streaming_call(webhook_server: WebhookServer, client: OutboundClient) -> None:
    # Progress keeps arriving, so no single read times out: only the overall deadline can stop it.
    recorder = Recorder()
    started = time.monotonic()
    result = await call_webhook(
        WebhookTarget(url=webhook_server.url(f"/ndjson-forever?key={uuid.uuid4()}"), timeout_s=0.5),
        {},
        client=client,
        on_progress=recorder.progress,
    )
    _assert_error(result, "timed out")
    assert time.monotonic() - started < 3
    assert len(recorder.events) >= 2


async def test_connection_refused_is_an_error(client: OutboundClient, free_port: int) -> None:
    result = await call_webhook(WebhookTarget(url=f"http://127.0.0.1:{free_port}/hook"), {}, client=client)
    _assert_error(result, "could not connect to webhook host '127.0.0.1'")


async def test_invalid_json_is_an_error(webhook_server: WebhookServer, client: OutboundClient) -> None:
    result = await call_webhook(WebhookTarget(url=webhook_server.url("/invalid-json")), {}, client=client)
    _assert_error(result, "invalid JSON", "application/json")
    result = await call_webhook(WebhookTarget(url=webhook_server.url("/nan-json")), {}, client=client)
    _assert_error(result, "invalid JSON", "NaN")


async def test_invalid_call_tool_result_is_an_error(webhook_server: WebhookServer, client: OutboundClient) -> None:
    result = await call_webhook(WebhookTarget(url=webhook_server.url("/bad-call-tool-result")), {}, client=client)
    _assert_error(result, "invalid CallToolResult", "content[0]")


@pytest.mark.parametrize("path", ["/big", "/big-chunked"])
async def test_oversized_response_is_an_error(webhook_server: WebhookServer, client: OutboundClient, path: str) -> None:
    target = WebhookTarget(url=webhook_server.url(f"{path}?n=20000"))
    result = await call_webhook(target, {}, client=client, max_response_bytes=10_000)
    _assert_error(result, "larger than the 10000-byte limit")
    # The same body under the cap is fine.
    result = await call_webhook(target, {}, client=client, max_response_bytes=30_000)
    assert result["isError"] is False
    assert len(_text(result)) == 20_002


async def test_gzip_bomb_answer_is_cut_off_at_the_cap(webhook_server: WebhookServer, client: OutboundClient) -> None:
    result = await call_webhook(WebhookTarget(url=webhook_server.url("/gzip-bomb")), {}, client=client)
    _assert_error(result, f"larger than the {DEFAULT_MAX_RESPONSE_BYTES}-byte limit")


async def test_oversized_ndjson_stream_is_an_error(webhook_server: WebhookServer, client: OutboundClient) -> None:
    target = WebhookTarget(url=webhook_server.url(f"/ndjson-forever?key={uuid.uuid4()}"), timeout_s=10)
    result = await call_webhook(target, {}, client=client, max_response_bytes=2_000)
    _assert_error(result, "larger than the 2000-byte limit")


async def test_bad_requests_are_errors_not_exceptions(client: OutboundClient) -> None:
    result = await call_webhook(WebhookTarget(url="ftp://example.com/x"), {}, client=client)
    _assert_error(result, "scheme must be http, https or builtin")
    result = await call_webhook(WebhookTarget(url="http://127.0.0.1:1/", method="GE T"), {}, client=client)
    _assert_error(result, "invalid webhook method")
    result = await call_webhook(WebhookTarget(url="http://127.0.0.1:1/"), {"when": object()}, client=client)
    _assert_error(result, "cannot be sent as JSON")


async def test_errors_never_reveal_secrets_or_header_values(
    webhook_server: WebhookServer, client: OutboundClient, free_port: int
) -> None:
    secrets = {"Authorization": "Bearer hunter2-token"}
    urls = [
        webhook_server.url("/status/500?token=query-secret"),
        webhook_server.url("/slow?s=2&token=query-secret"),
        f"http://127.0.0.1:{free_port}/hook?token=query-secret",
    ]
    for url in urls:
        target = WebhookTarget(url=url, headers=secrets, secret="sig-secret", timeout_s=0.3)
        text = _assert_error(await call_webhook(target, {}, client=client))
        for leaked in ("hunter2", "sig-secret", "query-secret"):
            assert leaked not in text
    bad_header = WebhookTarget(url=webhook_server.url("/inspect"), headers={"X-Key": "hunter2\r\nX-Injected: 1"})
    text = _assert_error(await call_webhook(bad_header, {}, client=client), "X-Key")
    assert "hunter2" not in text


# --------------------------------------------------------------------------- cancellation


async def test_cancellation_propagates_and_closes_the_response(
    webhook_server: WebhookServer, client: OutboundClient
) -> None:
    key = str(uuid.uuid4())
    first_progress = asyncio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        first_progress.set()

    task = asyncio.create_task(
        call_webhook(
            WebhookTarget(url=webhook_server.url(f"/ndjson-forever?key={key}"), timeout_s=30),
            {},
            client=client,
            on_progress=on_progress,
        )
    )
    await asyncio.wait_for(first_progress.wait(), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The server sees the client go away: the streaming response was closed, not left running.
    closed = await asyncio.to_thread(webhook_server.state.closed[key].wait, 5)
    assert closed


async def test_cancellation_before_response_propagates(webhook_server: WebhookServer, client: OutboundClient) -> None:
    task = asyncio.create_task(
        call_webhook(WebhookTarget(url=webhook_server.url("/slow?s=3"), timeout_s=30), {}, client=client)
    )
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
