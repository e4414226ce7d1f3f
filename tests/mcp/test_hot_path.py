"""The trimmed request path (issue 12) answers exactly what the plain one did, on SQLite and PostgreSQL.

What the shortcuts could get wrong, and is checked here:

- finished renders are reused (``registry/mcp/render_cache.py``): an edit, a rollback, an embedded
  resource's edit and refused arguments must all be answered as without the cache;
- list items are encoded once per entry version and spliced into answers: the answer is the same
  JSON, whatever the request id (and an integer only the standard library can write still encodes);
- repeated completion history updates are skipped only when they change nothing;
- quick requests answer without a task of their own, but a read that waits on the network can
  still be cancelled;
- keeping a request's completion history cannot change its answer;
- the request-duration histogram (no longer prometheus_client's) counts as a histogram must.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from functools import partial
from typing import Any

import httpx
import pytest

from registry.catalog.rendering import PromptRenderer
from registry.catalog.specs import PromptSpec
from registry.limits import DEFAULT_LIMITS, Limits
from registry.mcp.completions import CompletionHistory
from registry.mcp.protocol import dumps
from registry.mcp.render_cache import RenderCache
from registry.mcp.sessions import Session
from registry.metrics import LoopHistogram
from tests.conftest import LiveServer
from tests.factories import prompt_body
from tests.interop.mcp_wire import StreamableHttpClient, open_session
from tests.waiting import wait_until
from tests.webhooks.conftest import WebhookServer

_prompt = partial(prompt_body, arguments=({"name": "topic", "required": True}, "tone"))


def _text(client: StreamableHttpClient, name: str, arguments: dict[str, Any]) -> str:
    answer = client.request("prompts/get", {"name": name, "arguments": arguments})
    assert "result" in answer, answer
    return str(answer["result"]["messages"][0]["content"]["text"])


def test_each_edit_and_rollback_is_served_through_repeated_identical_requests(
    live_server: LiveServer, api: httpx.Client
) -> None:
    assert api.post("/api/v1/prompts", json=_prompt("brief", "v1 about {{ topic }}")).status_code == 201
    client = open_session(live_server.url)
    for _ in range(3):
        assert _text(client, "brief", {"topic": "caching"}) == "v1 about caching"
    assert api.put("/api/v1/prompts/brief", json=_prompt("brief", "v2 about {{ topic }}")).status_code == 200
    assert _text(client, "brief", {"topic": "caching"}) == "v2 about caching"  # the very next request
    assert _text(client, "brief", {"topic": "queues"}) == "v2 about queues"
    rollback = api.put("/api/v1/prompts/brief/labels/production", json={"version": 1})
    assert rollback.status_code == 200, rollback.text
    assert _text(client, "brief", {"topic": "caching"}) == "v1 about caching"
    # Argument order is part of nothing but the cache key: the same text either way.
    assert _text(client, "brief", {"tone": "dry", "topic": "caching"}) == _text(
        client, "brief", {"topic": "caching", "tone": "dry"}
    )


def test_a_failure_keeping_completion_history_changes_no_answer(
    live_server: LiveServer, api: httpx.Client, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Remembering a prompts/get's values for completion cannot change its answer: when it fails,
    the prompt is served all the same and the failure is logged."""

    def broken(*args: Any) -> None:
        raise RuntimeError("history broken")

    assert api.post("/api/v1/prompts", json=_prompt("brief", "About {{ topic }}")).status_code == 201
    monkeypatch.setattr(live_server.app.mcp.server.completions, "remember_all", broken)
    client = open_session(live_server.url)
    with caplog.at_level(logging.ERROR, logger="registry"):
        assert _text(client, "brief", {"topic": "x"}) == "About x"
    assert "keeping the completion history failed" in caplog.text and "history broken" in caplog.text, caplog.text


def test_a_prompt_embedding_a_resource_serves_the_resource_edit(live_server: LiveServer, api: httpx.Client) -> None:
    resource = {"name": "policy", "uri": "docs://policy", "mimeType": "text/plain", "text": "policy one"}
    assert api.post("/api/v1/resources", json=resource).status_code == 201
    prompt = {
        "name": "with-policy",
        "arguments": [{"name": "topic", "required": True}],
        "messages": [
            {"role": "user", "content": {"type": "text", "text": "About {{ topic }}"}},
            {"role": "user", "content": {"type": "resource", "uri": "docs://policy"}},
        ],
    }
    created = api.post("/api/v1/prompts", json=prompt)
    assert created.status_code == 201, created.text
    client = open_session(live_server.url)

    def embedded() -> str:
        answer = client.request("prompts/get", {"name": "with-policy", "arguments": {"topic": "x"}})
        return str(answer["result"]["messages"][1]["content"]["resource"]["text"])

    assert embedded() == embedded() == "policy one"
    assert api.put("/api/v1/resources/policy", json={**resource, "text": "policy two"}).status_code == 200
    assert embedded() == "policy two"  # the prompt did not change; what it embeds did


