"""The official Python SDK client (mode="legacy") hears about admin edits while connected."""

from __future__ import annotations

import asyncio

import mcp.types as types
import pytest
from mcp.client.client import Client

from tests.conftest import LiveServer
from tests.waiting import wait_until_async


@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")
async def test_sdk_client_receives_list_changed_after_an_admin_edit(live_server: LiveServer) -> None:
    live_server.registry.seed("demo")
    received: asyncio.Queue[object] = asyncio.Queue()

    async def on_message(message: object) -> None:
        if not isinstance(message, Exception):
            await received.put(message)

    async with Client(f"{live_server.url}/mcp", mode="legacy", message_handler=on_message) as client:
        prompts = await client.list_prompts()
        assert "summarize" in [p.name for p in prompts.prompts]
        await client.subscribe_resource("info://server-info")
        hub = live_server.server.config.app.mcp.hub
        # The SDK opens its GET stream in the background.
        await wait_until_async(lambda: hub.open_streams > 0, "the SDK's GET stream to open")

        def edit_through_the_admin_api() -> None:
            with live_server.client() as admin:
                response = admin.put(
                    "/api/v1/prompts/summarize",
                    json={"template": "TL;DR: {{ text }}", "arguments": [{"name": "text", "required": True}]},
                )
                assert response.status_code == 200, response.text
                response = admin.put(
                    "/api/v1/resources/server-info",
                    json={"uri": "info://server-info", "kind": "static", "text": "{}", "mimeType": "application/json"},
                )
                assert response.status_code == 200, response.text

        await asyncio.to_thread(edit_through_the_admin_api)
        seen: list[object] = []
        async with asyncio.timeout(15):
            while not (
                any(isinstance(m, types.PromptListChangedNotification) for m in seen)
                and any(isinstance(m, types.ResourceUpdatedNotification) for m in seen)
            ):
                seen.append(await received.get())
        updated = next(m for m in seen if isinstance(m, types.ResourceUpdatedNotification))
        assert updated.params.uri == "info://server-info"
        # The client is now served the new version.
        result = await client.get_prompt("summarize", {"text": "x"})
        assert result.messages[0].content.text == "TL;DR: x"  # type: ignore[union-attr]
