"""Issue 24: SIGTERM while ``tools/call`` requests are still running.

A real ``mcp-registry serve`` process with a short graceful-shutdown window
(``REGISTRY_SHUTDOWN_GRACE_S``) runs four tool calls whose loopback webhooks do not answer before
the window ends: session era and 2026-07-28, each once answered as plain JSON (a webhook that
just takes long) and once as an SSE stream (a webhook that streams progress, which the registry
relays first). On SIGTERM every one of them must get a JSON-RPC answer carrying its own id, the
-32003 "server restarting, retry" error, and the process must exit cleanly; before, uvicorn
cancelled them at the end of its window and each got ``500 text/plain "Internal Server Error"``
(and the log a CancelledError traceback).
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from registry.mcp.protocol import META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION
from tests.http import TLS
from tests.interop.mcp_wire import ACCEPT_BOTH, StreamableHttpClient, response_messages
from tests.serve_process import ServerProcess
from tests.waiting import wait_until
from tests.webhooks.conftest import WebhookServer, webhook_server

__all__ = ["webhook_server"]

MODERN = "2026-07-28"
#: uvicorn's window from SIGTERM; the running calls are answered shortly before it ends.
GRACE_S = 3


@pytest.fixture
def server(tmp_path: Path, webhook_server: WebhookServer) -> Iterator[ServerProcess]:
    env = {"REGISTRY_SHUTDOWN_GRACE_S": str(GRACE_S), "REGISTRY_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8"}
    with ServerProcess(tmp_path / "data", env=env, name="sigterm-registry", log_level="info") as process:
        with process.admin() as admin:
            for name, url in (
                ("slow", webhook_server.url("/slow?s=60")),  # holds its answer for a minute
                ("chatty", webhook_server.url("/ndjson-forever?key=sigterm")),  # progress, never a result
            ):
                body = {"name": name, "description": f"{name} webhook", "webhook": {"url": url}}
                assert admin.post("/api/v1/tools", json=body).status_code == 201
        yield process


def _session_call(server: ServerProcess, name: str, request_id: int, progress: bool) -> Callable[[], httpx.Response]:
    client = StreamableHttpClient(httpx.Client(base_url=server.url, timeout=30, verify=TLS))
    client.initialize("2025-11-25")
    params: dict[str, Any] = {"name": name, "arguments": {}}
    if progress:
        params["_meta"] = {"progressToken": f"p{request_id}"}
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    return lambda: client.post(message)


def _modern_call(server: ServerProcess, name: str, request_id: str, progress: bool) -> Callable[[], httpx.Response]:
    meta: dict[str, Any] = {META_PROTOCOL_VERSION: MODERN, META_CLIENT_CAPABILITIES: {}}
    if progress:
        meta["progressToken"] = f"p-{request_id}"
    message = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": {}, "_meta": meta},
    }
    headers = {
        "Accept": ACCEPT_BOTH,
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
    }
    return lambda: httpx.post(server.url + "/mcp", content=json.dumps(message), headers=headers, timeout=30, verify=TLS)


def test_sigterm_answers_running_tool_calls_with_a_json_rpc_error_carrying_their_id(
    server: ServerProcess, webhook_server: WebhookServer
) -> None:
    hits = webhook_server.state.hits
    before = hits["/slow"], hits["/ndjson-forever"]
    calls: dict[int | str, tuple[Callable[[], httpx.Response], str]] = {
        11: (_session_call(server, "slow", 11, progress=False), "application/json"),
        12: (_session_call(server, "chatty", 12, progress=True), "text/event-stream"),
        "m-13": (_modern_call(server, "slow", "m-13", progress=False), "application/json"),
        "m-14": (_modern_call(server, "chatty", "m-14", progress=True), "text/event-stream"),
    }
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        running: dict[int | str, Future[httpx.Response]] = {key: pool.submit(call) for key, (call, _) in calls.items()}
        wait_until(
            lambda: (hits["/slow"] - before[0], hits["/ndjson-forever"] - before[1]) == (2, 2),
            lambda: f"all four calls to reach their webhooks; {dict(hits)}\n{server.log_tail()}",
        )
        log_offset = server.log_path.stat().st_size
        server.send_signal(signal.SIGTERM)
        for request_id, future in running.items():
            response = future.result(timeout=30)
            kind = calls[request_id][1]
            assert response.status_code == 200, (request_id, response.status_code, response.text[:300])
            assert response.headers["content-type"].startswith(kind), (request_id, response.headers)
            answers = [m for m in response_messages(response) if "method" not in m]
            assert len(answers) == 1, (request_id, response.text[:500])
            answer = answers[0]
            assert answer["id"] == request_id, answer
            assert answer["error"]["code"] == -32003, answer
            assert "restarting" in answer["error"]["message"] and "retry" in answer["error"]["message"], answer
            if kind == "text/event-stream":  # progress was relayed first, then the answer ended the stream
                methods = [m.get("method") for m in response_messages(response)]
                assert "notifications/progress" in methods, methods
    assert server.wait_exit(timeout=GRACE_S + 15) in (0, -signal.SIGTERM), server.log_tail()
    log = server.log_path.read_bytes()[log_offset:].decode("utf-8", "replace")
    assert "timeout graceful shutdown exceeded" not in log, log[-3000:]
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log[-3000:]
