"""``subscriptions/listen`` (2026-07-28) in one process: the ListenService of a running McpRuntime,
fed by real catalog writes through the change feed (SQLite and PostgreSQL).

The transports (HTTP, stdio) only write what a ``ListenStream`` yields; here the stream is read
directly, so these tests pin what a listener is told and when, whatever carries it."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from registry.catalog.values import WriteOptions
from registry.config import Settings
from registry.db.changelog import last_change_id
from registry.limits import Limits
from registry.mcp.listen import ListenService, ListenStream
from registry.mcp.protocol import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    META_CLIENT_CAPABILITIES,
    META_PROTOCOL_VERSION,
    META_SERVER_INFO,
    META_SUBSCRIPTION_ID,
    JsonRpcError,
)
from registry.mcp.runtime import McpRuntime
from registry.mcp.sessions import ClientState
from registry.runtime import Registry
from tests.conftest import ADMIN_TOKEN, LiveServer
from tests.http import TLS
from tests.interop.mcp_wire import ACCEPT_BOTH, iter_sse
from tests.mcp.asgi_peer import AsgiPeer
from tests.oidc_issuer import TestIssuer
from tests.waiting import wait_until_async

SUB = META_SUBSCRIPTION_ID


def _client(label: str = "production", token_id: int | None = None) -> ClientState:
    return ClientState(label=label, principal="test", token_id=token_id)


@pytest.fixture
async def runtime(registry: Registry) -> AsyncIterator[McpRuntime]:
    registry.seed("demo")
    mcp = McpRuntime(registry)
    await mcp.start()
    try:
        yield mcp
    finally:
        await mcp.stop()


async def _write(fn: Any, *args: Any, **kwargs: Any) -> None:
    """A catalog write, as the admin API makes it (in a worker thread)."""
    await asyncio.to_thread(fn, *args, **kwargs)


async def _next(stream: ListenStream, timeout: float = 5.0) -> dict[str, Any]:
    message = await asyncio.wait_for(stream.next(), timeout)
    assert message is not None
    return message


async def _nothing(stream: ListenStream, wait: float = 0.6) -> None:
    """Nothing arrives within ``wait`` seconds."""
    assert await stream.next(timeout=wait) is None


async def _open(runtime: McpRuntime, request_id: Any, notifications: dict[str, Any], **client: Any) -> ListenStream:
    stream = await runtime.listen.open(request_id, {"notifications": notifications}, _client(**client))
    ack = await _next(stream)
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    return stream


def _describe(registry: Registry, kind: str, name: str, text: str) -> None:
    """A new description: a change of what the label lists."""
    spec = dict(registry.catalog.get(kind, name).spec)
    spec["description"] = text
    registry.catalog.update(kind, name, spec, WriteOptions(actor="test"))


# -- the filter ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, '"notifications" is required'),
        ({"notifications": ["toolsListChanged"]}, '"notifications" is required'),
        ({"notifications": {"toolsListChanged": "yes"}}, "must be a boolean"),
        ({"notifications": {"resourceSubscriptions": "info://server-info"}}, "must be an array"),
        ({"notifications": {"resourceSubscriptions": [1]}}, "non-empty strings"),
        ({"notifications": {"resourceSubscriptions": [""]}}, "non-empty strings"),
        ({"notifications": {"resourceSubscriptions": ["x://" + "a" * 60]}}, "REGISTRY_LIMIT_URI_CHARS"),
        ({"notifications": {"resourceSubscriptions": [f"x://{n}" for n in range(4)]}}, "REGISTRY_LIMIT_SUBSCRIPTIONS"),
    ],
)
async def test_a_bad_filter_is_refused_before_anything_is_registered(params: dict[str, Any], message: str) -> None:
    service = ListenService(Limits(uri_chars=40, subscriptions=3))
    with pytest.raises(JsonRpcError) as raised:
        await service.open(1, params, _client())
    assert raised.value.code == INVALID_PARAMS and message in raised.value.message
    assert len(service) == 0


async def test_the_ack_comes_first_and_names_only_what_is_honoured() -> None:
    service = ListenService()
    notifications = {
        "toolsListChanged": True,
        "promptsListChanged": False,
        "futureKind": True,  # unknown keys are ignored, not refused
        "resourceSubscriptions": ["info://server-info", "sprint://payments/current", "info://server-info"],
    }
    stream = await service.open("listen-1", {"notifications": notifications}, _client())
    assert len(service) == 1
    assert await _next(stream) == {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {
            "_meta": {SUB: "listen-1"},
            "notifications": {
                "toolsListChanged": True,
                "resourceSubscriptions": ["info://server-info", "sprint://payments/current"],
            },
        },
    }
    empty = await service.open(2, {"notifications": {"resourceSubscriptions": []}}, _client())
    assert (await _next(empty))["params"] == {"_meta": {SUB: 2}, "notifications": {}}


# -- what a listener hears -----------------------------------------------------------------
async def test_list_changes_reach_the_listeners_that_asked_tagged_with_their_own_id(
    runtime: McpRuntime, registry: Registry
) -> None:
    prompts = await _open(runtime, 7, {"promptsListChanged": True})
    tools = await _open(runtime, "7", {"toolsListChanged": True})  # the same id as a string: another stream
    both = await _open(runtime, "listen-3", {"promptsListChanged": True, "toolsListChanged": True})

    await _write(_describe, registry, "tool", "echo", "Echoes, now described anew.")
    assert await _next(tools) == {
        "jsonrpc": "2.0",
        "method": "notifications/tools/list_changed",
        "params": {"_meta": {SUB: "7"}},
    }
    assert (await _next(both))["params"]["_meta"] == {SUB: "listen-3"}
    await _nothing(prompts)  # a prompts-only listener is not told of a tools change

    await _write(_describe, registry, "prompt", "summarize", "Summaries, described anew.")
    got = await _next(prompts)
    assert got == {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed", "params": {"_meta": {SUB: 7}}}
    assert type(got["params"]["_meta"][SUB]) is int  # the same type as the request id
    assert (await _next(both))["method"] == "notifications/prompts/list_changed"
    await _nothing(tools)


async def test_a_template_only_edit_is_no_list_change(runtime: McpRuntime, registry: Registry) -> None:
    """The same decision as for session streams: what the label lists did not change."""
    stream = await _open(runtime, 1, {"promptsListChanged": True})

    def retemplate() -> None:
        spec = dict(registry.catalog.get("prompt", "summarize").spec)
        spec["messages"] = [{"role": "user", "content": {"type": "text", "text": "Briefly: {{ text }}"}}]
        registry.catalog.update("prompt", "summarize", spec, WriteOptions(actor="test"))

    await _write(retemplate)
    await _nothing(stream)


async def test_resources_updated_for_subscribed_uris_and_templates(runtime: McpRuntime, registry: Registry) -> None:
    subscriber = await _open(
        runtime, "s", {"resourceSubscriptions": ["info://server-info", "sprint://payments/current"]}
    )
    lister = await _open(runtime, "l", {"resourcesListChanged": True})

    def retext(name: str, text: str) -> None:
        spec = dict(registry.catalog.get("resource", name).spec)
        spec["text"] = text
        registry.catalog.update("resource", name, spec, WriteOptions(actor="test"))

    await _write(retext, "server-info", "{}")
    assert await _next(subscriber) == {
        "jsonrpc": "2.0",
        "method": "notifications/resources/updated",
        "params": {"_meta": {SUB: "s"}, "uri": "info://server-info"},
    }
    await _write(retext, "sprint-status", "Sprint of {{ team }}: on track")  # a template the URI matches
    assert (await _next(subscriber))["params"] == {"_meta": {SUB: "s"}, "uri": "sprint://payments/current"}
    await _nothing(lister)  # content only: no list changed, and it subscribed to no URI

    await _write(_describe, registry, "resource", "server-info", "Server facts, described anew.")
    assert (await _next(lister))["method"] == "notifications/resources/list_changed"
    # The subscriber asked for no list changes: only the update of its URI.
    assert (await _next(subscriber))["params"] == {"_meta": {SUB: "s"}, "uri": "info://server-info"}
    await _nothing(subscriber)


async def test_a_listener_hears_only_changes_to_its_own_label(runtime: McpRuntime, registry: Registry) -> None:
    production = await _open(runtime, 1, {"promptsListChanged": True})
    staging = await _open(runtime, 2, {"promptsListChanged": True}, label="staging")

    staged = {
        "name": "staged-only",
        "description": "only in staging",
        "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
    }
    await _write(lambda: registry.catalog.create("prompt", staged, WriteOptions(actor="test", labels=["staging"])))
    assert (await _next(staging))["params"] == {"_meta": {SUB: 2}}
    await _nothing(production)

    await _write(_describe, registry, "prompt", "code-review", "Reviews, described anew.")  # production only
    assert (await _next(production))["method"] == "notifications/prompts/list_changed"
    await _nothing(staging)


async def test_pending_changes_coalesce_per_kind(runtime: McpRuntime, registry: Registry) -> None:
    """A listener that is slow to read holds one pending list change per kind, not one per change."""
    stream = await _open(runtime, 1, {"promptsListChanged": True, "toolsListChanged": True})
    for n in range(5):
        await _write(_describe, registry, "prompt", "summarize", f"Summaries #{n}")
        await _write(_describe, registry, "tool", "echo", f"Echoes #{n}")
    with registry.db.session() as session:
        last = last_change_id(session)
    await wait_until_async(lambda: runtime.feed.position >= last, "the feed to dispatch every change")
    assert [method for method, _uri in stream.pending.values()] == [
        "notifications/prompts/list_changed",
        "notifications/tools/list_changed",
    ]


# -- bounds and endings --------------------------------------------------------------------
async def test_a_listener_that_does_not_read_is_dropped() -> None:
    service = ListenService(stall_s=0.3)
    service.start()
    try:
        reader = await service.open(1, {"notifications": {"toolsListChanged": True}}, _client())
        idle = await service.open(2, {"notifications": {"toolsListChanged": True}}, _client())
        await _next(reader)

        async def write_forever() -> None:
            await idle.next()  # the ack is taken (by this task: the consumer), then its write never returns
            await asyncio.Event().wait()

        blocked = asyncio.create_task(write_forever())
        waiting = asyncio.create_task(reader.next())  # waiting for a message is reading
        await wait_until_async(blocked.done, "the stalled listener's writer to be cancelled")
        assert blocked.cancelled() or blocked.done()  # its writer was cancelled...
        assert idle.ended and len(service) == 1  # ...and it is forgotten
        with pytest.raises(StopAsyncIteration):
            await idle.next()
        assert not waiting.done() and not reader.ended
        waiting.cancel()
    finally:
        await service.stop()


async def test_a_listen_nobody_consumes_is_dropped_too() -> None:
    service = ListenService(stall_s=0.3)
    service.start()
    try:
        await service.open(1, {"notifications": {}}, _client())
        await wait_until_async(lambda: len(service) == 0, "the unconsumed listen to be dropped")
    finally:
        await service.stop()


async def test_listens_are_bounded_per_process_and_per_token() -> None:
    service = ListenService(Limits(listen_streams=3, listen_streams_per_caller=2))
    params: dict[str, Any] = {"notifications": {"toolsListChanged": True}}
    first = await service.open(1, params, _client(token_id=5))
    await service.open(2, params, _client(token_id=5))
    with pytest.raises(JsonRpcError) as raised:
        await service.open(3, params, _client(token_id=5))
    assert raised.value.code == INVALID_REQUEST and "REGISTRY_LIMIT_LISTEN_STREAMS_PER_CALLER" in raised.value.message
    await service.open(3, params, _client(token_id=6))
    with pytest.raises(JsonRpcError) as raised:
        await service.open(4, params, _client(), peer="192.0.2.1")
    assert raised.value.message.endswith("(limit REGISTRY_LIMIT_LISTEN_STREAMS)")
    await first.aclose()  # a listen the client ended frees its place
    await service.open(4, params, _client(token_id=5))
    assert len(service) == 3


async def test_shutdown_ends_each_listen_with_its_final_result(runtime: McpRuntime, registry: Registry) -> None:
    stream = await _open(runtime, "listen-9", {"promptsListChanged": True})
    await _write(_describe, registry, "prompt", "summarize", "Described before shutdown.")
    await wait_until_async(lambda: stream.pending, "the change to be pending on the listen")
    runtime.drain()  # SIGTERM: what is pending is still written, then the result
    assert (await _next(stream))["method"] == "notifications/prompts/list_changed"
    final = await _next(stream)
    assert final == {
        "jsonrpc": "2.0",
        "id": "listen-9",
        "result": {
            "resultType": "complete",
            "_meta": {SUB: "listen-9", META_SERVER_INFO: final["result"]["_meta"][META_SERVER_INFO]},
        },
    }
    assert final["result"]["_meta"][META_SERVER_INFO]["name"] == "mcp-registry"
    with pytest.raises(StopAsyncIteration):
        await stream.next()
    assert len(runtime.listen) == 0


async def test_a_revoked_token_ends_its_listens(runtime: McpRuntime) -> None:
    mine = await _open(runtime, 1, {"toolsListChanged": True}, token_id=41)
    other = await _open(runtime, 2, {"toolsListChanged": True}, token_id=42)
    runtime._close_token(41)
    assert (await _next(mine))["result"]["resultType"] == "complete"
    await _nothing(other, 0.2)


# -- the SSE writer the HTTP transport uses --------------------------------------------------
async def test_the_sse_writer_sends_keepalives_no_event_ids_and_the_final_result_last() -> None:
    service = ListenService(keepalive_s=0.2, stall_s=5)
    service.start()
    peer = AsgiPeer()
    stream = await service.open("listen-1", {"notifications": {"toolsListChanged": True}}, _client())
    serving = asyncio.create_task(service.serve_sse(stream, peer.receive, peer.send))
    try:
        await wait_until_async(lambda: b": keep-alive" in peer.body, "a keep-alive while idle")
        stream.offer("tool", "notifications/tools/list_changed")
        await wait_until_async(lambda: b"tools/list_changed" in peer.body, "the offered notification")
        service.close_all()
        await asyncio.wait_for(serving, 5)
    finally:
        await service.stop()
    start = peer.sent[0]
    assert start["status"] == 200 and (b"x-accel-buffering", b"no") in start["headers"]
    events = [chunk for chunk in peer.body.split(b"\n\n") if chunk]
    assert b": keep-alive" in events  # comments while idle
    messages = [json.loads(e.split(b"data: ", 1)[1]) for e in events if b"data: " in e]
    assert [m.get("method", "result") for m in messages] == [
        "notifications/subscriptions/acknowledged",
        "notifications/tools/list_changed",
        "result",
    ]
    assert messages[-1]["id"] == "listen-1" and messages[-1]["result"]["resultType"] == "complete"
    assert b"\nid:" not in b"\n" + peer.body  # nothing is resumable in this era
    assert peer.ended and len(service) == 0


async def test_the_sse_writer_of_a_client_that_stopped_reading_is_cancelled() -> None:
    service = ListenService(stall_s=0.3)
    service.start()
    peer = AsgiPeer()
    stream = await service.open(3, {"notifications": {"toolsListChanged": True}}, _client())
    serving = asyncio.create_task(service.serve_sse(stream, peer.receive, peer.send))
    try:
        await wait_until_async(lambda: b"acknowledged" in peer.body, "the acknowledgement to be written")
        peer.block = True  # the client's TCP window is full: the next write never returns
        stream.offer("tool", "notifications/tools/list_changed")
        await asyncio.wait_for(serving, 3)  # ended by the stall, not by the client
        assert stream.ended and len(service) == 0
        assert b"tools/list_changed" not in peer.body
    finally:
        await service.stop()


async def test_a_client_closing_the_sse_response_ends_its_listen() -> None:
    service = ListenService()
    peer = AsgiPeer()
    stream = await service.open(4, {"notifications": {"toolsListChanged": True}}, _client())
    serving = asyncio.create_task(service.serve_sse(stream, peer.receive, peer.send))
    await wait_until_async(lambda: peer.sent, "the response to start")
    peer.disconnect()
    await asyncio.wait_for(serving, 3)
    assert stream.ended and len(service) == 0
    assert stream.offer("tool", "notifications/tools/list_changed") is False


# ------------------------------------------------------------------ per caller, over HTTP

LISTEN_ISSUER_AUDIENCE = "mcp-registry"


def _listen_message(request_id: int) -> dict[str, Any]:
    meta = {META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: {}}
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "subscriptions/listen",
        "params": {"_meta": meta, "notifications": {"toolsListChanged": True}},
    }


LISTEN_HEADERS = {
    "Accept": ACCEPT_BOTH,
    "Content-Type": "application/json",
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": "subscriptions/listen",
}


class Listens:
    """Listen POSTs held open (each acknowledged before the next is sent) until the block ends."""

    def __init__(self, url: str, held: ExitStack) -> None:
        self.url = url
        self.held = held
        self.ids = itertools.count(1)
        self.events: list[Iterator[Any]] = []

    def open(self, token: str | None = None, *, source: str = "127.0.0.1") -> dict[str, Any]:
        """The listen's first message (its ack), or the JSON-RPC error it was refused with."""
        headers = dict(LISTEN_HEADERS)
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        transport = httpx.HTTPTransport(local_address=source)
        client = self.held.enter_context(
            httpx.Client(base_url=self.url, transport=transport, timeout=httpx.Timeout(15, read=15), verify=TLS)
        )
        message = _listen_message(next(self.ids))
        response = self.held.enter_context(client.stream("POST", "/mcp", json=message, headers=headers))
        if not response.headers["content-type"].startswith("text/event-stream"):
            response.read()
            answer: dict[str, Any] = response.json()
            assert response.status_code == 400 and answer["id"] == message["id"], (response.status_code, answer)
            return answer
        events = iter_sse(response.iter_lines())
        self.events.append(events)  # kept: a generator collected early would close its response
        first: dict[str, Any] = next(events).json()
        assert first["method"] == "notifications/subscriptions/acknowledged", first
        return first