def test_refused_arguments_are_refused_every_time(live_server: LiveServer, api: httpx.Client) -> None:
    assert api.post("/api/v1/prompts", json=_prompt("brief", "about {{ topic }}")).status_code == 201
    client = open_session(live_server.url)
    assert _text(client, "brief", {"topic": "ok"}) == "about ok"
    for _ in range(2):
        undeclared = client.request("prompts/get", {"name": "brief", "arguments": {"topic": "ok", "extra": "x"}})
        assert undeclared["error"]["code"] == -32602 and "extra" in undeclared["error"]["message"]
        missing = client.request("prompts/get", {"name": "brief", "arguments": {}})
        assert missing["error"]["code"] == -32602 and "topic" in missing["error"]["message"]
        not_text = client.request("prompts/get", {"name": "brief", "arguments": {"topic": ["a", "b"]}})
        assert not_text["error"]["code"] == -32602


def test_list_answers_are_the_same_json_and_carry_any_request_id(live_server: LiveServer, api: httpx.Client) -> None:
    for name in ("alpha", "beta"):
        assert api.post("/api/v1/prompts", json=_prompt(name, f"{name} {{{{ topic }}}}")).status_code == 201
    client = open_session(live_server.url)
    listed = client.request("prompts/list", {})["result"]["prompts"]
    assert [p["name"] for p in listed] == ["alpha", "beta"]
    assert [a["name"] for a in listed[0]["arguments"]] == ["topic", "tone"]
    for request_id in (2**63 - 1, "a string id"):  # the id is spliced around the encoded items
        response = client.post({"jsonrpc": "2.0", "id": request_id, "method": "prompts/list", "params": {}})
        assert response.status_code == 200
        answer = json.loads(response.text)
        assert answer["id"] == request_id
        assert answer["result"]["prompts"] == listed


def test_encoding_an_answer_with_fragments_and_a_huge_id() -> None:
    """Integers beyond 64 bits are written by the standard library; list items are fragments only
    orjson can write: both in one answer still encode."""
    import orjson

    message = {"jsonrpc": "2.0", "id": 2**70, "result": {"tools": [orjson.Fragment(b'{"name":"t"}')]}}
    assert json.loads(dumps(message)) == {"jsonrpc": "2.0", "id": 2**70, "result": {"tools": [{"name": "t"}]}}


def test_a_slow_http_resource_read_can_still_be_cancelled(hooked: LiveServer, webhook_server: WebhookServer) -> None:
    resource = {
        "name": "slow-feed",
        "uri": "feed://slow",
        "kind": "http",
        "mimeType": "application/json",
        "url": webhook_server.url("/slow?s=20"),
    }
    static = {"name": "fixed", "uri": "docs://fixed", "mimeType": "text/plain", "text": "fixed text"}
    with hooked.client() as admin:
        assert admin.post("/api/v1/resources", json=resource).status_code == 201
        assert admin.post("/api/v1/resources", json=static).status_code == 201
    client = open_session(hooked.url)
    read: dict[str, Any] = {}

    def run_read() -> None:
        started = time.monotonic()
        read["response"] = client.post(
            {"jsonrpc": "2.0", "id": 42, "method": "resources/read", "params": {"uri": "feed://slow"}}
        )
        read["seconds"] = time.monotonic() - started

    asked = webhook_server.state.hits["/slow"]
    thread = threading.Thread(target=run_read)
    thread.start()
    wait_until(lambda: webhook_server.state.hits["/slow"] > asked, "the read to reach the slow upstream")
    # Meanwhile a static read answers at once (inline, no task).
    assert client.request("resources/read", {"uri": "docs://fixed"})["result"]["contents"][0]["text"] == "fixed text"
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 42, "reason": "user"}}
    assert client.post(cancel).status_code == 202
    thread.join(timeout=30)
    assert read["seconds"] < 15, "the read waited for the slow upstream instead of being cancelled"
    answer = read["response"].json()
    assert answer["id"] == 42 and "error" in answer and "cancel" in answer["error"]["message"]


# ---------------------------------------------------------------------------- units
def _renderer(text: str) -> PromptRenderer:
    return PromptRenderer(PromptSpec.model_validate(_prompt("p", text)))


