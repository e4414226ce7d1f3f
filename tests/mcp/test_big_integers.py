"""Integers beyond 64 bits in a stored definition are served exactly as they were saved.

orjson (the fast parser and encoder on these paths) rounds such integers to floats when parsing and
refuses them when encoding; a schema's ``maximum`` or ``const`` must not change between the admin
API and an agent's ``tools/list``, and one such tool must not fail every agent's ``tools/list``."""

from __future__ import annotations

import httpx

from tests.conftest import LiveServer
from tests.interop.mcp_wire import open_session

BIG = 123456789012345678901234567890
TOOL = {
    "name": "ledger",
    "description": "Post to the ledger",
    "inputSchema": {
        "type": "object",
        "properties": {
            "account": {"type": "integer", "minimum": -(2**70), "maximum": BIG},
            "kind": {"const": 2**64},
        },
    },
    "webhook": {"url": "https://93.184.216.34/ledger"},  # a literal public address: no DNS lookup
}


def test_a_tool_schema_with_integers_beyond_64_bits_is_listed_exactly(
    live_server: LiveServer, api: httpx.Client
) -> None:
    created = api.post("/api/v1/tools", json=TOOL)
    assert created.status_code == 201, created.text
    assert api.get("/api/v1/tools/ledger").json()["spec"]["inputSchema"] == TOOL["inputSchema"]
    client = open_session(live_server.url)
    listed = client.request("tools/list")["result"]["tools"]
    (tool,) = [t for t in listed if t["name"] == "ledger"]
    assert tool["inputSchema"] == TOOL["inputSchema"]
    account = tool["inputSchema"]["properties"]["account"]
    assert type(account["maximum"]) is int and type(account["minimum"]) is int
