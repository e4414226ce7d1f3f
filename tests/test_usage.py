"""Usage counts end to end: agents' prompts/get, resources/read and tools/call over MCP against a
real server process (each database), added up per version and agent by the admin API; written on
SIGTERM; not counted at all when switched off; hidden from callers who cannot see the entry. And
the counter itself on a real database: a batch that cannot be written is kept, and what one
process holds is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from registry.catalog.usage import UsageCounter, hour_number
from registry.db.engine import Database, normalize_database_url
from registry.db.migrate import upgrade
from tests.conftest import _drop_postgres_schema, _fresh_postgres_schema, require_postgres
from tests.factories import prompt_body, tool_body
from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient
from tests.serve_process import ServerProcess, issue_token
from tests.ui.conftest import sign_in
from tests.waiting import wait_until
from tests.webhooks.conftest import WebhookServer, webhook_server

__all__ = ["webhook_server"]

#: Counts reach the database this often in the shared server (seconds).
FLUSH_S = "0.2"
WAIT_S = 20.0


def _resource(text_: str) -> dict[str, Any]:
    return {"name": "usage-res", "uri": "res://usage/doc", "mimeType": "text/plain", "text": text_}


def _counted_tool(name: str, url: str, note: str) -> dict[str, Any]:
    return tool_body(name, url, required=["text"], description=f"counted tool ({note})")


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, postgres_server_url: str | None
) -> Iterator[ServerProcess]:
    """One server per database for the module, flushing usage every 0.2 s."""
    url = schema = None
    if request.param == "postgresql":
        server_url = require_postgres(postgres_server_url)
        url, schema = _fresh_postgres_schema(server_url)
    env = {"REGISTRY_USAGE_FLUSH_S": FLUSH_S, "REGISTRY_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8"}
    try:
        with ServerProcess(tmp_path_factory.mktemp("usage"), database_url=url, env=env, name="usage") as server:
            yield server
    finally:
        if schema is not None:
            assert postgres_server_url is not None
            _drop_postgres_schema(postgres_server_url, schema)


def _token(admin: httpx.Client, name: str, scopes: list[str], **extra: Any) -> tuple[int, str]:
    made = issue_token(admin, name, scopes, **extra)
    return made["id"], made["token"]


def _mcp(server: ServerProcess, token: str) -> StreamableHttpClient:
    http = httpx.Client(base_url=server.url, timeout=30, headers={"Authorization": f"Bearer {token}"}, verify=TLS)
    client = StreamableHttpClient(http)
    client.initialize("2025-11-25")
    return client


def _get(client: StreamableHttpClient, name: str = "usage-prompt") -> dict[str, Any]:
    return client.request("prompts/get", {"name": name})


def _read(client: StreamableHttpClient) -> dict[str, Any]:
    return client.request("resources/read", {"uri": "res://usage/doc"})


def _call(client: StreamableHttpClient, name: str = "usage-tool", arguments: Any = None) -> dict[str, Any]:
    return client.request("tools/call", {"name": name, "arguments": arguments or {"text": "hi"}})


def _counts(admin: httpx.Client, **params: Any) -> dict[tuple[Any, ...], int]:
    answer = admin.get("/api/v1/usage", params={"group": "version_agent", "limit": 1000, **params})
    assert answer.status_code == 200, answer.text
    return {(r["kind"], r["name"], r["version"], r["agent"], r["method"]): r["uses"] for r in answer.json()["items"]}


def _wait_for(admin: httpx.Client, expected: dict[tuple[Any, ...], int], **params: Any) -> dict[tuple[Any, ...], int]:
    """The counts once they add up to ``expected`` (flushes come every 0.2 s), else the last seen."""
    seen = [_counts(admin, **params)]

    def added_up() -> bool:
        seen[0] = _counts(admin, **params)
        return seen[0] == expected

    with contextlib.suppress(AssertionError):  # the caller compares, and says what it saw
        wait_until(added_up, "the counts", timeout=WAIT_S, interval=0.1)
    return seen[0]


def test_uses_are_counted_per_version_agent_and_method(served: ServerProcess, webhook_server: WebhookServer) -> None:
    with served.admin() as admin:
        for kind, body in (
            ("prompts", prompt_body("usage-prompt", "Hello from v1", arguments=(), description="counted")),
            ("resources", _resource("v1")),
            ("tools", _counted_tool("usage-tool", webhook_server.url("/call-tool-result"), "v1")),
            ("tools", _counted_tool("usage-err", webhook_server.url("/call-tool-error"), "always isError")),
        ):
            assert admin.post(f"/api/v1/{kind}", json=body).status_code == 201
        a_id, a_token = _token(admin, "usage-agent-a", ["agent"])
        b_id, b_token = _token(admin, "usage-agent-b", ["agent"])
        a, b = _mcp(served, a_token), _mcp(served, b_token)

        # Version 1 in production.
        for _ in range(3):
            assert "result" in _get(a)
        for _ in range(2):
            assert "result" in _read(a)
            assert _call(a)["result"]["isError"] is False
        assert "result" in _get(b) and "result" in _read(b) and "result" in _call(b)
        # Not uses: an unknown prompt, a tool call refused for its arguments (never sent).
        assert "error" in _get(b, "no-such-prompt")
        assert _call(b, arguments={"text": 5})["result"]["isError"] is True
        # A use: the webhook answered, with an error result.
        assert _call(b, "usage-err")["result"]["isError"] is True

        # Version 2, then production moved to it.
        for kind, body in (
            ("prompts", prompt_body("usage-prompt", "Hello from v2", arguments=(), description="counted")),
            ("resources", _resource("v2")),
            ("tools", _counted_tool("usage-tool", webhook_server.url("/call-tool-result"), "v2")),
        ):
            saved = admin.put(f"/api/v1/{kind}/{body['name']}", json={**body, "labels": []})
            assert saved.status_code == 200, saved.text
            assert saved.json()["version"] == 2
            moved = admin.put(f"/api/v1/{kind}/{body['name']}/labels/production", json={"version": 2})
            assert moved.status_code == 200, moved.text
        assert _get(a)["result"]["messages"][0]["content"]["text"] == "Hello from v2"
        for _ in range(2):
            assert "result" in _get(b)
        assert "result" in _read(b)
        assert "result" in _call(b)

        agent_a, agent_b = f"token:{a_id}", f"token:{b_id}"
        expected = {
            ("prompt", "usage-prompt", 1, agent_a, "get"): 3,
            ("prompt", "usage-prompt", 1, agent_b, "get"): 1,
            ("prompt", "usage-prompt", 2, agent_a, "get"): 1,
            ("prompt", "usage-prompt", 2, agent_b, "get"): 2,
            ("resource", "usage-res", 1, agent_a, "read"): 2,
            ("resource", "usage-res", 1, agent_b, "read"): 1,
            ("resource", "usage-res", 2, agent_b, "read"): 1,
            ("tool", "usage-tool", 1, agent_a, "call"): 2,
            ("tool", "usage-tool", 1, agent_b, "call"): 1,
            ("tool", "usage-tool", 2, agent_b, "call"): 1,
            ("tool", "usage-err", 1, agent_b, "call"): 1,
        }
        assert _wait_for(admin, expected) == expected
        time.sleep(0.6)  # three more flushes: nothing is added twice
        assert _counts(admin) == expected

        # Filters and other groupings add up the same rows.
        assert _counts(admin, agent=agent_b, method="read") == {
            k: v for k, v in expected.items() if k[3] == agent_b and k[4] == "read"
        }
        by_agent = admin.get("/api/v1/usage", params={"group": "agent"}).json()["items"]
        assert {(r["agent"], r["agent_name"], r["uses"]) for r in by_agent} == {
            (agent_a, "usage-agent-a", 8),
            (agent_b, "usage-agent-b", 8),
        }
        by_entry = admin.get("/api/v1/usage", params={"group": "entry", "kind": "prompt"}).json()["items"]
        assert [(r["name"], r["uses"], r["method"]) for r in by_entry] == [("usage-prompt", 7, "get")]
        hours = admin.get("/api/v1/usage", params={"group": "hour", "name": "usage-tool"}).json()["items"]
        assert sum(r["uses"] for r in hours) == 4
        assert hours[0]["hour"] is not None
        top = admin.get("/api/v1/usage", params={"group": "version", "limit": 1}).json()
        assert top["more"] is True and len(top["items"]) == 1
        assert (top["items"][0]["name"], top["items"][0]["version"], top["items"][0]["uses"]) == ("usage-prompt", 1, 4)
        future = admin.get("/api/v1/usage", params={"since": "2999-01-01T00:00:00Z"}).json()
        assert future["items"] == []

        # One entry, per version: who used it, and the labels on each version now.
        prompt = admin.get("/api/v1/prompts/usage-prompt/usage", params={"days": 7})
        assert prompt.status_code == 200, prompt.text
        versions = {v["version"]: v for v in prompt.json()["versions"]}
        assert set(versions) == {1, 2}
        assert "production" in versions[2]["labels"] and "production" not in versions[1]["labels"]
        assert versions[1]["uses"] == 4 and versions[1]["recent_uses"] == 4
        assert [(x["agent_name"], x["uses"]) for x in versions[1]["agents"]] == [
            ("usage-agent-a", 3),
            ("usage-agent-b", 1),
        ]
        assert [(x["agent"], x["uses"]) for x in versions[2]["agents"]] == [(agent_b, 2), (agent_a, 1)]
        assert versions[1]["last_used"] is not None
        assert admin.get("/api/v1/tools/usage-err/usage").json()["versions"][0]["uses"] == 1
        assert admin.get("/api/v1/prompts/no-such-prompt/usage").status_code == 404

        # The web UI shows the same: the overview and the entry's usage page.
    with httpx.Client(base_url=served.url, timeout=30, verify=TLS) as browser:
        assert sign_in(browser, served.admin_token).status_code == 303
        overview = browser.get("/ui/usage?window=7d")
        assert overview.status_code == 200, overview.text
        assert "usage-agent-a" in overview.text and "/ui/prompts/usage-prompt/usage" in overview.text
        page = browser.get("/ui/prompts/usage-prompt/usage")
        assert page.status_code == 200, page.text
        assert 'aria-current="page">Usage</a>' in page.text
        assert 'id="usage-v1"' in page.text and "usage-agent-b" in page.text


def test_a_team_entry_s_usage_is_shown_only_to_who_sees_it(served: ServerProcess) -> None:
    with served.admin() as admin:
        for team in ("usage-red", "usage-blue"):
            made = admin.post("/api/v1/teams", json={"name": team})
            assert made.status_code == 201, made.text
        body = {"name": "usage-red-secret", "template": "red only", "team": "usage-red"}
        assert admin.post("/api/v1/prompts", json=body).status_code == 201
        agent_id, agent = _token(admin, "usage-red-agent", ["agent"], teams={"usage-red": "viewer"})
        _red_id, red = _token(admin, "usage-red-viewer", ["viewer"], teams={"usage-red": "viewer"})
        _blue_id, blue = _token(admin, "usage-blue-viewer", ["viewer"], teams={"usage-blue": "viewer"})
        assert "result" in _get(_mcp(served, agent), "usage-red-secret")
        expected = {("prompt", "usage-red-secret", 1, f"token:{agent_id}", "get"): 1}
        assert _wait_for(admin, expected, name="usage-red-secret") == expected

    with served.client(red) as member, served.client(blue) as other:
        assert _counts(member, name="usage-red-secret") == expected
        assert member.get("/api/v1/prompts/usage-red-secret/usage").status_code == 200
        # Another team's viewer: nothing in the report, and the entry answers as if missing.
        assert _counts(other, name="usage-red-secret") == {}
        assert "usage-red-secret" not in other.get("/api/v1/usage", params={"group": "entry"}).text
        hidden = other.get("/api/v1/prompts/usage-red-secret/usage")
        missing = other.get("/api/v1/prompts/usage-nothing-here/usage")
        assert hidden.status_code == missing.status_code == 404
        assert hidden.json()["detail"] == "prompt 'usage-red-secret' does not exist"


def _usage_rows(database_url: str) -> list[tuple[Any, ...]]:
    engine = create_engine(normalize_database_url(database_url))
    try:
        with engine.connect() as conn:
            return [
                tuple(r)
                for r in conn.execute(text("SELECT kind, name, version, agent, method, count FROM usage_counts"))
            ]
    finally:
        engine.dispose()


def test_counts_are_written_on_sigterm(tmp_path: Path, database_url: str) -> None:
    """A flush interval of an hour: only the shutdown can have written them."""
    env = {"REGISTRY_USAGE_FLUSH_S": "3600"}
    with ServerProcess(tmp_path / "data", database_url=database_url, env=env, args=["--seed", "demo"]) as server:
        client = StreamableHttpClient(httpx.Client(base_url=server.url, timeout=30, verify=TLS))
        client.initialize("2025-11-25")
        for _ in range(5):
            assert "result" in client.request("prompts/get", {"name": "summarize", "arguments": {"text": "x"}})
        assert _usage_rows(database_url) == []
        server.stop()  # SIGTERM (uvicorn then ends by the same signal)
    assert _usage_rows(database_url) == [("prompt", "summarize", 1, "anonymous", "get", 5)]


def test_nothing_is_counted_when_usage_is_off(tmp_path: Path, database_url: str) -> None:
    env = {"REGISTRY_USAGE": "false", "REGISTRY_USAGE_FLUSH_S": "0.1"}
    with ServerProcess(tmp_path / "data", database_url=database_url, env=env, args=["--seed", "demo"]) as server:
        client = StreamableHttpClient(httpx.Client(base_url=server.url, timeout=30, verify=TLS))
        client.initialize("2025-11-25")
        for _ in range(3):
            assert "result" in client.request("prompts/get", {"name": "summarize", "arguments": {"text": "x"}})
        with server.admin() as admin:
            assert "registry_usage_pending_keys" not in admin.get("/metrics").text
        server.stop()
    assert _usage_rows(database_url) == []


# ------------------------------------------------------------------ the counter on its own


def test_a_batch_that_cannot_be_written_is_kept_and_pending_keys_are_bounded(tmp_path: Path) -> None:
    """The first flushes meet a database without the table (as good as down): nothing is lost;
    once it is there, everything is written exactly once. Keys past the bound are dropped."""
    db = Database(f"sqlite:///{tmp_path / 'usage.db'}")

    async def run() -> UsageCounter:
        counter = UsageCounter(db, flush_s=3600, max_pending_keys=3)
        counter.count("prompt", "a", 1, 7, None, "get")
        counter.count("prompt", "a", 1, 7, None, "get")
        counter.count("prompt", "b", 1, None, "alice", "get")
        assert await counter.flush() == 0 and counter.failures == 1  # no table yet
        counter.count("prompt", "a", 1, 7, None, "get")
        counter.count("tool", "t", 2, None, None, "call")
        counter.count("tool", "t", 3, None, None, "call")  # a fourth key: dropped
        counter.count("tool", "t", 2, None, None, "call")  # a known key: still counted
        assert counter.dropped == 1 and counter.pending_keys == 3
        await asyncio.to_thread(upgrade, db)
        assert await counter.flush() == 6
        assert await counter.flush() == 0  # nothing left
        return counter

    counter = asyncio.run(run())
    assert counter.written == 6 and counter.pending_keys == 0
    with db.session() as session:
        rows = session.execute(text("SELECT name, version, agent, count FROM usage_counts ORDER BY name")).all()
    assert [tuple(r) for r in rows] == [("a", 1, "token:7", 3), ("b", 1, "user:alice", 1), ("t", 2, "anonymous", 2)]
    db.dispose()


def test_the_hot_path_reads_the_hour_it_is_given() -> None:
    """Counting does not read the clock: the hour is kept by a timer (started with the flusher)."""
    counter = UsageCounter(Database("sqlite://"), flush_s=3600)
    assert counter.hour == hour_number()
    counter.hour = 42
    counter.count("prompt", "a", 1, None, None, "get")
    assert list(counter.pending()) == [(42, "prompt", "a", 1, None, None, "get")]