def test_render_cache_is_bounded_by_bytes_and_keys_only_text_arguments() -> None:
    cache = RenderCache(max_bytes=10_000)
    renderer = _renderer("x" * 1000 + " {{ topic }}")
    assert cache.key(renderer, {"topic": ["a"]}) is None  # not text: the renderer decides every time
    for i in range(50):
        key = cache.key(renderer, {"topic": f"t{i}"})
        assert key is not None
        cache.put(key, renderer.render({"topic": f"t{i}"}))
    assert cache.size <= 10_000 and 0 < len(cache) < 50
    newest = cache.key(renderer, {"topic": "t49"})
    oldest = cache.key(renderer, {"topic": "t0"})
    assert newest is not None and oldest is not None
    assert cache.get(oldest) is None
    hit = cache.get(newest)
    assert hit is not None and hit["messages"][0]["content"]["text"].endswith(" t49")
    other = _renderer("x" * 1000 + " {{ topic }}")  # same text, another version: never shares
    other_key = cache.key(other, {"topic": "t49"})
    assert other_key is not None and cache.get(other_key) is None


@pytest.mark.parametrize("declared", [frozenset({"topic"}), {"topic"}], ids=["frozenset", "unhashable-set"])
def test_repeated_completion_values_keep_the_same_recall_order(declared: frozenset[str] | set[str]) -> None:
    """Repeated uses are worked out once (a prompt's declared names are a frozenset); declared
    names that cannot be hashed take the long way, with the same result."""
    history = CompletionHistory(DEFAULT_LIMITS)
    client = Session(label="production", principal="anonymous", id="s1")
    ref = ("ref/prompt", "brief")
    for values in (["one"], ["two"], ["one"], ["one"], ["three"], ["two"], ["two"]):
        history.remember_all(client, ref, {"topic": values[0], "undeclared": "x"}, declared)
    assert history.recall(client, ref, "topic") == ["two", "three", "one"]
    assert history.recall(client, ref, "undeclared") == []  # only declared arguments are kept
    other = Session(label="production", principal="anonymous", id="s2")
    assert history.recall(other, ref, "topic") == []  # still per caller


def test_a_caller_cycling_through_many_prompts_keeps_its_most_recent_uses_whole() -> None:
    limits = Limits(completion_values=5, completion_bytes=24_000, completion_callers=4)
    history = CompletionHistory(limits)
    client = Session(label="production", principal="anonymous", id="s1")
    declared = frozenset({"topic", "audience"})
    for i in range(300):  # ten prompts, each used thirty times with other values
        values = {"topic": f"topic-{i}", "audience": f"audience-{i % 7}", "undeclared": "x"}
        history.remember_all(client, ("ref/prompt", f"p{i % 10}"), values, declared)
        assert history.size() <= limits.completion_bytes
    newest = ("ref/prompt", "p9")
    topics = history.recall(client, newest, "topic")
    assert topics[:2] == ["topic-299", "topic-289"] and len(topics) < 30  # the newest, until bytes run out
    assert history.recall(client, newest, "audience")[:2] == ["audience-5", "audience-2"]
    assert history.recall(client, newest, "undeclared") == []
    for i in range(12):  # more distinct values than a completion offers: the newest five
        history.remember_all(client, newest, {"topic": f"again-{i}"}, declared)
    assert history.recall(client, newest, "topic") == [f"again-{i}" for i in range(11, 6, -1)]
    for i in range(60):  # sixty other prompts: the least recently used go, whole
        history.remember_all(client, ("ref/prompt", f"q{i}"), {"topic": "t", "audience": "a"}, declared)
    assert history.recall(client, newest, "topic") == history.recall(client, newest, "audience") == []
    assert history.recall(client, ("ref/prompt", "q59"), "audience") == ["a"]


def test_one_request_never_wipes_a_callers_history() -> None:
    limits = Limits(completion_values=20, completion_bytes=8_000, completion_callers=4)
    history = CompletionHistory(limits)
    client = Session(label="production", principal="anonymous", id="s1")
    history.remember_all(client, ("ref/prompt", "earlier"), {"topic": "kept"}, {"topic"})
    many = {f"a{i}": "v" * 200 + str(i) for i in range(19)}  # each within a value's share; all: more than the bytes
    history.remember_all(client, ("ref/prompt", "greedy"), many, set(many))
    assert history.size() <= limits.completion_bytes // 2 + 1_000
    assert history.recall(client, ("ref/prompt", "earlier"), "topic") == ["kept"]
    assert history.recall(client, ("ref/prompt", "greedy"), "a0") == [many["a0"]]  # the first values are kept
    assert history.recall(client, ("ref/prompt", "greedy"), "a18") == []  # past half the bytes: not kept


