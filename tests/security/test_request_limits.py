"""Issue 7, items 2 and 8 and the request-size policy: one set of limits on every surface.

The admin API checks the token before it reads a body (item 2) and bounds the body while it
streams; deeply nested or huge JSON is refused before it is parsed, on /mcp, /messages, the admin
API and stdio (item 8); batches and method names are capped, and an oversized method name is never
echoed back. Every refusal names its limit (``REGISTRY_LIMIT_...``). Each test attacks a real server
process, and asserts the refusal, that the server kept answering meanwhile, and its RSS bound.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from registry.boundedjson import JsonStructureError, exact_dumps, exact_loads, loads
from registry.limits import DEFAULT_LIMITS, Limits
from tests.http import TLS
from tests.interop.mcp_wire import (
    StdioProcess,
    StreamableHttpClient,
    article_initialize,
    child_env,
    iter_sse,
    mcp_registry_command,
)
from tests.security.conftest import MiB, ResponsivenessProbe
from tests.serve_process import ServerProcess, rss_bytes

DEEP = b"[" * 100_000
PROMPT = {"name": "limits-probe", "template": "Hello"}


def _raw_request(server: ServerProcess, head: str, body_prefix: bytes = b"", timeout: float = 5.0) -> tuple[int, bytes]:
    """Send a request head (and the first bytes of its body, never the rest) on a raw socket and
    read the answer: proves the server answered without waiting for the body it was promised."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as sock:
        sock.sendall(head.encode("latin-1") + body_prefix)
        received = b""
        deadline = time.monotonic() + timeout
        while b"\r\n\r\n" not in received or not _complete(received):
            if time.monotonic() > deadline:
                break
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            received += chunk
    assert received, f"no answer within {timeout}s: the server is waiting for the body"
    status = int(received.split(b" ", 2)[1])
    return status, received.partition(b"\r\n\r\n")[2]


def _complete(received: bytes) -> bool:
    head, _, body = received.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value.strip())
    return True


def _head(server: ServerProcess, path: str, length: int, token: str | None = None) -> str:
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: 127.0.0.1:{server.port}",
        "Content-Type: application/json",
        f"Content-Length: {length}",
    ]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    return "\r\n".join(lines) + "\r\n\r\n"


