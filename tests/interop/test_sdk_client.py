"""The official MCP Python SDK (``mcp``, pinned in the ``test`` extra) as the client.

``Client(url, mode="legacy")`` is the SDK's Streamable HTTP client doing the ``initialize``
handshake (it offers the newest handshake-era version, 2025-11-25) instead of probing for the
2026 stateless protocol first; ``mode="2026-07-28"`` speaks the stateless revision without a
probe, and the default ``mode="auto"`` probes ``server/discover`` and picks it. The SDK's stdio
and HTTP+SSE clients are exercised too, in both eras.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import PromptsListChanged
from mcp.types import PromptReference, ResourceTemplateReference, TextContent, TextResourceContents

from registry.catalog.values import WriteOptions
from registry.config import Settings
from registry.runtime import Registry
from tests.conftest import LiveServer
from tests.interop.mcp_wire import (
    ARTICLE_SUMMARIZE_LISTING,
    ARTICLE_TOOLS,
    SUMMARIZE_RENDERED,
    SUMMARIZE_TEXT,
    child_env,
    mcp_registry_command,
)

SDK_VERSION = "2.3.0"
MODERN = "2026-07-28"


def test_the_pinned_sdk_is_installed() -> None:
    from importlib.metadata import version

    assert version("mcp") == SDK_VERSION


async def article_walk(client: Client) -> None:
    """The article's steps 2-8 through the SDK's typed API."""
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert sorted(tools) == ["add", "echo"]
    for name, expected in ARTICLE_TOOLS.items():
        assert tools[name].description == expected["description"]
        assert tools[name].input_schema == expected["inputSchema"]

    echo = await client.call_tool("echo", {"message": "Hello from MCP client!"})
    assert echo.is_error is False
    assert echo.content == [TextContent(type="text", text="Echo: Hello from MCP client!")]
    add = await client.call_tool("add", {"a": 42, "b": 58})
    assert add.is_error is False
    assert add.content == [TextContent(type="text", text="42 + 58 = 100")]

    resources = {r.uri: r for r in (await client.list_resources()).resources}
    info = resources["info://server-info"]
    assert (info.name, info.title, info.mime_type) == ("server-info", "Server Information", "application/json")
    assert info.description == "Metadata about this MCP server: name, version, capabilities"
    read = await client.read_resource("info://server-info")
    (content,) = read.contents
    assert isinstance(content, TextResourceContents)
    assert content.uri == "info://server-info" and content.mime_type == "application/json"
    assert '"name": "mcp-registry"' in content.text
    templates = (await client.list_resource_templates()).resource_templates
    assert [t.uri_template for t in templates] == ["sprint://{team}/current"]

    prompts = {p.name: p for p in (await client.list_prompts()).prompts}
    assert set(prompts) == {"bug-analysis-report", "code-review", "incident-postmortem", "summarize"}
    summarize = prompts["summarize"]
    assert summarize.description == ARTICLE_SUMMARIZE_LISTING["description"]
    assert [(a.name, a.description, a.required) for a in summarize.arguments or []] == [
        (a["name"], a["description"], a["required"]) for a in ARTICLE_SUMMARIZE_LISTING["arguments"]
    ]
    rendered = await client.get_prompt("summarize", {"text": SUMMARIZE_TEXT, "max_words": "20"})
    (message,) = rendered.messages
    assert message.role == "user"
    assert message.content == TextContent(type="text", text=SUMMARIZE_RENDERED)


async def test_sdk_streamable_http_legacy_mode(server: LiveServer) -> None:
    async with Client(f"{server.url}/mcp", mode="legacy", read_timeout_seconds=30) as client:
        assert client.protocol_version == "2025-11-25"
        assert client.server_info is not None
        assert client.server_info.name == "mcp-registry"
        capabilities = client.server_capabilities
        assert capabilities.prompts is not None and capabilities.resources is not None
        assert capabilities.tools is not None and capabilities.completions is not None
        assert client.instructions and "registry" in client.instructions
        await article_walk(client)

        # Protocol errors come back as MCPError with the server's code; tool failures as results.
        with pytest.raises(MCPError) as missing:
            await client.get_prompt("summarize", {"max_words": "20"})
        assert missing.value.code == -32602
        assert "missing required argument(s): text" in missing.value.message
        with pytest.raises(MCPError) as unknown:
            await client.read_resource("info://nope")
        assert unknown.value.code == -32002
        failed = await client.call_tool("add", {"a": "x", "b": 1})
        assert failed.is_error is True
        assert isinstance(failed.content[0], TextContent) and "'x' is not of type 'number'" in failed.content[0].text

        completion = await client.complete(
            PromptReference(type="ref/prompt", name="code-review"), {"name": "language", "value": "py"}
        )
        assert completion.completion.values == ["python"]
        await client.read_resource("sprint://payments/current")
        completion = await client.complete(
            ResourceTemplateReference(type="ref/resource", uri="sprint://{team}/current"),
            {"name": "team", "value": "pay"},
        )
        assert completion.completion.values == ["payments"]


async def test_sdk_auto_mode_chooses_the_stateless_revision(server: LiveServer) -> None:
    """``mode="auto"`` (the SDK's default) probes ``server/discover`` and adopts 2026-07-28."""
    async with Client(f"{server.url}/mcp", read_timeout_seconds=30) as client:
        assert client.protocol_version == MODERN
        assert client.server_info is not None and client.server_info.name == "mcp-registry"
        assert client.instructions and "registry" in client.instructions
        await article_walk(client)


async def test_sdk_modern_mode(server: LiveServer) -> None:
    """Pinned to 2026-07-28: no probe, no handshake, every request stateless."""
    async with Client(f"{server.url}/mcp", mode=MODERN, read_timeout_seconds=30) as client:
        assert client.protocol_version == MODERN
        await article_walk(client)
        with pytest.raises(MCPError) as missing:
            await client.get_prompt("summarize", {"max_words": "20"})
        assert missing.value.code == -32602
        assert "missing required argument(s): text" in missing.value.message
        with pytest.raises(MCPError) as unknown:
            await client.read_resource("info://nope")
        assert unknown.value.code == -32602  # 2026-07-28 has no -32002
        completion = await client.complete(
            PromptReference(type="ref/prompt", name="code-review"), {"name": "language", "value": "py"}
        )
        assert completion.completion.values == ["python"]
        discovered = await client.session.send_discover(MODERN)
        assert MODERN in discovered["supportedVersions"]


async def test_sdk_legacy_and_modern_clients_side_by_side(demo: Registry, server: LiveServer) -> None:
    async with (
        Client(f"{server.url}/mcp", mode="legacy", read_timeout_seconds=30) as legacy,
        Client(f"{server.url}/mcp", mode=MODERN, read_timeout_seconds=30) as modern,
    ):
        assert legacy.protocol_version == "2025-11-25" and modern.protocol_version == MODERN
        old = [t.model_dump() for t in (await legacy.list_tools()).tools]
        new = [t.model_dump() for t in (await modern.list_tools()).tools]
        assert old == new
        await article_walk(legacy)
        await article_walk(modern)


@pytest.fixture
def locked_server(demo: Registry, settings: Settings) -> Iterator[LiveServer]:
    """The same database behind a server that refuses anonymous agents."""
    registry = Registry(dataclasses.replace(settings, anonymous_agents=False))
    registry.prepare()
    server = LiveServer(registry)
    server.start()
    yield server
    server.stop()
    registry.close()


async def test_sdk_with_an_agent_token_gets_its_label(demo: Registry, locked_server: LiveServer) -> None:
    canary = {"name": "canary", "template": "Canary {{ who }}", "arguments": [{"name": "who", "required": True}]}
    demo.catalog.create("prompt", canary, WriteOptions(actor="t", labels=["staging"]))
    token, _ = demo.tokens.create("sdk-agent", ["agent"], label="staging")
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
        Client(streamable_http_client(f"{locked_server.url}/mcp", http_client=http), mode="legacy") as client,
    ):
        assert [p.name for p in (await client.list_prompts()).prompts] == ["canary"]
        rendered = await client.get_prompt("canary", {"who": "sdk"})
        assert rendered.messages[0].content == TextContent(type="text", text="Canary sdk")


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