def test_a_remembered_use_depends_on_what_is_declared_and_the_memo_stays_bounded() -> None:
    """The same values under other declared names keep other values; values that are not text
    are never kept and never part of what is remembered about a use; long uses are not remembered
    at all, and the number remembered is bounded."""
    from registry.mcp import completions

    history = CompletionHistory(DEFAULT_LIMITS)
    client = Session(label="production", principal="anonymous", id="s1")
    ref = ("ref/prompt", "brief")
    values = {"topic": "t", "tone": "dry"}
    history.remember_all(client, ref, values, frozenset({"topic"}))
    history.remember_all(client, ref, values, frozenset({"tone"}))
    assert history.recall(client, ref, "topic") == ["t"] and history.recall(client, ref, "tone") == ["dry"]
    big = 10**4000  # an argument value that is a number: never remembered, never kept in the memo's keys
    history.remember_all(client, ("ref/prompt", "n"), {"topic": "t", "count": big}, frozenset({"topic", "count"}))
    assert all(big not in (value for _, value in key[1]) for key in history._uses)
    history.remember_all(client, ("ref/prompt", "long"), {"topic": "x" * 5000}, frozenset({"topic"}))
    assert not any(key[0] == ("ref/prompt", "long") for key in history._uses)
    for i in range(completions._USES_MEMO + 50):
        history.remember_all(client, ("ref/prompt", f"p{i}"), {"topic": "t"}, frozenset({"topic"}))
    assert len(history._uses) == completions._USES_MEMO


def test_header_names_are_decoded_once_within_bounds() -> None:
    """Header names are clients' text: the table of decoded ones keeps short names only, and only
    so many; every name is read right either way."""
    from registry.mcp import http_common

    long_name = b"x-" + b"n" * 100
    scope = {"headers": [(b"host", b"a"), (long_name, b"1"), (b"host", b"b")]}
    assert http_common.header_map(scope) == {"host": "b", long_name.decode(): "1"}  # the last repeated wins
    assert long_name not in http_common._HEADER_NAMES and b"host" in http_common._HEADER_NAMES
    for i in range(http_common._HEADER_NAMES_MAX + 10):
        assert http_common.header_map({"headers": [(b"x-h%d" % i, b"v")]}) == {f"x-h{i}": "v"}
    assert len(http_common._HEADER_NAMES) <= http_common._HEADER_NAMES_MAX


async def test_a_body_in_several_messages_is_bounded_and_a_disconnect_refused() -> None:
    from registry.mcp.http_common import HttpError, read_messages

    def receiving(*messages: dict[str, Any]) -> Any:
        pending = list(messages)

        async def receive() -> dict[str, Any]:
            return pending.pop(0)

        return receive

    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
    parts = [
        {"type": "http.request", "body": body[i : i + 7], "more_body": i + 7 < len(body)}
        for i in range(0, len(body), 7)
    ]
    assert await read_messages(receiving(*parts), {}, DEFAULT_LIMITS) == (False, [json.loads(body)])
    small = Limits(body_bytes=20)
    with pytest.raises(HttpError) as too_large:
        await read_messages(receiving(*parts), {}, small)
    assert too_large.value.status == 413 and "REGISTRY_LIMIT_BODY_BYTES" in too_large.value.message
    with pytest.raises(HttpError) as lied:  # a Content-Length over the bound: refused before reading
        await read_messages(receiving(), {"content-length": "21"}, small)
    assert lied.value.status == 413
    with pytest.raises(HttpError) as gone:
        await read_messages(receiving(parts[0], {"type": "http.disconnect"}), {}, DEFAULT_LIMITS)
    assert gone.value.status == 400 and gone.value.message == "client disconnected"


@pytest.mark.parametrize("seconds, bucket", [(0.0005, "0.0005"), (0.0006, "0.001"), (99.0, "+Inf")])
def test_request_histogram_counts_values_in_the_first_bucket_that_holds_them(seconds: float, bucket: str) -> None:
    histogram = LoopHistogram("h", "test", "method", (0.0005, 0.001, 1.0))
    histogram.observe("m", seconds)
    (family,) = list(histogram.collect())
    counts = {s.labels["le"]: s.value for s in family.samples if s.name == "h_bucket"}
    bounds = ["0.0005", "0.001", "1.0", "+Inf"]
    assert [counts[b] for b in bounds] == [1.0 if bounds.index(b) >= bounds.index(bucket) else 0.0 for b in bounds]
    total = {s.name: s.value for s in family.samples if s.name in ("h_count", "h_sum")}
    assert total == {"h_count": 1.0, "h_sum": seconds}
