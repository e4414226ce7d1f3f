"""Change notifications on one server: who is told what, streams that stall or outlive their
session, draining on SIGTERM, and the metrics that watch it all."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from registry.config import Settings
from registry.mcp.streams import ClientStream, StreamHub
from registry.runtime import Registry
from tests.conftest import ADMIN_TOKEN, LiveServer
from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient
from tests.serve_process import ServerProcess
from tests.stream_listener import StreamListener

LIST_CHANGED = {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"}


def _session(server: LiveServer, path: str = "/mcp") -> StreamableHttpClient:
    client = StreamableHttpClient(httpx.Client(base_url=server.url, timeout=15, verify=TLS), path=path)
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
    """A content edit is ``resources/updated`` for the subscribers of the URIs it touches, and
    nothing at all for anyone else (the list did not change); a title edit is a list change."""
    subscriber, bystander = _session(demo_server), _session(demo_server)
    subscriber.request("resources/subscribe", {"uri": "info://server-info"})
    subscriber.request("resources/subscribe", {"uri": "sprint://payments/current"})
    on_subscriber, on_bystander = _listen(demo_server, subscriber), _listen(demo_server, bystander)
    try:
        with demo_server.client() as admin:
            info = admin.get("/api/v1/resources/server-info").json()["spec"]
            info["text"] = "{}"
            assert admin.put("/api/v1/resources/server-info", json=info).status_code == 200
            sprint = admin.get("/api/v1/resources/sprint-status").json()["spec"]
            sprint["text"] = "Sprint of {{ team }}: on track"
            assert admin.put("/api/v1/resources/sprint-status", json=sprint).status_code == 200
            got = [on_subscriber.next().json() for _ in range(2)]
            assert got == [
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/resources/updated",
                    "params": {"uri": "info://server-info"},
                },
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/resources/updated",
                    "params": {"uri": "sprint://payments/current"},
                },
            ]
            assert on_bystander.drain(0.5) == []  # content only: nothing anyone lists changed
            read = subscriber.request("resources/read", {"uri": "sprint://payments/current"})
            assert read["result"]["contents"][0]["text"] == "Sprint of payments: on track"

            sprint["title"] = "Sprint status (renamed)"
            assert admin.put("/api/v1/resources/sprint-status", json=sprint).status_code == 200
            assert [on_subscriber.next().json() for _ in range(2)] == [
                {"jsonrpc": "2.0", "method": "notifications/resources/list_changed"},
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/resources/updated",
                    "params": {"uri": "sprint://payments/current"},
                },
            ]
            assert on_bystander.next().json() == {"jsonrpc": "2.0", "method": "notifications/resources/list_changed"}
            assert on_bystander.drain(0.5) == []
        listed = subscriber.request("resources/templates/list")["result"]["resourceTemplates"]
        assert [t["title"] for t in listed if t["name"] == "sprint-status"] == ["Sprint status (renamed)"]
    finally:
        on_subscriber.close()
        on_bystander.close()


def test_list_changed_only_when_the_list_shows_something_new(demo_server: LiveServer) -> None:
    """Issue 8: a template-only edit sent prompts/list_changed to every session of the label, so
    every agent re-listed the whole catalog for nothing. Now the change row records which labels'
    lists changed: a template edit sends nothing (agents fetch content when they use it) yet is
    served at once; a title edit is a list change; a label another session is not served moves
    without a word to it."""
    client = _session(demo_server)
    listener = _listen(demo_server, client)
    try:
        with demo_server.client() as admin:
            spec = admin.get("/api/v1/prompts/summarize").json()["spec"]
            spec["messages"][0]["content"]["text"] = "Briefly: {{ text }}"
            assert admin.put("/api/v1/prompts/summarize", json=spec).status_code == 200
            got = client.request("prompts/get", {"name": "summarize", "arguments": {"text": "x"}})
            assert got["result"]["messages"][0]["content"]["text"] == "Briefly: x"  # served at once
            assert listener.drain(1.0) == []  # ...and nobody told to re-list

            tool = admin.get("/api/v1/tools/echo").json()["spec"]
            tool["webhook"]["timeout_s"] = 12  # how it is called, not what tools/list shows
            assert admin.put("/api/v1/tools/echo", json=tool).status_code == 200
            assert admin.put("/api/v1/prompts/summarize/labels/staging", json={"version": 1}).status_code == 200
            assert listener.drain(1.0) == []

            spec["title"] = "Summarizer"
            assert admin.put("/api/v1/prompts/summarize", json=spec).status_code == 200
            assert listener.next().json() == LIST_CHANGED
            tool["description"] = "Says it again"
            assert admin.put("/api/v1/tools/echo", json=tool).status_code == 200
            assert listener.next().json() == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
            # Moving production back to a version with another title is a list change too.
            assert admin.put("/api/v1/prompts/summarize/labels/production", json={"version": 1}).status_code == 200
            assert listener.next().json() == LIST_CHANGED
            changes = admin.get("/api/v1/changes", params={"limit": 1000}).json()["items"]
    finally:
        listener.close()
    listed = [p for p in client.request("prompts/list")["result"]["prompts"] if p["name"] == "summarize"]
    assert "title" not in listed[0]  # version 1 again
    assert [c["action"] for c in changes[-6:]] == [
        "updated",
        "updated",
        "label_moved",
        "updated",
        "updated",
        "label_moved",
    ]


def test_list_changes_are_recorded_per_label_and_old_rows_count_as_changed() -> None:
    """What the notifier sends, from change rows: ``listing_changed`` names the labels whose lists
    changed; rows from before it (None) are taken as a list change for all their labels. The
    resources/updated of a change keeps its SSE index (:1...) whether a list_changed precedes it."""
    from datetime import UTC, datetime

    from registry.mcp.notifier import ChangeEvent, Notifier, keyed_messages_for, messages_for
    from registry.mcp.sessions import ClientState

    now = datetime.now(UTC)
    labels = frozenset({"production", "latest"})
    production = ClientState(label="production", principal="p", subscriptions={"doc://a"})
    staging = ClientState(label="staging", principal="p")

    def change(number: int, listed: frozenset[str] | None) -> ChangeEvent:
        return ChangeEvent(number, "resource", "a", "updated", labels, ("doc://a",), now, listed)

    updated = {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "doc://a"}}
    list_changed = {"jsonrpc": "2.0", "method": "notifications/resources/list_changed"}
    assert messages_for(change(1, frozenset()), production) == [updated]  # content only
    assert [index for index, _, _ in keyed_messages_for(change(1, frozenset()), production)] == [1]
    assert messages_for(change(2, frozenset({"production"})), production) == [list_changed, updated]
    assert messages_for(change(3, frozenset({"latest"})), production) == [updated]
    assert messages_for(change(4, None), production) == [list_changed, updated]  # an old row
    assert messages_for(change(5, None), staging) == []

    events = [change(1, frozenset()), change(2, frozenset())]

    class Feed:
        async def read_range(self, after: int, upto: int) -> list[ChangeEvent]:
            return [event for event in events if after < event.id <= upto]

    replayed = asyncio.run(Notifier(hub=None, db=None).replay(Feed(), production, "1:0", 2))  # type: ignore[arg-type]
    assert [event_id for event_id, _ in replayed] == ["2:1"]


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
        accepted = sum(stream.offer((None, b"{}")) for _ in range(StreamHub.MAX_QUEUE + 50))
        assert accepted == StreamHub.MAX_QUEUE
        assert stream.dropped
        # Bounded, and a drop sends nothing more: the client resumes with its Last-Event-ID.
        assert stream.pending_events() == []
        assert not stream.offer(("2:0", b"{}"))

    asyncio.run(scenario())


def test_pending_notifications_coalesce_per_kind_and_uri_in_id_order() -> None:
    """A stream that falls behind holds one list_changed per kind and one resources/updated per
    URI, the newest, in increasing id order: however many changes arrive, it is never dropped
    for it, and each id it is sent covers every change before it."""

    async def scenario() -> None:
        from registry.mcp.sessions import ClientState

        stream = ClientStream("s", ClientState(label="production", principal="p"))
        for change in range(1, 1001):
            kind = "prompt" if change % 2 else "resource"
            assert stream.offer((f"{change}:0", kind.encode()), kind)
            if kind == "resource":
                uri = f"doc://{change // 2 % 4}"
                assert stream.offer((f"{change}:1", uri.encode()), ("updated", uri))
        assert not stream.dropped
        assert stream.pending_events() == [
            ("994:1", b"doc://1"),
            ("996:1", b"doc://2"),
            ("998:1", b"doc://3"),
            ("999:0", b"prompt"),
            ("1000:0", b"resource"),
            ("1000:1", b"doc://0"),
        ]

    asyncio.run(scenario())


def test_a_stalled_writer_is_dropped_and_close_keeps_what_is_pending() -> None:
    async def scenario() -> None:
        from registry.mcp.sessions import ClientState

        hub = StreamHub(stall_s=5.0)
        reading = ClientStream("r", ClientState(label="production", principal="p"))
        stalled = ClientStream("s", ClientState(label="production", principal="p"))
        hub._streams = {"r": {reading}, "s": {stalled}}
        reading.writing = stalled.writing = True  # both wait for their client to take a write
        assert hub.drop_stalled(now=100.0) == 0  # first seen waiting
        reading.writes += 1  # this one's client took it
        assert hub.drop_stalled(now=104.0) == 0
        assert hub.drop_stalled(now=105.0) == 1  # the other's has waited 5 s
        assert stalled.dropped and not reading.dropped
        reading.offer(("7:0", b"a"), "prompt")
        reading.offer(("8:0", b"b"), "resource")
        reading.close()
        assert reading.pending_events() == [("7:0", b"a"), ("8:0", b"b")]  # close discards nothing
        assert not reading.offer(("9:0", b"c"), "prompt")

    asyncio.run(scenario())


def test_a_replay_is_coalesced_and_covers_every_missed_change() -> None:
    """A client back after 3,000 changes gets the newest notification per kind and per URI, each
    id at least that of every change it stands for; nothing it already had is resent."""
    from datetime import UTC, datetime

    from registry.mcp.notifier import ChangeEvent, Notifier
    from registry.mcp.sessions import ClientState

    now = datetime.now(UTC)
    events = [
        ChangeEvent(
            n,
            "prompt" if n % 2 else "resource",
            "x",
            "updated",
            frozenset({"production"}),
            () if n % 2 else (f"doc://{n % 3}",),
            now,
        )
        for n in range(1, 3001)
    ]

    class Feed:
        async def read_range(self, after: int, upto: int) -> list[ChangeEvent]:
            assert upto - after <= Notifier.REPLAY_PAGE  # read a page at a time
            return [event for event in events if after < event.id <= upto]

    client = ClientState(label="production", principal="p", subscriptions={"doc://0", "doc://1", "doc://9"})
    notifier = Notifier(hub=None, db=None)  # type: ignore[arg-type]
    missed = asyncio.run(notifier.replay(Feed(), client, "10:0", 3000))  # type: ignore[arg-type]
    assert [(event_id, json.loads(data)["method"]) for event_id, data in missed] == [
        ("2998:1", "notifications/resources/updated"),  # doc://1 (doc://2, at 2996, is not subscribed)
        ("2999:0", "notifications/prompts/list_changed"),
        ("3000:0", "notifications/resources/list_changed"),
        ("3000:1", "notifications/resources/updated"),  # doc://0
    ]
    uris = [json.loads(data)["params"]["uri"] for _, data in missed if b"updated" in data]
    assert uris == ["doc://1", "doc://0"]
    # Resuming in the middle of a change resends only the rest of it.
    assert asyncio.run(notifier.replay(Feed(), client, "3000:1", 3000)) == []  # type: ignore[arg-type]
    assert asyncio.run(notifier.replay(Feed(), client, "3000:0", 3000)) == [  # type: ignore[arg-type]
        ("3000:1", b'{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"doc://0"}}')
    ]


@pytest.fixture
def short_lived_sessions(settings: Settings) -> Iterator[LiveServer]:
    # 2 s: a stream's keep-alive touches its session every 0.5 s, so its row stays fresh with
    # 1-1.5 s to spare for a touch written late on a loaded box (1 s left half that, and once
    # was not enough in CI).
    quick = Settings(**{**settings.__dict__, "session_idle_timeout_s": 2.0})
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
        time.sleep(5.0)  # two idle timeouts and several sweeps
        gone = idle.post({"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert gone.status_code == 404
        assert streaming.request("ping")["result"] == {}
        assert not listener.ended.is_set()
    finally:
        listener.close()


def test_sigterm_closes_streams_and_exits(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", admin_token=ADMIN_TOKEN, name="sigterm")
    try:
        server.start(wait="/healthz", timeout=30)
        client = StreamableHttpClient(httpx.Client(base_url=server.url, timeout=15, verify=TLS))
        client.initialize("2025-11-25")
        assert client.session_id is not None
        listener = StreamListener(server.url, client.session_id)
        assert listener.next().data == ""
        started = time.monotonic()
        server.send_signal(signal.SIGTERM)
        assert listener.ended.wait(5), "the stream was not closed on SIGTERM"
        # uvicorn shuts down gracefully, then re-raises the signal it caught: 0 or -SIGTERM are both clean.
        assert server.wait_exit(15) in (0, -signal.SIGTERM)
        assert time.monotonic() - started < 15
    finally:
        server.stop()


def test_metrics(demo_server: LiveServer) -> None:
    assert httpx.get(demo_server.url + "/metrics", verify=TLS).status_code == 401
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


def test_a_bulk_import_sends_each_session_one_list_change_per_kind(demo_server: LiveServer, tmp_path: Path) -> None:
    """Issue 8: a 1,000-entry import is one change-log range and one burst; a session hears about it
    once per kind it touched, not 1,000 times."""

    bundle = tmp_path / "bundle"
    (bundle / "prompts").mkdir(parents=True)
    (bundle / "resources").mkdir()
    for i in range(1000):
        (bundle / "prompts" / f"bulk-{i:04d}.yaml").write_text(f"name: bulk-{i:04d}\ntemplate: Prompt {i}\n")
    for i in range(5):
        (bundle / "resources" / f"doc-{i}.yaml").write_text(f"name: doc-{i}\nuri: doc://bulk/{i}\ntext: Doc {i}\n")
    client = _session(demo_server)
    listener = _listen(demo_server, client)
    try:
        done = demo_server.registry.bundles.apply_import(bundle, actor="test")
        assert sum(1 for item in done if item.action == "create") == 1005
        first = listener.next().json()
        events = [first] + [event.json() for event in listener.drain(2.0)]
        methods = sorted(event["method"] for event in events)
        assert methods == ["notifications/prompts/list_changed", "notifications/resources/list_changed"], methods
        listed = client.request("prompts/list", {})["result"]["prompts"]
        assert len(listed) == 100  # a page; the new prompts are served
        got = client.request("prompts/get", {"name": "bulk-0999"})["result"]["messages"][0]["content"]["text"]
        assert got == "Prompt 999"
    finally:
        listener.close()
