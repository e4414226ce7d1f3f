"""Connected agents at the HTTP level, against real server processes: ``/ui/agents``, the home
page's section and ``GET /api/v1/agents`` list the MCP sessions open now (Streamable HTTP and
HTTP+SSE) with their client, protocol version, transport, label and token, never a whole session
id; an ended session goes away; a session opened on one replica is listed by the other."""

from __future__ import annotations

import html
import json
import queue
import re
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.http import TLS
from tests.interop.mcp_wire import SseEvent, StreamableHttpClient, iter_sse
from tests.replica_pairs import replicas_fixture
from tests.serve_process import ServerProcess
from tests.ui.conftest import UiServer, sign_in


def open_streamable(base_url: str, name: str, version: str, token: str | None = None) -> StreamableHttpClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    client = StreamableHttpClient(httpx.Client(base_url=base_url, timeout=30, verify=TLS), extra_headers=headers)
    client.initialize("2025-06-18", clientInfo={"name": name, "version": version})
    return client


class LegacySseSession:
    """An HTTP+SSE (2024-11-05) session: the /sse stream read in a thread, messages posted to its endpoint."""

    def __init__(self, base_url: str, path: str = "/sse", token: str | None = None) -> None:
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=base_url, timeout=httpx.Timeout(10, read=60), verify=TLS)
        self.events: queue.Queue[SseEvent | None] = queue.Queue()
        self._path = path
        self._stream: httpx.Response | None = None
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        first = self.events.get(timeout=10)
        assert first is not None and first.event == "endpoint", first
        self.endpoint = first.data

    def _read(self) -> None:
        try:
            with self.http.stream("GET", self._path, headers={"Accept": "text/event-stream", **self.headers}) as stream:
                self._stream = stream
                for event in iter_sse(stream.iter_lines()):
                    self.events.put(event)
        except (httpx.HTTPError, RuntimeError):
            pass
        finally:
            self.events.put(None)

    def post(self, message: dict[str, Any]) -> None:
        posted = self.http.post(
            self.endpoint, content=json.dumps(message), headers={"Content-Type": "application/json", **self.headers}
        )
        assert posted.status_code == 202, posted.text

    def request(self, method: str, params: dict[str, Any], request_id: int) -> dict[str, Any]:
        self.post({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        while True:
            event = self.events.get(timeout=30)
            assert event is not None, "the /sse stream ended before the answer"
            if event.event == "message" and event.data:
                answer: dict[str, Any] = event.json()
                if answer.get("id") == request_id:
                    return answer

    def initialize(self, name: str, version: str) -> None:
        params = {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": name, "version": version}}
        answer = self.request("initialize", params, 1)
        assert "result" in answer, answer
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    @property
    def session_id(self) -> str:
        found = re.search(r"session_id=([^&]+)", self.endpoint)
        assert found
        return found.group(1)

    def close(self) -> None:
        """Hang up: the server sees the connection go (the session ends with its stream)."""
        if self._stream is not None:
            self._stream.close()
        self.http.close()
        self._thread.join(timeout=5)


def agent_rows(page: str) -> dict[str, str]:
    """Client name -> its row's text (tags stripped), from the agents table of a page."""
    table = re.search(r'<table class="data agents">(.*?)</table>', page, re.DOTALL)
    assert table, page[:2000]
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", table.group(1), re.DOTALL):
        cells = [
            html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.DOTALL)
        ]
        if cells and cells[0]:
            rows[cells[0].split(" ")[0]] = " | ".join(cells)
    return rows


def api_agents(base_url: str, token: str) -> dict[str, dict[str, Any]]:
    answer = httpx.get(
        base_url + "/api/v1/agents", params={"limit": 500}, headers={"Authorization": f"Bearer {token}"}, verify=TLS
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["total"] >= len(body["items"])
    return {item["client_name"]: item for item in body["items"] if item["client_name"]}


@pytest.fixture
def viewer(ui_server: UiServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=ui_server.url, timeout=30, verify=TLS) as http:
        assert sign_in(http, ui_server.viewer_token).status_code == 303
        yield http


def test_open_sessions_are_listed_with_client_protocol_transport_label_and_token(
    ui_server: UiServer, viewer: httpx.Client
) -> None:
    tag = secrets.token_hex(3)
    http_name, sse_name = f"probe-http-{tag}", f"probe-sse-{tag}"
    with ui_server.admin() as admin:
        created = admin.post("/api/v1/tokens", json={"name": f"agent-{tag}", "scopes": ["agent"], "label": "staging"})
        assert created.status_code == 201, created.text
        agent_token = created.json()["token"]
    streamable = open_streamable(ui_server.url, http_name, "1.2.3", token=agent_token)
    legacy = LegacySseSession(ui_server.url, "/sse?label=staging")
    try:
        legacy.initialize(sse_name, "0.9.1")

        page = viewer.get("/ui/agents")
        assert page.status_code == 200, page.text
        rows = agent_rows(page.text)
        assert http_name in rows and sse_name in rows, rows
        assert rows[http_name].split(" | ")[:5] == [
            f"{http_name} 1.2.3",
            "2025-06-18",
            "Streamable HTTP",
            "staging",
            f"agent-{tag}",
        ]
        assert rows[sse_name].split(" | ")[:5] == [
            f"{sse_name} 0.9.1",
            "2024-11-05",
            "HTTP+SSE",
            "staging",
            "anonymous",
        ]
        assert "stdio" in page.text and "not listed" in page.text
        assert streamable.session_id and streamable.session_id not in page.text
        assert legacy.session_id not in page.text
        assert streamable.session_id[:6] in rows[http_name]  # a short prefix at most

        listed = api_agents(ui_server.url, ui_server.viewer_token)
        assert listed[http_name] | {"since": None, "last_seen": None} == {
            "id_prefix": streamable.session_id[:6],
            "client_name": http_name,
            "client_version": "1.2.3",
            "protocol_version": "2025-06-18",
            "transport": "streamable-http",
            "label": "staging",
            "principal": f"agent-{tag}",
            "since": None,
            "last_seen": None,
        }
        assert listed[sse_name]["transport"] == "sse" and listed[sse_name]["protocol_version"] == "2024-11-05"
        assert listed[sse_name]["principal"] == "anonymous" and listed[sse_name]["client_version"] == "0.9.1"
        assert streamable.session_id not in json.dumps(listed)

        home = viewer.get("/ui/")
        assert "Connected agents" in home.text and http_name in home.text and sse_name in home.text
        assert re.search(r"\d+ MCP sessions are open now", home.text)

        # An HTTP+SSE session's id does not open a Streamable HTTP session (its row is a listing only).
        borrowed = StreamableHttpClient(httpx.Client(base_url=ui_server.url, timeout=30, verify=TLS))
        borrowed.session_id, borrowed.protocol_version = legacy.session_id, "2024-11-05"
        assert borrowed.post({"jsonrpc": "2.0", "id": 5, "method": "ping"}).status_code == 404
        borrowed.http.close()

        # Ending the sessions takes them off the list: DELETE /mcp, and the /sse stream closing.
        ended = streamable.http.delete("/mcp", headers=streamable.headers())
        assert ended.status_code in (200, 204), ended.text
        legacy.close()
        for _ in range(100):
            rows = agent_rows(viewer.get("/ui/agents").text)
            if http_name not in rows and sse_name not in rows:
                break
            threading.Event().wait(0.1)
        assert http_name not in rows and sse_name not in rows, rows
        listed = api_agents(ui_server.url, ui_server.viewer_token)
        assert http_name not in listed and sse_name not in listed
    finally:
        streamable.http.close()
        legacy.close()


def test_a_revoked_tokens_sessions_are_not_listed(ui_server: UiServer, viewer: httpx.Client) -> None:
    name = f"probe-revoked-{secrets.token_hex(3)}"
    with ui_server.admin() as admin:
        created = admin.post("/api/v1/tokens", json={"name": name, "scopes": ["agent"]})
        assert created.status_code == 201, created.text
        client = open_streamable(ui_server.url, name, "1", token=created.json()["token"])
        try:
            assert name in agent_rows(viewer.get("/ui/agents").text)
            assert admin.delete(f"/api/v1/tokens/{created.json()['id']}").status_code == 200
            assert name not in agent_rows(viewer.get("/ui/agents").text)
        finally:
            client.http.close()


def test_the_api_needs_a_viewer_token_and_bounds_its_limit(ui_server: UiServer) -> None:
    assert httpx.get(ui_server.url + "/api/v1/agents", verify=TLS).status_code == 401
    with ui_server.admin() as admin:
        created = admin.post("/api/v1/tokens", json={"name": "agents-agent-only", "scopes": ["agent"]})
        agent_only = created.json()["token"]
    refused = httpx.get(ui_server.url + "/api/v1/agents", headers={"Authorization": f"Bearer {agent_only}"}, verify=TLS)
    assert refused.status_code == 403
    viewer = {"Authorization": f"Bearer {ui_server.viewer_token}"}
    too_many = httpx.get(ui_server.url + "/api/v1/agents", params={"limit": 501}, headers=viewer, verify=TLS)
    assert too_many.status_code == 422 and too_many.headers["content-type"].startswith("application/problem+json")
    one = httpx.get(ui_server.url + "/api/v1/agents", params={"limit": 1}, headers=viewer, verify=TLS).json()
    assert one["limit"] == 1 and len(one["items"]) <= 1
    document = httpx.get(ui_server.url + "/openapi.json", verify=TLS).json()
    operation = document["paths"]["/api/v1/agents"]["get"]
    assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/AgentList"
    }


def test_the_agents_page_needs_a_session(ui_server: UiServer) -> None:
    with httpx.Client(base_url=ui_server.url, verify=TLS) as http:
        page = http.get("/ui/agents")
        assert page.status_code == 303 and page.headers["location"].startswith("/ui/signin")


# ------------------------------------------------------------------ two replicas


replicas = replicas_fixture("agents-replicas")


def test_a_session_opened_on_one_replica_is_listed_by_the_other(
    replicas: tuple[ServerProcess, ServerProcess], tmp_path: Path
) -> None:
    a, b = replicas
    tag = secrets.token_hex(3)
    on_a = open_streamable(a.url, f"replica-http-{tag}", "3.0")
    legacy = LegacySseSession(a.url)
    try:
        legacy.initialize(f"replica-sse-{tag}", "3.1")
        with httpx.Client(base_url=b.url, timeout=30, verify=TLS) as http:
            assert sign_in(http, b.admin_token).status_code == 303
            rows = agent_rows(http.get("/ui/agents").text)
        assert "Streamable HTTP" in rows[f"replica-http-{tag}"], rows
        assert "HTTP+SSE" in rows[f"replica-sse-{tag}"], rows
        listed = api_agents(b.url, b.admin_token)
        assert listed[f"replica-http-{tag}"]["transport"] == "streamable-http"

        # Ended on A (DELETE /mcp): B no longer lists it.
        assert on_a.http.delete("/mcp", headers=on_a.headers()).status_code in (200, 204)
        assert f"replica-http-{tag}" not in api_agents(b.url, b.admin_token)
    finally:
        on_a.http.close()
        legacy.close()