async def test_sdk_without_a_token_is_refused(locked_server: LiveServer) -> None:
    """The 401's JSON-RPC body reaches the SDK as an MCPError (inside its task groups)."""
    with pytest.raises((MCPError, BaseExceptionGroup)) as refused:
        async with Client(f"{locked_server.url}/mcp", mode="legacy", read_timeout_seconds=10):
            pass
    errors = [e for e in _leaves(refused.value) if isinstance(e, MCPError)]
    assert errors, repr(refused.value)
    assert errors[0].code == -32001
    assert errors[0].message.startswith("Unauthorized")


async def test_sdk_legacy_sse_transport(server: LiveServer) -> None:
    async with Client(sse_client(f"{server.url}/sse"), mode="legacy", read_timeout_seconds=30) as client:
        assert client.protocol_version == "2025-11-25"
        await article_walk(client)


@pytest.mark.parametrize(("mode", "expected"), [("legacy", "2025-11-25"), ("auto", MODERN), (MODERN, MODERN)])
async def test_sdk_stdio_transport(demo: Registry, database_url: str, tmp_path: Path, mode: str, expected: str) -> None:
    command, *prefix = mcp_registry_command()
    env = child_env()
    params = StdioServerParameters(
        command=command,
        args=[*prefix, "stdio", "--database-url", database_url, "--data-dir", str(tmp_path / "stdio")],
        env=env,
    )
    with (tmp_path / "stderr.log").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode=mode, read_timeout_seconds=30) as client:
            assert client.protocol_version == expected
            await article_walk(client)
            if expected == MODERN:
                async with client.listen(prompts_list_changed=True) as subscription:
                    demo.catalog.create(
                        "prompt", {"name": "heard-on-stdio", "template": "New"}, WriteOptions(actor="admin")
                    )
                    with anyio.fail_after(10):
                        event = await anext(aiter(subscription))
                    assert isinstance(event, PromptsListChanged)
