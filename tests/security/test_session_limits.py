"""Per-session state is bounded (issue 7, item 7).

Against a real ``mcp-registry serve``: a 4 MB ``clientInfo`` or ``capabilities`` in ``initialize``
used to land in the session's database row; ``resources/subscribe`` took any number of URIs of
any length and rewrote the whole list on every call. Now each is refused with a -32602 naming
its limit, and re-subscribing to a URI already held writes nothing.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx

from registry.config import Settings
from registry.limits import Limits
from registry.mcp.protocol import Message
from registry.mcp.server import McpServer, RequestContext
from registry.mcp.sessions import ClientState
from registry.runtime import Registry
from tests.http import TLS
from tests.interop.mcp_wire import StreamableHttpClient
from tests.security.conftest import MiB, ResponsivenessProbe, ask_healthz
from tests.serve_process import ServerProcess


def database_bytes(data_dir: Path) -> int:
    return sum(p.stat().st_size for p in data_dir.glob("registry.db*"))


def initialize_message(**params: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "attacker", "version": "1"},
    }
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {**base, **params}}


def test_huge_client_info_and_capabilities_are_refused(server: ServerProcess) -> None:
    limit = Limits().session_metadata_bytes
    blob = "x" * 3_900_000  # under the 4 MiB body cap: initialize itself has to refuse it
    attacks = [
        initialize_message(clientInfo={"name": "attacker", "version": "1", "padding": blob}),
        initialize_message(capabilities={"experimental": {"padding": blob}}),
    ]
    with httpx.Client(base_url=server.url, timeout=30, verify=TLS) as http:
        StreamableHttpClient(http).initialize()  # warm up: the first session's row and caches
        db_before, rss_before = database_bytes(server.data_dir), server.rss()
        with ResponsivenessProbe(ask_healthz, server) as probe:
            for _ in range(3):
                for attack in attacks:
                    response = http.post(
                        "/mcp",
                        content=json.dumps(attack),
                        headers={"Accept": "application/json, text/event-stream", "Content-Type": "application/json"},
                    )
                    assert "mcp-session-id" not in response.headers, "a session was created"
                    error = response.json()["error"]
                    assert error["code"] == -32602, error
                    assert "REGISTRY_LIMIT_SESSION_METADATA_BYTES" in error["message"], error["message"]
                    assert len(error["message"]) < 500
        probe.assert_responsive()
        # Metadata within the limit is still fine.
        ok = StreamableHttpClient(http).initialize(clientInfo={"name": "n", "version": "1", "pad": "y" * (limit // 2)})
        assert ok["result"]["protocolVersion"] == "2025-11-25"
    grown_db = database_bytes(server.data_dir) - db_before
    assert grown_db < 1 * MiB, f"the database grew by {grown_db / MiB:.1f} MiB, bound 1 MiB (nothing stored)"
    grown = server.rss() - rss_before
    assert grown < 64 * MiB, f"RSS grew by {grown / MiB:.1f} MiB, bound 64 MiB"


def test_subscription_flood_is_capped(server: ServerProcess) -> None:
    limits = Limits()
    with httpx.Client(base_url=server.url, timeout=30, verify=TLS) as http:
        client = StreamableHttpClient(http)
        client.initialize()
        rss_before = server.rss()
        refusals: list[str] = []
        with ResponsivenessProbe(ask_healthz, server) as probe:
            for i in range(limits.subscriptions + 20):
                answer = client.request("resources/subscribe", {"uri": f"sprint://team-{i:05d}/current"}, i + 1)
                if "error" in answer:
                    refusals.append(answer["error"]["message"])
                    assert answer["error"]["code"] == -32602
            long_uri = "sprint://" + "a" * (limits.uri_chars + 1) + "/current"
            too_long = client.request("resources/subscribe", {"uri": long_uri}, 10_000)
        probe.assert_responsive()
        assert len(refusals) == 20, f"{len(refusals)} refusals; the cap is {limits.subscriptions}"
        assert all("REGISTRY_LIMIT_SUBSCRIPTIONS" in m for m in refusals), refusals[0]
        assert "REGISTRY_LIMIT_URI_CHARS" in too_long["error"]["message"], too_long
        assert long_uri not in too_long["error"]["message"], "the refusal echoes the URI"
        # Re-subscribing to a URI held is fine; unsubscribing frees a slot.
        assert "result" in client.request("resources/subscribe", {"uri": "sprint://team-00000/current"})
        assert "result" in client.request("resources/unsubscribe", {"uri": "sprint://team-00000/current"})
        assert "result" in client.request("resources/subscribe", {"uri": "sprint://another/current"})
    grown = server.rss() - rss_before
    assert grown < 32 * MiB, f"RSS grew by {grown / MiB:.1f} MiB, bound 32 MiB"


def test_resubscribing_writes_nothing(tmp_path: Path) -> None:
    """Each write rewrites the whole list, so one that changes nothing is skipped."""
    registry = Registry(Settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'r.db'}", secret_key="k"))
    server = McpServer(registry.catalog, limits=Limits(subscriptions=3))
    writes: list[list[str]] = []

    async def record(client: ClientState) -> None:
        writes.append(sorted(client.subscriptions))

    server.on_state_change = record
    client = ClientState(label="production", principal="anonymous", protocol_version="2025-11-25")

    async def call(method: str, uri: str) -> dict[str, Any]:
        message = Message(raw={}, method=method, id=1, params={"uri": uri})
        return await server.handle_request(message, RequestContext(client=client))

    async def scenario() -> None:
        for _ in range(5):
            assert "result" in await call("resources/subscribe", "a://1")
        assert "result" in await call("resources/unsubscribe", "a://2")  # not held: nothing to write
        assert "result" in await call("resources/unsubscribe", "a://1")

    try:
        asyncio.run(scenario())
    finally:
        registry.close()
    assert writes == [["a://1"], []]
