"""``subscriptions/listen`` end to end: the official Python SDK client (2.3.0) pinned to 2026-07-28
hears admin edits on its listen stream, beside a session-era client on the same endpoint."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest
from mcp.client.client import Client
from mcp.client.subscriptions import PromptsListChanged, ResourceUpdated, ToolsListChanged

from tests.conftest import ADMIN_TOKEN, LiveServer
from tests.serve_process import ServerProcess
from tests.waiting import wait_until_async

MODERN = "2026-07-28"


@pytest.fixture
def demo_server(live_server: LiveServer) -> LiveServer:
    live_server.registry.seed("demo")
    return live_server


def _admin_put(server: LiveServer, path: str, body: dict[str, Any]) -> None:
    with server.client() as admin:
        response = admin.put(path, json=body)
        assert response.status_code == 200, response.text


def _redescribe_summarize(server: LiveServer, description: str) -> None:
    """A list change of the production label: what prompts/list shows is different."""
    with server.client() as admin:
        spec = admin.get("/api/v1/prompts/summarize").json()["spec"]
    spec["description"] = description
    _admin_put(server, "/api/v1/prompts/summarize", spec)


async def test_sdk_listen_receives_the_prompts_list_change_after_an_admin_edit(demo_server: LiveServer) -> None:
    async with Client(f"{demo_server.url}/mcp", mode=MODERN) as client:
        prompts = await client.list_prompts()
        assert "summarize" in [p.name for p in prompts.prompts]
        async with client.listen(prompts_list_changed=True, resource_subscriptions=["info://server-info"]) as sub:
            assert sub.honored.prompts_list_changed is True
            assert sub.honored.tools_list_changed is None
            assert list(sub.honored.resource_subscriptions or []) == ["info://server-info"]

            await asyncio.to_thread(_redescribe_summarize, demo_server, "Summaries, heard on listen.")
            async with asyncio.timeout(10):
                event = await anext(sub)
            assert isinstance(event, PromptsListChanged)
            listed = await client.list_prompts()  # a listen event evicts the client's cached list
            assert [p.description for p in listed.prompts if p.name == "summarize"] == ["Summaries, heard on listen."]

            await asyncio.to_thread(
                _admin_put,
                demo_server,
                "/api/v1/resources/server-info",
                {"uri": "info://server-info", "kind": "static", "text": "{}", "mimeType": "application/json"},
            )
            async with asyncio.timeout(10):
                events = [await anext(sub)]
                while not isinstance(events[-1], ResourceUpdated):
                    events.append(await anext(sub))
            assert events[-1] == ResourceUpdated(uri="info://server-info")
            assert not any(isinstance(e, ToolsListChanged) for e in events)  # not asked for


@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")
async def test_a_session_client_and_a_listener_on_one_endpoint_hear_the_same_change(demo_server: LiveServer) -> None:
    received: asyncio.Queue[object] = asyncio.Queue()

    async def on_message(message: object) -> None:
        if not isinstance(message, Exception):
            await received.put(message)

    url = f"{demo_server.url}/mcp"
    async with (
        Client(url, mode="legacy", message_handler=on_message) as legacy,
        Client(url, mode=MODERN) as modern,
    ):
        assert legacy.session.protocol_version == "2025-11-25"
        hub = demo_server.app.mcp.hub
        # The legacy SDK opens its GET stream in the background.
        await wait_until_async(lambda: hub.open_streams > 0, "the SDK's GET stream to open")
        async with modern.listen(prompts_list_changed=True, tools_list_changed=True) as sub:
            await asyncio.to_thread(_redescribe_summarize, demo_server, "Told to both eras.")
            async with asyncio.timeout(10):
                heard_modern = await anext(sub)
                heard_legacy = [await received.get()]
                while not isinstance(heard_legacy[-1], types.PromptListChangedNotification):
                    heard_legacy.append(await received.get())
            assert isinstance(heard_modern, PromptsListChanged)
            assert not any(isinstance(m, types.ToolListChangedNotification) for m in heard_legacy)
            with pytest.raises(TimeoutError):  # one change, one notification: nothing about tools
                async with asyncio.timeout(0.5):
                    await anext(sub)
            # ...and both are then served the same catalog.
            legacy_list = (await legacy.list_prompts()).prompts
            modern_list = (await modern.list_prompts()).prompts
            assert [(p.name, p.description) for p in legacy_list] == [(p.name, p.description) for p in modern_list]
            assert [p.description for p in modern_list if p.name == "summarize"] == ["Told to both eras."]


async def test_sigterm_ends_an_sdk_listen_gracefully(tmp_path: Path) -> None:
    """A server going away (SIGTERM: a deploy) answers each listen with its final result, so the
    client sees a graceful end (the loop ends) rather than a lost subscription."""
    server = ServerProcess(tmp_path / "data", admin_token=ADMIN_TOKEN, name="listen-sigterm")
    try:
        await asyncio.to_thread(server.start, wait="/healthz", timeout=30)
        async with (
            Client(f"{server.url}/mcp", mode=MODERN) as client,
            client.listen(tools_list_changed=True) as sub,
        ):
            server.send_signal(signal.SIGTERM)
            async with asyncio.timeout(10):
                events = [event async for event in sub]  # SubscriptionLost would raise here
            assert events == []
        assert await asyncio.to_thread(server.wait_exit, 15) in (0, -signal.SIGTERM)
    finally:
        await asyncio.to_thread(server.stop)
