"""HTTP+SSE (protocol 2024-11-05), for older clients.

``GET /sse`` opens the stream and announces, in an ``endpoint`` event, where to POST messages;
answers come back on the stream. The session lives as long as its stream, in this process:
the transport ties both halves to one connection, so it cannot move between replicas.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from registry.config import Settings
from registry.mcp.http_common import (
    HttpError,
    Receive,
    Scope,
    SendFn,
    authenticate,
    check_origin_and_host,
    database_errors_as_503,
    header_map,
    query_param,
    read_messages,
    send_bytes,
    send_http_error,
    served_label,
)
from registry.mcp.protocol import (
    INVALID_REQUEST,
    JsonRpcError,
    invalid_message_answer,
    parse_message,
)
from registry.mcp.server import McpServer, RequestContext
from registry.mcp.sessions import Session, SessionStore, new_session_id
from registry.mcp.streams import StreamHub
from registry.tokens import TokenService

log = logging.getLogger("registry.mcp")


class LegacySseTransport:
    def __init__(
        self, server: McpServer, sessions: SessionStore, tokens: TokenService, settings: Settings, hub: StreamHub
    ) -> None:
        self.server = server
        self.tokens = tokens
        self.settings = settings
        self.hub = hub
        self._sessions: dict[str, Session] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    async def stream(self, scope: Scope, receive: Receive, send: SendFn) -> None:
        headers = header_map(scope)
        try:
            if scope["method"] != "GET":
                raise HttpError(405, INVALID_REQUEST, "Method not allowed", {"Allow": "GET"})
            check_origin_and_host(headers, self.settings)
            with database_errors_as_503(log, "MCP token lookup answers 503"):
                principal = await authenticate(headers, self.tokens, self.settings)
            label = served_label(principal, scope, self.settings)
        except HttpError as exc:
            await send_http_error(send, exc)
            return
        session = Session(label=label, principal=principal.name, token_id=principal.token_id, id=new_session_id())
        self._sessions[session.id] = session
        endpoint = f"{scope.get('root_path', '')}/messages?session_id={session.id}"
        try:
            await self.hub.serve_stream(
                session.id, session, receive, send, first_events=[(None, "endpoint", endpoint.encode())]
            )
        finally:
            self._sessions.pop(session.id, None)

    def session(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    async def messages(self, scope: Scope, receive: Receive, send: SendFn) -> None:
        headers = header_map(scope)
        try:
            if scope["method"] != "POST":
                raise HttpError(405, INVALID_REQUEST, "Method not allowed", {"Allow": "POST"})
            check_origin_and_host(headers, self.settings)
            with database_errors_as_503(log, "MCP token lookup answers 503"):
                principal = await authenticate(headers, self.tokens, self.settings)
            session_id = query_param(scope, "session_id")
            if not session_id:
                raise HttpError(400, INVALID_REQUEST, "Bad Request: session_id query parameter is required")
            session = self._sessions.get(session_id)
            if session is None or session.token_id != principal.token_id:
                raise HttpError(404, -32001, "Session not found: open a new /sse stream")
            # Size, JSON structure and batch length are bounded here, each before the next step runs.
            _batch, items = await read_messages(receive, headers, self.settings.limits)
        except HttpError as exc:
            await send_http_error(send, exc)
            return
        await send_bytes(send, 202, b"Accepted", "text/plain")
        for item in items:
            task = asyncio.create_task(self._handle(session, item))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _handle(self, session: Session, item: Any) -> None:
        try:
            message = parse_message(item, self.settings.limits)
        except JsonRpcError as exc:
            self.hub.publish(session.id, invalid_message_answer(exc))
            return
        if message.is_notification:
            await self.server.handle_notification(message, session)
            return
        if not message.is_request:
            return

        async def related(notification: dict[str, Any]) -> None:
            self.hub.publish(session.id, notification)

        assert message.id is not None
        ctx = RequestContext(client=session, send=related, session_id=session.id)
        task = asyncio.current_task()
        if task is not None:
            session.in_flight[message.id] = task
        try:
            answer = await self.server.handle_request(message, ctx)
        except asyncio.CancelledError:
            return
        finally:
            session.in_flight.pop(message.id, None)
        self.hub.publish(session.id, answer)
