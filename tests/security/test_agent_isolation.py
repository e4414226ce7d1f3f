"""Nothing one agent sends reaches another; labels and tokens bound what an agent may read.

Attacks against a real ``mcp-registry serve`` (issue 7, item 1 and the tokens/labels bullet):
completion suggestions leaking one caller's prompt arguments to another caller (anonymous,
another token, another label), undeclared argument names growing memory for good, ``?label=``
picking unreleased versions, tokens that should have expired, and revoked tokens whose open
streams kept receiving notifications (on this replica and on another one).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from registry.cli import main
from registry.config import Settings
from registry.limits import Limits
from registry.mcp.completions import CompletionHistory
from registry.mcp.sessions import ClientState, Session
from registry.runtime import Registry
from tests.conftest import replica_pair, require_postgres
from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient, iter_sse
from tests.security.conftest import MiB, ResponsivenessProbe, ask_healthz
from tests.serve_process import ServerProcess

SECRET = "password=hunter2-" + secrets.token_hex(4)
TEMPLATE = "sprint://{team}/current"


# ---------------------------------------------------------------------------- helpers


def agent_token(server: ServerProcess, *, scopes: tuple[str, ...] = ("agent",), **fields: Any) -> tuple[str, int]:
    """A new token made through the admin API: (value, id)."""
    body = {"name": "agent-" + secrets.token_hex(3), "scopes": list(scopes), **fields}
    with server.admin() as admin:
        created = admin.post("/api/v1/tokens", json=body)
    assert created.status_code == 201, created.text
    return created.json()["token"], created.json()["id"]


def mcp_client(server: ServerProcess, token: str | None = None, label: str | None = None) -> StreamableHttpClient:
    http = server.client(token)
    return StreamableHttpClient(http, path=f"/mcp?label={label}" if label else "/mcp")


def connect(server: ServerProcess, token: str | None = None, label: str | None = None) -> StreamableHttpClient:
    client = mcp_client(server, token, label)
    client.initialize("2025-11-25")
    return client


def complete_prompt(client: StreamableHttpClient, prefix: str, prompt: str = "summarize") -> list[str]:
    answer = client.request(
        "completion/complete",
        {"ref": {"type": "ref/prompt", "name": prompt}, "argument": {"name": "text", "value": prefix}},
    )
    assert "result" in answer, answer
    values: list[str] = answer["result"]["completion"]["values"]
    return values


def complete_team(client: StreamableHttpClient, prefix: str) -> list[str]:
    answer = client.request(
        "completion/complete",
        {"ref": {"type": "ref/resource", "uri": TEMPLATE}, "argument": {"name": "team", "value": prefix}},
    )
    assert "result" in answer, answer
    values: list[str] = answer["result"]["completion"]["values"]
    return values


def summarize(client: StreamableHttpClient, text: str) -> None:
    answer = client.request("prompts/get", {"name": "summarize", "arguments": {"text": text}})
    assert "result" in answer, answer


class GetStream:
    """A GET /mcp (or /sse) stream held open in a thread; notes when the server ends it."""

    def __init__(self, base_url: str, path: str, headers: dict[str, str]) -> None:
        self.first_event = threading.Event()
        self.ended = threading.Event()
        self.ended_at: float | None = None
        self.status: int | None = None
        self._client = httpx.Client(base_url=base_url, timeout=httpx.Timeout(10, read=60), verify=TLS)
        self._thread = threading.Thread(target=self._run, args=(path, headers), daemon=True)
        self._thread.start()

    def _run(self, path: str, headers: dict[str, str]) -> None:
        try:
            with self._client.stream("GET", path, headers=headers) as response:
                self.status = response.status_code
                for _event in iter_sse(response.iter_lines()):
                    self.first_event.set()
        except (httpx.HTTPError, RuntimeError):
            pass
        finally:
            self.ended_at = time.monotonic()
            self.ended.set()

    def close(self) -> None:
        self._client.close()
        self._thread.join(timeout=0.2)


def open_get_stream(base_url: str, token: str, session: StreamableHttpClient) -> GetStream:
    assert session.session_id is not None
    stream = GetStream(
        base_url,
        "/mcp",
        {
            "Accept": "text/event-stream",
            "Authorization": f"Bearer {token}",
            "Mcp-Session-Id": session.session_id,
            "MCP-Protocol-Version": "2025-11-25",
        },
    )
    assert stream.first_event.wait(10), "the GET stream sent no priming event"
    assert stream.status == 200
    return stream


def open_legacy_stream(base_url: str, token: str) -> GetStream:
    stream = GetStream(base_url, "/sse", {"Accept": "text/event-stream", "Authorization": f"Bearer {token}"})
    assert stream.first_event.wait(10), "the /sse stream sent no endpoint event"
    assert stream.status == 200
    return stream


# ---------------------------------------------------------------------------- item 1: completion leak


def test_prompt_arguments_do_not_leak_across_agents_or_labels(server: ServerProcess) -> None:
    victim_token, _ = agent_token(server)
    other_token, _ = agent_token(server)
    with server.admin() as admin:  # both entries also under staging, so "another label" has them
        for path in ("/api/v1/prompts/summarize", "/api/v1/resources/sprint-status"):
            moved = admin.put(f"{path}/labels/staging", json={"version": 1})
            assert moved.status_code == 200, moved.text
    rss_before = server.rss()
    with ResponsivenessProbe(ask_healthz, server) as probe:
        victim = connect(server, victim_token)
        summarize(victim, SECRET)
        read = victim.request("resources/read", {"uri": "sprint://secret-team-x/current"})
        assert "result" in read, read

        anonymous = connect(server)
        other_agent = connect(server, other_token)
        victim_on_staging = connect(server, victim_token, label="staging")
        for caller in (anonymous, other_agent, victim_on_staging):
            assert complete_prompt(caller, "pass") == []
            assert complete_prompt(caller, "") == []
            assert "secret-team-x" not in complete_team(caller, "")

        # The same principal (another session of the same token, same label) keeps its own history.
        victim_again = connect(server, victim_token)
        assert complete_prompt(victim_again, "pass") == [SECRET]
        assert complete_team(victim_again, "secret") == ["secret-team-x"]
        # ... and the anonymous caller's history is its own session's only.
        summarize(anonymous, "anonymous-value")
        assert complete_prompt(anonymous, "anon") == ["anonymous-value"]
        assert complete_prompt(connect(server), "anon") == []
        assert complete_prompt(victim_again, "anon") == []
        probe.wait_for_more()
    probe.assert_responsive()
    grown = server.rss() - rss_before
    assert grown < 32 * MiB, f"RSS grew by {grown / MiB:.1f} MiB, bound 32 MiB"


def test_undeclared_argument_flood_is_refused_and_memory_stays_bounded(server: ServerProcess) -> None:
    client = connect(server)
    names = {f"extra_argument_{i:06d}": "x" for i in range(80_000)}
    rss_before = server.rss()
    with ResponsivenessProbe(ask_healthz, server) as probe:
        for _ in range(6):
            answer = client.request("prompts/get", {"name": "summarize", "arguments": {"text": "t", **names}})
            assert "error" in answer, "undeclared arguments were accepted"
            assert answer["error"]["code"] == -32602, answer["error"]
            message = answer["error"]["message"]
            assert "no argument(s) named" in message or "REGISTRY_LIMIT_" in message, message
            assert len(message) < 1000, "the refusal echoes the flood back"
    # Each flood is ~2 MB of JSON, parsed on a worker thread that still holds the GIL for ~30 ms
    # (orjson does not release it): probes that land then wait that long; an event loop blocked
    # per request, as before the bounds, shows as seconds.
    probe.assert_responsive()
    grown = server.rss() - rss_before
    assert grown < 64 * MiB, f"RSS grew by {grown / MiB:.1f} MiB, bound 64 MiB"
    # Declared arguments are still remembered, and nothing of the flood is offered.
    summarize(client, "declared-value")
    assert complete_prompt(client, "") == ["declared-value"]


def test_completion_history_of_one_caller_is_bounded(server: ServerProcess) -> None:
    limits = Limits()
    client = connect(server)
    rss_before = server.rss()
    with ResponsivenessProbe(ask_healthz, server) as probe:
        for i in range(120):
            summarize(client, f"value-{i:04d}-" + "y" * 150)
    probe.assert_responsive()
    values = complete_prompt(client, "value-")
    assert len(values) <= limits.completion_values, f"{len(values)} values kept, limit {limits.completion_values}"
    assert values[0].startswith("value-0119-"), "the most recent value comes first"
    grown = server.rss() - rss_before
    assert grown < 32 * MiB, f"RSS grew by {grown / MiB:.1f} MiB, bound 32 MiB"


def test_completion_history_bounds_bytes_and_callers() -> None:
    """The in-process bounds behind the test above: bytes per caller, and callers kept (LRU)."""
    limits = Limits(completion_values=30, completion_bytes=6_000, completion_callers=8)
    history = CompletionHistory(limits)
    ref = ("ref/prompt", "summarize")
    clients = [Session(label="production", principal="anonymous", id=f"s{i}") for i in range(50)]
    for client in clients:
        for j in range(500):
            argument = ("text", "max_words")[j % 2]
            history.remember(client, ref, argument, f"{client.id}-{j:04d}-" + "z" * 20)
    assert history.callers == 8
    assert history.size() <= 8 * limits.completion_bytes
    newest = clients[-1]
    texts, words = history.recall(newest, ref, "text"), history.recall(newest, ref, "max_words")
    assert 0 < len(texts) + len(words) < 60, "the byte bound did not hold (30 values per argument fit otherwise)"
    assert words[0].startswith(f"{newest.id}-0499-") and texts[0].startswith(f"{newest.id}-0498-")
    assert history.recall(clients[0], ref, "text") == []  # evicted: least recently active
    history.remember(newest, ref, "text", "q" * 10_000)  # longer than a value may be: not kept
    assert "q" * 10_000 not in history.recall(newest, ref, "text")
    # Tokens share history across sessions, never across labels; stdio clients are their own callers.
    a = ClientState(label="production", principal="ci", token_id=7)
    b = ClientState(label="production", principal="ci", token_id=7)
    c = ClientState(label="staging", principal="ci", token_id=7)
    history.remember(a, ref, "text", "shared")
    assert history.recall(b, ref, "text") == ["shared"]
    assert history.recall(c, ref, "text") == []
    assert history.recall(ClientState(label="production", principal="stdio"), ref, "text") == []


# ---------------------------------------------------------------------------- ?label= allowlist


def _initialize_status(server: ServerProcess, token: str | None, label: str) -> httpx.Response:
    client = mcp_client(server, token, label)
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    return client.post(body)


def test_agents_may_only_pick_allowed_labels(server: ServerProcess) -> None:
    labelless, _ = agent_token(server)
    pinned, _ = agent_token(server, label="dev")
    editor, _ = agent_token(server, scopes=("editor",))
    with ResponsivenessProbe(ask_healthz, server) as probe:
        for token in (None, labelless):
            refused = _initialize_status(server, token, "dev")
            assert refused.status_code == 403, refused.text
            message = refused.json()["error"]["message"]
            assert "REGISTRY_AGENT_LABELS" in message and "'dev'" in message, message
            assert _initialize_status(server, token, "staging").status_code == 200
            assert _initialize_status(server, token, "production").status_code == 200
            headers = {"Accept": "text/event-stream", **({"Authorization": f"Bearer {token}"} if token else {})}
            with server.client() as http:
                legacy = http.get("/sse?label=dev", headers=headers)
            assert legacy.status_code == 403 and "REGISTRY_AGENT_LABELS" in legacy.text, legacy.text
        # A token pinned to a label is served it; admin-API tokens may pick any label.
        assert _initialize_status(server, pinned, "production").status_code == 200
        assert _initialize_status(server, editor, "dev").status_code == 200
        assert _initialize_status(server, server.admin_token, "any-label").status_code == 200
        probe.wait_for_more()
    probe.assert_responsive()


# ---------------------------------------------------------------------------- token expiry


def test_expired_tokens_are_refused_everywhere(server: ServerProcess) -> None:
    expires = (datetime.now(UTC) + timedelta(seconds=2)).isoformat()
    agent, agent_id = agent_token(server, expires_at=expires)
    viewer, _ = agent_token(server, scopes=("viewer",), expires_at=expires)
    client = connect(server, agent)  # verified now: in the server's 5 s token cache from here
    with server.client(viewer) as api:
        assert api.get("/api/v1/changes").status_code == 200
    with ResponsivenessProbe(ask_healthz, server) as probe:
        time.sleep(2.5)
        answer = client.post({"jsonrpc": "2.0", "id": 5, "method": "ping"})
        assert answer.status_code == 401, answer.text
        assert "token expired" in answer.json()["error"]["message"]
        assert _initialize_status(server, agent, "production").status_code == 401
        with server.client(viewer) as api:
            refused = api.get("/api/v1/changes")
        assert refused.status_code == 401 and "token expired" in refused.json()["detail"], refused.text
    probe.assert_responsive()
    with server.admin() as admin:
        listed = {t["id"]: t for t in admin.get("/api/v1/tokens").json()["items"]}
        assert listed[agent_id]["expired"] is True and listed[agent_id]["expires_at"]
        # expires_in_days works; both at once, or an expiry in the past, are refused.
        in_days = admin.post("/api/v1/tokens", json={"name": "d", "scopes": ["agent"], "expires_in_days": 2})
        assert in_days.status_code == 201, in_days.text
        when = datetime.fromisoformat(in_days.json()["expires_at"])
        assert abs((when - datetime.now(UTC)) - timedelta(days=2)) < timedelta(minutes=1)
        both = {"name": "d", "scopes": ["agent"], "expires_in_days": 1, "expires_at": expires}
        assert admin.post("/api/v1/tokens", json=both).status_code == 422
        past = {"name": "d", "scopes": ["agent"], "expires_at": "2001-01-01T00:00:00Z"}
        assert admin.post("/api/v1/tokens", json=past).status_code == 422


def test_cli_token_create_expires_in_days(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    argv = ["token", "create", "--name", "ci", "--scope", "agent", "--expires-in-days", "3"]
    assert main(["db", "upgrade", "--database-url", url, "--data-dir", str(tmp_path)]) == 0  # token create needs one
    capsys.readouterr()
    assert main([*argv, "--database-url", url, "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr()
    assert "expires" in out.err
    registry = Registry(Settings(data_dir=tmp_path, database_url=url, secret_key="k"))
    try:
        (token,) = registry.tokens.list_tokens()
        when = datetime.fromisoformat(token["expires_at"])
        assert abs((when - datetime.now(UTC)) - timedelta(days=3)) < timedelta(minutes=1)
        principal = registry.tokens.authenticate(out.out.strip())
        assert principal is not None and principal.expires_at is not None
    finally:
        registry.close()
    with pytest.raises(SystemExit):  # argparse refuses a non-positive number of days
        main([*argv[:-1], "0", "--database-url", url])


# ---------------------------------------------------------------------------- revocation closes streams


def test_revoking_a_token_closes_its_streams_at_once(server: ServerProcess) -> None:
    token, token_id = agent_token(server)
    bystander_token, _ = agent_token(server)
    session = connect(server, token)
    bystander = connect(server, bystander_token)
    get_stream = open_get_stream(server.url, token, session)
    legacy = open_legacy_stream(server.url, token)
    bystander_stream = open_get_stream(server.url, bystander_token, bystander)
    rss_before = server.rss()
    try:
        with ResponsivenessProbe(ask_healthz, server) as probe:
            with server.admin() as admin:
                revoked_at = time.monotonic()
                assert admin.delete(f"/api/v1/tokens/{token_id}").status_code == 200
            assert get_stream.ended.wait(5), "the revoked token's GET stream stayed open"
            assert legacy.ended.wait(5), "the revoked token's /sse stream stayed open"
            assert get_stream.ended_at is not None and legacy.ended_at is not None
            took = max(get_stream.ended_at, legacy.ended_at) - revoked_at
            assert took < 2.0, f"streams closed {took:.2f}s after the revocation (expected well under a second)"
            refused = session.post({"jsonrpc": "2.0", "id": 9, "method": "ping"})
            assert refused.status_code == 401, refused.text
            probe.wait_for_more()
        probe.assert_responsive()
        assert not bystander_stream.ended.is_set(), "another token's stream was closed too"
        assert "result" in bystander.request("ping")
    finally:
        for stream in (get_stream, legacy, bystander_stream):
            stream.close()
    grown = server.rss() - rss_before
    assert grown < 32 * MiB, f"RSS grew by {grown / MiB:.1f} MiB, bound 32 MiB"


@pytest.fixture
def two_replicas(tmp_path: Path, postgres_server_url: str | None) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    with replica_pair(require_postgres(postgres_server_url), tmp_path) as pair:
        yield pair


def test_revoking_through_one_replica_closes_streams_on_another(
    two_replicas: tuple[ServerProcess, ServerProcess],
) -> None:
    a, b = two_replicas
    token, token_id = agent_token(a)
    session = connect(b, token)  # verified on b: in b's token cache for 5 s
    stream = open_get_stream(b.url, token, session)
    rss_before = b.rss()
    try:
        with ResponsivenessProbe(ask_healthz, b) as probe:
            with a.admin() as admin:
                revoked_at = time.monotonic()
                assert admin.delete(f"/api/v1/tokens/{token_id}").status_code == 200
            assert stream.ended.wait(5), "replica b kept the revoked token's stream open"
            assert stream.ended_at is not None
            took = stream.ended_at - revoked_at
            assert took < 2.0, f"b closed the stream {took:.2f}s after the revocation on a"
            # b refuses the token at once, although it verified it less than 5 s ago.
            refused = session.post({"jsonrpc": "2.0", "id": 9, "method": "ping"})
            assert refused.status_code == 401, refused.text
            probe.wait_for_more()
        probe.assert_responsive()
    finally:
        stream.close()
    grown = b.rss() - rss_before
    assert grown < 32 * MiB, f"RSS grew by {grown / MiB:.1f} MiB, bound 32 MiB"
