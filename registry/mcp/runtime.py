"""The MCP side of a running registry: dispatcher, sessions, streams, and the HTTP transports."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from registry.mcp.server import McpServer
from registry.mcp.sessions import ClientState, Session, SessionStore
from registry.mcp.streams import StreamHub
from registry.runtime import Registry

log = logging.getLogger("registry.mcp")


class McpRuntime:
    SWEEP_INTERVAL_S = 60.0

    def __init__(self, registry: Registry) -> None:
        settings = registry.settings
        self.registry = registry
        self.server = McpServer(registry.catalog, webhook_allowed_networks=settings.webhook_allowed_networks)
        self.sessions = SessionStore(registry.db, idle_timeout_s=settings.session_idle_timeout_s)
        self.hub = StreamHub()
        self.server.on_state_change = self._save_state
        self._tasks: list[asyncio.Task[None]] = []

        from registry.mcp.transports.legacy_sse import LegacySseTransport
        from registry.mcp.transports.streamable_http import StreamableHttpTransport

        self.streamable_http = StreamableHttpTransport(self.server, self.sessions, registry.tokens, settings, self.hub)
        self.legacy_sse = LegacySseTransport(self.server, self.sessions, registry.tokens, settings, self.hub)

    async def _save_state(self, client: ClientState) -> None:
        if isinstance(client, Session) and client.id:
            await self.sessions.save_state(client)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.SWEEP_INTERVAL_S)
            try:
                expired = await self.sessions.sweep()
                if expired:
                    log.info("swept %d expired MCP sessions", expired)
            except Exception:
                log.exception("session sweep failed")

    async def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._sweep_forever()))

    async def stop(self) -> None:
        self.hub.close_all()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.server.aclose()