def _generated_body(total: int, chunk: int = MiB) -> Iterator[bytes]:
    """A JSON-looking body of ``total`` bytes, made as it is sent (the test holds none of it)."""
    piece = b"[" + b"1," * (chunk // 2 - 1) + b"1]"
    sent = 0
    while sent < total:
        yield piece
        sent += len(piece)


def _problem(response: httpx.Response, status: int, *fragments: str) -> dict[str, Any]:
    assert response.status_code == status, response.text[:500]
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers
    body: dict[str, Any] = response.json()
    for fragment in fragments:
        assert fragment in body["detail"], body
    return body


def _assert_clean_log(server: ServerProcess) -> None:
    log = server.log_tail(200_000)
    assert "Traceback" not in log and "RecursionError" not in log, log[-3000:]


def _rss_growth_within(server: ServerProcess, before: int, bound_mib: int, what: str) -> None:
    grew = (server.rss() - before) / MiB
    assert grew < bound_mib, f"RSS grew by {grew:.0f} MiB {what}, bound {bound_mib} MiB"


# ---------------------------------------------------------------- item 2: token before body


def test_admin_api_answers_401_before_reading_the_body(
    server: ServerProcess, healthz_probe: ResponsivenessProbe
) -> None:
    before = server.rss()
    with healthz_probe:
        # 300 MB promised, 64 kB sent: the 401 comes without the rest.
        status, body = _raw_request(server, _head(server, "/api/v1/prompts", 300_000_000), b"[" * 65536)
        assert status == 401, body
        assert json.loads(body)["status"] == 401
        # A 200 MB chunked body, streamed to the end: answered 401, and none of it is held.
        started = time.monotonic()
        with httpx.Client(base_url=server.url, timeout=60, verify=TLS) as http:
            response = http.post(
                "/api/v1/prompts", content=_generated_body(200 * MiB), headers={"Content-Type": "application/json"}
            )
        _problem(response, 401, "bearer token")
        elapsed = time.monotonic() - started
    healthz_probe.assert_responsive()
    _rss_growth_within(server, before, 32, "for 300 MB + 200 MB of unauthenticated body")
    assert elapsed < 30, f"the 200 MB upload took {elapsed:.1f}s"


def test_admin_api_refuses_an_oversized_body_while_it_streams(
    server: ServerProcess, healthz_probe: ResponsivenessProbe
) -> None:
    limit = DEFAULT_LIMITS.body_bytes
    before = server.rss()
    with healthz_probe:
        # Declared too large: refused before any of it is read.
        status, body = _raw_request(server, _head(server, "/api/v1/prompts", 300_000_000, server.admin_token))
        assert status == 413, body
        assert "REGISTRY_LIMIT_BODY_BYTES" in json.loads(body)["detail"]
        # No length declared (chunked): counted as it arrives, refused once past the limit.
        with server.admin() as api:
            response = api.post(
                "/api/v1/prompts", content=_generated_body(4 * limit), headers={"Content-Type": "application/json"}
            )
            problem = _problem(response, 413, "REGISTRY_LIMIT_BODY_BYTES", str(limit))
            assert problem["limit"] == "REGISTRY_LIMIT_BODY_BYTES"
            # The same client, the next request: the server serves on.
            assert api.get("/api/v1/prompts").status_code == 200
    healthz_probe.assert_responsive()
    _rss_growth_within(server, before, 32, f"refusing bodies of {4 * limit // MiB} MiB and 300 MB")


# ---------------------------------------------------------------- item 8: JSON structure


def _open_legacy_session(server: ServerProcess) -> tuple[httpx.Client, Any, Iterator[Any], str]:
    http = httpx.Client(base_url=server.url, timeout=30, verify=TLS)
    stream_cm = http.stream("GET", "/sse", headers={"Accept": "text/event-stream"})
    stream = stream_cm.__enter__()
    assert stream.status_code == 200
    events = iter_sse(stream.iter_lines())
    first = next(events)
    assert first.event == "endpoint"
    return http, stream_cm, events, first.data


def _assert_jsonrpc_refusal(response: httpx.Response, limit: str) -> None:
    assert response.status_code == 400, response.text[:500]
    error = response.json()["error"]
    assert error["code"] in (-32700, -32600), error
    assert f"REGISTRY_LIMIT_{limit}" in error["message"], error


def test_deeply_nested_json_is_refused_everywhere(server: ServerProcess, healthz_probe: ResponsivenessProbe) -> None:
    flat = json.dumps(list(range(DEFAULT_LIMITS.json_elements + 1))).encode()
    before = server.rss()
    http, stream_cm, _events, endpoint = _open_legacy_session(server)
    try:
        with healthz_probe, server.admin() as api:
            mcp_headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
            for body, limit in ((DEEP, "JSON_DEPTH"), (flat, "JSON_ELEMENTS")):
                _assert_jsonrpc_refusal(http.post("/mcp", content=body, headers=mcp_headers), limit)
                _assert_jsonrpc_refusal(http.post(endpoint, content=body, headers=mcp_headers), limit)
                refused = api.post("/api/v1/prompts", content=body, headers={"Content-Type": "application/json"})
                assert _problem(refused, 400, f"REGISTRY_LIMIT_{limit}")["limit"] == f"REGISTRY_LIMIT_{limit}"
            # Deep JSON inside strings is text, not structure: accepted.
            text = {**PROMPT, "description": "[" * 5_000}
            assert api.post("/api/v1/prompts", json=text).status_code == 201
    finally:
        stream_cm.__exit__(None, None, None)
        http.close()
    healthz_probe.assert_responsive()
    _rss_growth_within(server, before, 32, "refusing nested and oversized JSON")
    _assert_clean_log(server)


# ---------------------------------------------------------------- batches and method names


def test_batches_over_the_cap_are_refused(server: ServerProcess, prompts_get_probe: ResponsivenessProbe) -> None:
    cap = DEFAULT_LIMITS.batch_messages
    batch = [{"jsonrpc": "2.0", "id": n, "method": "ping"} for n in range(cap + 1)]
    before = server.rss()
    with prompts_get_probe, httpx.Client(base_url=server.url, timeout=30, verify=TLS) as http:
        client = StreamableHttpClient(http)
        client.initialize("2025-03-26")  # a protocol version that has batches
        within = client.post(batch[:cap])
        assert within.status_code == 200 and len(within.json()) == cap, within.text[:300]
        _assert_jsonrpc_refusal(client.post(batch), "BATCH_MESSAGES")
        legacy, stream_cm, _events, endpoint = _open_legacy_session(server)
        try:
            _assert_jsonrpc_refusal(legacy.post(endpoint, json=batch), "BATCH_MESSAGES")
        finally:
            stream_cm.__exit__(None, None, None)
            legacy.close()
    prompts_get_probe.assert_responsive()
    _rss_growth_within(server, before, 32, "refusing batches")


def test_oversized_method_names_are_refused_without_echo(
    server: ServerProcess, prompts_get_probe: ResponsivenessProbe
) -> None:
    name = "n" * 10_000
    before = server.rss()
    with prompts_get_probe, httpx.Client(base_url=server.url, timeout=30, verify=TLS) as http:
        client = StreamableHttpClient(http)
        client.initialize()
        response = client.post({"jsonrpc": "2.0", "id": 7, "method": name})
        assert response.status_code in (200, 400), response.text[:300]
        assert "n" * 200 not in response.text, "the method name was echoed back"
        error = response.json()["error"]
        assert error["code"] == -32600 and "REGISTRY_LIMIT_METHOD_CHARS" in error["message"], error
        assert response.json()["id"] == 7
        # An unknown method of an allowed length is still named (that is what helps a client).
        unknown = client.request("no/such", request_id=8)
        assert unknown["error"]["code"] == -32601 and "no/such" in unknown["error"]["message"]
    prompts_get_probe.assert_responsive()
    _rss_growth_within(server, before, 32, "refusing long method names")
    assert "n" * 200 not in server.log_tail(200_000), "the method name reached the server log"


# ---------------------------------------------------------------- stdio


@pytest.fixture
def stdio_child(tmp_path: Path) -> Iterator[StdioProcess]:
    argv = [*mcp_registry_command(), "stdio", "--data-dir", str(tmp_path / "stdio")]
    child = StdioProcess(argv, child_env())
    try:
        answer = child.rpc(article_initialize("2025-11-25"))
        assert answer is not None and "result" in answer, answer
        yield child
    finally:
        if child.proc.poll() is None:
            child.close()


def _write_in_background(child: StdioProcess, data: bytes) -> threading.Thread:
    def write() -> None:
        assert child.proc.stdin is not None
        child.proc.stdin.write(data)
        child.proc.stdin.flush()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    return writer


def test_stdio_over_long_line_is_refused_and_the_next_line_answered(stdio_child: StdioProcess) -> None:
    limit = DEFAULT_LIMITS.body_bytes
    before = rss_bytes(stdio_child.proc.pid)
    # A line of 4 x the limit, written while the child reads it (a pipe holds far less).
    line = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"' + b"a" * (4 * limit) + b'"}}\n'
    writer = _write_in_background(stdio_child, line)
    refused = stdio_child.receive(timeout=30)
    writer.join(timeout=30)
    assert refused["id"] is None and refused["error"]["code"] == -32700, refused
    assert "REGISTRY_LIMIT_BODY_BYTES" in refused["error"]["message"], refused
    started = time.monotonic()
    answer = stdio_child.rpc({"jsonrpc": "2.0", "id": 2, "method": "ping"})
    assert answer == {"jsonrpc": "2.0", "id": 2, "result": {}}, "the line after the long one was not answered as such"
    assert time.monotonic() - started < 5
    # Deep JSON, an oversized batch and a long method name: each refused, naming its limit.
    stdio_child.send(json.loads("[" * 60 + "]" * 60))  # within the limit: an (invalid) message, answered
    assert stdio_child.receive()["error"]["code"] == -32600
    for payload, limit_name in (
        (DEEP + b"\n", "JSON_DEPTH"),
        (json.dumps([{"jsonrpc": "2.0", "method": "x"}] * 33).encode() + b"\n", "BATCH_MESSAGES"),
        (json.dumps({"jsonrpc": "2.0", "id": 3, "method": "m" * 10_000}).encode() + b"\n", "METHOD_CHARS"),
    ):
        _write_in_background(stdio_child, payload).join(timeout=30)
        error = stdio_child.receive()
        assert f"REGISTRY_LIMIT_{limit_name}" in error["error"]["message"], error
        assert "m" * 200 not in json.dumps(error)
    assert stdio_child.rpc({"jsonrpc": "2.0", "id": 4, "method": "ping"}) == {"jsonrpc": "2.0", "id": 4, "result": {}}
    grew = (rss_bytes(stdio_child.proc.pid) - before) / MiB
    assert grew < 48, f"RSS of the stdio process grew by {grew:.0f} MiB, bound 48 MiB"
    assert stdio_child.close() == 0
    assert b"Traceback" not in stdio_child.stderr, stdio_child.stderr[-2000:]


