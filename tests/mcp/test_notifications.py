"""Change notifications on one server: who is told what, streams that stall or outlive their
session, draining on SIGTERM, and the metrics that watch it all."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from registry.config import Settings
from registry.mcp.streams import _CLOSE, ClientStream, StreamHub
from registry.runtime import Registry
from tests.conftest import ADMIN_TOKEN, LiveServer, free_port
from tests.interop.mcp_wire import StreamableHttpClient
from tests.stream_listener import StreamListener

LIST_CHANGED = {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"}


def _session(server: LiveServer, path: str = "/mcp") -> StreamableHttpClient:
    client = StreamableHttpClient(httpx.Client(base_url=server.url, timeout=15), path=path)
    client.initialize("2025-11-25")
    return client


def _listen(server: LiveServer, client: StreamableHttpClient) -> StreamListener:
    assert client.session_id is not None
    listener = StreamListener(server.url, client.session_id)
    assert listener.next().data == ""  # priming event: the stream is registered
    return listener


@pytest.fixture
def demo_server(live_server: LiveServer) -> LiveServer:
    live_server.registry.seed("demo")
    return live_server


def test_a_session_is_told_only_about_its_own_label(demo_server: LiveServer) -> None:
    production = _session(demo_server)
    staging = _session(demo_server, path="/mcp?label=staging")
    on_production, on_staging = _listen(demo_server, production), _listen(demo_server, staging)
    try:
        with demo_server.client() as admin:
            saved = admin.put(
                "/api/v1/prompts/summarize",
                json={
                    "template": "Staged {{ text }}",
                    "arguments": [{"name": "text", "required": True}],
                    "labels": ["staging"],
                },
            )
            assert saved.status_code == 200, saved.text
            assert on_staging.next().json() == LIST_CHANGED
            assert on_production.drain(1.0) == []  # production did not move

            promoted = admin.put("/api/v1/prompts/summarize/labels/production", json={"version": 2})
            assert promoted.status_code == 200, promoted.text
            assert on_production.next().json() == LIST_CHANGED
            assert on_staging.drain(0.5) == []  # staging was already on version 2
    finally:
        on_production.close()
        on_staging.close()


def test_resource_updates_go_to_subscribers_only(demo_server: LiveServer) -> None:
    subscriber, bystander = _session(demo_server), _session(demo_server)
    subscriber.request("resources/subscribe", {"uri": "info://server-info"})
    subscriber.request("resources/subscribe", {"uri": "sprint://payments/current"})
    on_subscriber, on_bystander = _listen(demo_server, subscriber), _listen(demo_server, bystander)
    try:
        with demo_server.client() as admin:
            info = {"uri": "info://server-info", "kind": "static", "text": "{}", "mimeType": "application/json"}
            assert admin.put("/api/v1/resources/server-info", json=info).status_code == 200
            sprint = admin.get("/api/v1/resources/sprint-status").json()["spec"]
            sprint["text"] = "Sprint of {{ team }}: on track"
            assert admin.put("/api/v1/resources/sprint-status", json=sprint).status_code == 200
        got = [on_subscriber.next().json() for _ in range(4)]
        assert got == [
            {"jsonrpc": "2.0", "method": "notifications/resources/list_changed"},
            {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "info://server-info"}},
            {"jsonrpc": "2.0", "method": "notifications/resources/list_changed"},
            {
                "jsonrpc": "2.0",
                "method": "notifications/resources/updated",
                "params": {"uri": "sprint://payments/current"},
            },
        ]
        seen = [on_bystander.next().json()["method"] for _ in range(2)]
        assert seen == ["notifications/resources/list_changed"] * 2
        assert on_bystander.drain(0.5) == []
        read = subscriber.request("resources/read", {"uri": "sprint://payments/current"})
        assert read["result"]["contents"][0]["text"] == "Sprint of payments: on track"
    finally:
        on_subscriber.close()
        on_bystander.close()


def test_archive_and_restore_change_what_agents_see(demo_server: LiveServer) -> None:
    client = _session(demo_server)
    listener = _listen(demo_server, client)
    try:
        with demo_server.client() as admin:
            assert admin.delete("/api/v1/tools/add").status_code == 200
            assert listener.next().json()["method"] == "notifications/tools/list_changed"
            names = [t["name"] for t in client.request("tools/list")["result"]["tools"]]
            assert "add" not in names
            assert admin.post("/api/v1/tools/add/restore").status_code == 200
            assert listener.next().json()["method"] == "notifications/tools/list_changed"
            assert "add" in [t["name"] for t in client.request("tools/list")["result"]["tools"]]
    finally:
        listener.close()


def test_a_client_that_stops_reading_is_dropped_not_buffered() -> None:
    async def scenario() -> None:
        from registry.mcp.sessions import ClientState

        stream = ClientStream("s", ClientState(label="production", principal="p"))
        accepted = sum(stream.offer(("1:0", b"{}")) for _ in range(StreamHub.MAX_QUEUE + 50))
        assert accepted == StreamHub.MAX_QUEUE
        assert stream.dropped
        assert stream.queue.qsize() == StreamHub.MAX_QUEUE  # bounded: nothing beyond the cap is kept
        items = [stream.queue.get_nowait() for _ in range(stream.queue.qsize())]
        assert items[-1] is _CLOSE  # the stream ends; the client reconnects and resumes
        assert not stream.offer(("2:0", b"{}"))

    asyncio.run(scenario())


@pytest.fixture
def short_lived_sessions(settings: Settings) -> Iterator[LiveServer]:
    quick = Settings(**{**settings.__dict__, "session_idle_timeout_s": 1.0})
    registry = Registry(quick)
    registry.prepare()
    server = LiveServer(registry)
    server.start()
    yield server
    server.stop()
    registry.close()


def test_idle_sessions_expire_but_a_stream_keeps_its_session_alive(short_lived_sessions: LiveServer) -> None:
    server = short_lived_sessions
    idle, streaming = _session(server), _session(server)
    listener = _listen(server, streaming)
    try:
        time.sleep(2.5)  # several idle timeouts and sweeps
        gone = idle.post({"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert gone.status_code == 404
        assert streaming.request("ping")["result"] == {}
        assert not listener.ended.is_set()
    finally:
        listener.close()


def test_sigterm_closes_streams_and_exits(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "REGISTRY_ADMIN_TOKEN": ADMIN_TOKEN}
    env.pop("REGISTRY_DATABASE_URL", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "registry",
            "serve",
            "--port",
            str(port),
            "--data-dir",
            str(tmp_path / "data"),
            "--log-level",
            "warning",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "server did not start"
            time.sleep(0.1)
        client = StreamableHttpClient(httpx.Client(base_url=url, timeout=15))
        client.initialize("2025-11-25")
        assert client.session_id is not None
        listener = StreamListener(url, client.session_id)
        assert listener.next().data == ""
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert listener.ended.wait(5), "the stream was not closed on SIGTERM"
        # uvicorn shuts down gracefully, then re-raises the signal it caught: 0 or -SIGTERM are both clean.
        assert proc.wait(timeout=15) in (0, -signal.SIGTERM)
        assert time.monotonic() - started < 15
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_metrics(demo_server: LiveServer) -> None:
    assert httpx.get(demo_server.url + "/metrics").status_code == 401
    client = _session(demo_server)
    listener = _listen(demo_server, client)
    try:
        client.request("prompts/get", {"name": "summarize", "arguments": {"text": "x"}})
        with demo_server.client() as admin:
            admin.put(
                "/api/v1/prompts/summarize",
                json={"template": "M {{ text }}", "arguments": [{"name": "text", "required": True}]},
            )
            listener.next()
            text = admin.get("/metrics").text
    finally:
        listener.close()
    values = {
        line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if line and not line.startswith("#")
    }
    assert values["mcp_streams_open"] == 1.0
    assert values["mcp_sessions_open"] >= 1.0
    assert values["mcp_notifications_sent_total"] >= 1.0
    assert values["mcp_notification_lag_seconds_count"] >= 1.0
    assert values['mcp_request_duration_seconds_count{method="prompts/get"}'] >= 1.0