def _refused_per_caller(answer: dict[str, Any], kind: str) -> None:
    assert "error" in answer, f"a listen past the per-caller limit was accepted: {answer}"
    message = answer["error"]["message"]
    assert answer["error"]["code"] == INVALID_REQUEST, answer
    assert "REGISTRY_LIMIT_LISTEN_STREAMS_PER_CALLER" in message and kind in message, message


def test_listens_are_bounded_per_sso_user_and_per_anonymous_address(tmp_path: Path) -> None:
    """Issue 24: the per-token cap counted static tokens only, so one single-sign-on user opened
    every place of the process and an admin was then refused. Each SSO user (whatever token it
    presents) and each anonymous client address is a caller of its own."""
    with TestIssuer(audience=LISTEN_ISSUER_AUDIENCE) as issuer:
        settings = Settings(
            data_dir=tmp_path / "data",
            database_url=f"sqlite:///{tmp_path / 'registry.db'}",
            admin_token=ADMIN_TOKEN,
            secret_key="test-secret-key",
            oidc_issuer=issuer.url,
            oidc_audience=LISTEN_ISSUER_AUDIENCE,
            limits=Limits(listen_streams=10, listen_streams_per_caller=2),
        )
        registry = Registry(settings)
        registry.prepare()
        server = LiveServer(registry)
        server.start()
        try:
            with ExitStack() as held:
                listens = Listens(server.url, held)
                alice = [issuer.mint(), issuer.mint()]  # two tokens of one user: one caller
                assert "error" not in listens.open(alice[0])
                assert "error" not in listens.open(alice[1])
                _refused_per_caller(listens.open(issuer.mint()), "single-sign-on user")
                bob = issuer.mint(sub="user-bob", email="bob@example.test")
                assert "error" not in listens.open(bob)
                assert "error" not in listens.open(ADMIN_TOKEN)

                assert "error" not in listens.open()
                assert "error" not in listens.open()
                _refused_per_caller(listens.open(), "client address")
                assert "error" not in listens.open(source="127.0.0.2")  # another address: another caller
                assert len(server.app.mcp.listen) == 7
        finally:
            server.stop()
            registry.close()


def test_the_former_per_token_variable_still_sets_the_per_caller_limit() -> None:
    assert Limits.from_env({"REGISTRY_LIMIT_LISTEN_STREAMS_PER_TOKEN": "7"}).listen_streams_per_caller == 7
    both = {"REGISTRY_LIMIT_LISTEN_STREAMS_PER_TOKEN": "7", "REGISTRY_LIMIT_LISTEN_STREAMS_PER_CALLER": "3"}
    assert Limits.from_env(both).listen_streams_per_caller == 3
