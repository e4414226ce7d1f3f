"""``subscriptions/listen`` across replicas: two real registry processes on one PostgreSQL database.

A listener is served by whichever replica its POST reached; an admin edit made through the other
replica reaches it through the change log and PostgreSQL NOTIFY, as for session-era GET streams."""

from __future__ import annotations

import json
import queue
import secrets
import threading
import time
from typing import Any

import httpx

from registry.mcp.protocol import META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, META_SUBSCRIPTION_ID
from tests.http import TLS
from tests.interop.mcp_wire import ACCEPT_BOTH, iter_sse
from tests.replica_pairs import replicas_fixture
from tests.serve_process import ServerProcess

ADMIN = "listen-replica-admin-" + secrets.token_hex(6)
MODERN = "2026-07-28"


replicas = replicas_fixture("listen-replicas", admin_token=ADMIN)


class Listener:
    """A ``subscriptions/listen`` POST held open in a thread; its SSE messages land in a queue."""

    def __init__(self, base_url: str, request_id: Any, notifications: dict[str, Any]) -> None:
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self.status: int | None = None
        self._client = httpx.Client(base_url=base_url, timeout=httpx.Timeout(15, read=None), verify=TLS)
        body = {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "subscriptions/listen",
            "params": {
                "_meta": {META_PROTOCOL_VERSION: MODERN, META_CLIENT_CAPABILITIES: {}},
                "notifications": notifications,
            },
        }
        headers = {
            "Accept": ACCEPT_BOTH,
            "Content-Type": "application/json",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": "subscriptions/listen",
        }
        self._request = self._client.build_request("POST", "/mcp", json=body, headers=headers)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            response = self._client.send(self._request, stream=True)
            self.status = response.status_code
            for event in iter_sse(response.iter_lines()):
                self.messages.put(json.loads(event.data))
        except (httpx.HTTPError, RuntimeError):
            pass  # closed by the test

    def next(self, timeout: float = 10.0) -> dict[str, Any]:
        return self.messages.get(timeout=timeout)

    def drain(self, wait: float) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + wait
        while (left := deadline - time.monotonic()) > 0:
            try:
                got.append(self.messages.get(timeout=left))
            except queue.Empty:
                break
        return got

    def close(self) -> None:
        self._client.close()


def _redescribe(base_url: str, kind: str, name: str, text: str) -> None:
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=15, verify=TLS) as admin:
        spec = admin.get(f"/api/v1/{kind}s/{name}").json()["spec"]
        spec["description"] = text
        response = admin.put(f"/api/v1/{kind}s/{name}", json=spec)
        assert response.status_code == 200, response.text


def test_a_listener_on_one_replica_hears_an_edit_made_through_the_other(
    replicas: tuple[ServerProcess, ServerProcess],
) -> None:
    a, b = replicas
    on_b = Listener(b.url, "listen-b", {"promptsListChanged": True})
    tools_on_b = Listener(b.url, 17, {"toolsListChanged": True})
    on_a = Listener(a.url, "listen-a", {"promptsListChanged": True})
    try:
        for listener in (on_b, tools_on_b, on_a):
            assert listener.next()["method"] == "notifications/subscriptions/acknowledged"
        assert on_b.status == 200

        started = time.monotonic()
        _redescribe(a.url, "prompt", "summarize", f"Edited on A at {started}")
        assert on_b.next() == {
            "jsonrpc": "2.0",
            "method": "notifications/prompts/list_changed",
            "params": {"_meta": {META_SUBSCRIPTION_ID: "listen-b"}},
        }
        assert time.monotonic() - started < 5  # NOTIFY, not the 2 s poll several times over
        assert on_a.next()["params"]["_meta"] == {META_SUBSCRIPTION_ID: "listen-a"}  # and on A itself
        assert tools_on_b.drain(0.5) == []  # a prompts change is not a tools change

        _redescribe(b.url, "tool", "echo", f"Edited on B at {time.monotonic()}")
        assert tools_on_b.next()["params"]["_meta"] == {META_SUBSCRIPTION_ID: 17}
        assert on_a.drain(0.5) == [] and on_b.drain(0.1) == []
    finally:
        for listener in (on_b, tools_on_b, on_a):
            listener.close()