# ---------------------------------------------------------------- the loader itself


@pytest.mark.parametrize(
    ("data", "outcome"),
    [
        (b"[" * 64 + b"]" * 64, "ok"),
        (b"[" * 65 + b"]" * 65, "REGISTRY_LIMIT_JSON_DEPTH"),
        (b'[1,{"a":' * 65, "REGISTRY_LIMIT_JSON_DEPTH"),  # nesting through objects, unbalanced
        (json.dumps(["[{" * 50_000]).encode(), "ok"),  # brackets in a string are text
        (json.dumps(['\\"[' * 1000]).encode(), "ok"),  # escaped quotes do not end the string
        (json.dumps(list(range(100_000))).encode(), "ok"),
        (json.dumps(list(range(100_001))).encode(), "REGISTRY_LIMIT_JSON_ELEMENTS"),
        (json.dumps({str(n): n for n in range(100_001)}).encode(), "REGISTRY_LIMIT_JSON_ELEMENTS"),
        (json.dumps([[] for _ in range(50_000)]).encode(), "ok"),  # empty containers hold no items
        (b"[" * 40 + b"1," * 40 + b"]" * 4_000_000, "ValueError"),  # stray closers: invalid, refused at once
        ('["a"]'.encode("utf-16-le"), "ValueError"),  # json.loads(bytes) would decode UTF-16
        (b'["\xff"]', "ValueError"),
        (b"[123456789012345678901234567890]", "ok"),  # beyond orjson: the json fallback
        (b'"' + b'\\"' * 500_000, "ValueError"),  # an unterminated string cannot make the scan quadratic
    ],
)
def test_bounded_loader(data: bytes, outcome: str) -> None:
    # CPU time of this thread: what the scan costs, whatever else the machine is running (a
    # quadratic scan of these inputs would take minutes, not a second).
    started = time.thread_time()
    try:
        loads(data)
        result = "ok"
    except JsonStructureError as exc:
        result = str(exc).rpartition("(limit ")[2].rstrip(")")
    except ValueError:
        result = "ValueError"
    assert result == outcome
    assert time.thread_time() - started < 1.0


def test_integers_beyond_64_bits_are_kept_exact() -> None:
    """orjson turns them into floats: an id or an account number would come back changed."""
    big = [2**64 - 1, 2**64, 123456789012345678901234567890, -(2**63) - 1]
    parsed = loads(json.dumps({"id": big[2], "arguments": {"n": big}}).encode())
    assert parsed == {"id": big[2], "arguments": {"n": big}}
    assert all(type(n) is int for n in parsed["arguments"]["n"])
    assert loads('{"n": 123456789012345678901234567890}') == {"n": 123456789012345678901234567890}
    assert loads(b'{"text": "1234567890123456789012", "n": 1.5}') == {"text": "1234567890123456789012", "n": 1.5}


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"])
@pytest.mark.parametrize("long_digits", [False, True])
def test_numbers_json_has_not_are_refused_on_either_parser(number: str, long_digits: bool) -> None:
    """orjson refuses them; json (the exact-integers path, and the one that words errors) took them."""
    extra = ', "id": 123456789012345678901234567890' if long_digits else ""
    with pytest.raises(ValueError):
        loads(f'{{"n": {number}{extra}}}'.encode())
    with pytest.raises(ValueError):
        exact_loads(f'{{"n": {number}{extra}}}')


def test_encoding_falls_back_for_big_integers_and_stays_valid_json() -> None:
    encoded = exact_dumps({"n": 2**70, "text": "caf\u00e9 \ud800"})
    assert json.loads(encoded) == {"n": 2**70, "text": "caf\u00e9 \ud800"}
    assert encoded.isascii()
    with pytest.raises(ValueError):
        exact_dumps({"n": 2**70, "x": float("nan")})


def test_bounded_loader_never_recurses_out() -> None:
    """Even with json_depth set beyond what the interpreter can recurse, the answer is the limit."""
    deep = b"[" * 50_000 + b"]" * 50_000
    with pytest.raises(JsonStructureError, match="REGISTRY_LIMIT_JSON_DEPTH"):
        loads(deep, Limits(json_depth=100_000, json_elements=100_000))
