"""HTTP+SSE (protocol 2024-11-05), for older clients.

``GET /sse`` opens the stream and announces, in an ``endpoint`` event, where to POST messages;
answers come back on the stream. The session lives as long as its stream, in this process:
the transport ties both halves to one connection, so it cannot move between replicas. Once
initialized it is also recorded in ``mcp_sessions`` (transport ``sse``), kept fresh by the
stream's keepalives and ended with the stream, so every replica lists it among the connected
agents; that row is a listing only (best effort: a failure to write it does not affect the session).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from registry.config import Settings
from registry.db.engine import is_unavailable, warn_unavailable
from registry.mcp.client_requests import ClientRequests
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
from registry.mcp.sessions import LEGACY_SSE, Session, SessionStore, new_session_id
from registry.mcp.streams import StreamHub
from registry.tokens import TokenService

log = logging.getLogger("registry.mcp")


class LegacySseTransport:
    def __init__(
        self, server: McpServer, sessions: SessionStore, tokens: TokenService, settings: Settings, hub: StreamHub
    ) -> None:
        self.server = server
        self.sessions = sessions
        self.tokens = tokens
        self.settings = settings
        self.hub = hub
        self._sessions: dict[str, Session] = {}
        #: Sessions with an ``mcp_sessions`` row (listed as connected agents), ended with their stream.
        self._recorded: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        #: Requests sent to clients mid-call (a session lives on this replica's stream, and so do
        #: its answers: nothing to forward).
        self.client_requests = ClientRequests()

    async def stream(self, scope: Scope, receive: Receive, send: SendFn) -> None:
        headers = header_map(scope)
        try:
            if scope["method"] != "GET":
                raise HttpError(405, INVALID_REQUEST, "Method not allowed", {"Allow": "GET"})
            check_origin_and_host(headers, self.settings)
            with database_errors_as_503(log, "MCP token lookup answers 503"):
                principal = await authenticate(headers, self.tokens, self.settings, scope)
            label = served_label(principal, scope, self.settings)
        except HttpError as exc:
            await send_http_error(send, exc)
            return
        session = Session(
            label=label,
            principal=principal.name,
            token_id=principal.token_id,
            user=principal.user,
            visible_teams=principal.visible_teams,
            id=new_session_id(),
        )
        self._sessions[session.id] = session
        endpoint = f"{scope.get('root_path', '')}/messages?session_id={session.id}"
        try:
            await self.hub.serve_stream(
                session.id,
                session,
                receive,
                send,
                first_events=[(None, "endpoint", endpoint.encode())],
                on_keepalive=lambda: self._keep_listed(session),
            )
        finally:
            self._sessions.pop(session.id, None)
            if session.id in self._recorded:
                await self._unlist(session.id)

    def session(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    # -- the listing row (connected agents) ---------------------------------------------------
    async def _list(self, session: Session) -> None:
        """Record the initialized session (client, protocol version, label, principal)."""
        try:
            await self.sessions.record(session, transport=LEGACY_SSE)
        except Exception as exc:
            if is_unavailable(exc):
                warn_unavailable(log, "listing an HTTP+SSE session", exc)
            else:
                log.warning("could not list HTTP+SSE session among the connected agents", exc_info=True)
            return
        self._recorded.add(session.id)
        if session.id not in self._sessions:  # the stream ended while the row was written
            await self._unlist(session.id)

    def _keep_listed(self, session: Session) -> None:
        if session.id in self._recorded:
            self.sessions.touch(session)

    async def _unlist(self, session_id: str) -> None:
        self._recorded.discard(session_id)
        try:
            await self.sessions.end(session_id)
        except Exception as exc:  # the row then expires with the idle timeout
            if is_unavailable(exc):
                warn_unavailable(log, "ending an HTTP+SSE session's listing", exc)
            else:
                log.warning("could not end an HTTP+SSE session's listing", exc_info=True)

    async def messages(self, scope: Scope, receive: Receive, send: SendFn) -> None:
        headers = header_map(scope)
        try:
            if scope["method"] != "POST":
                raise HttpError(405, INVALID_REQUEST, "Method not allowed", {"Allow": "POST"})
            check_origin_and_host(headers, self.settings)
            with database_errors_as_503(log, "MCP token lookup answers 503"):
                principal = await authenticate(headers, self.tokens, self.settings, scope)
            session_id = query_param(scope, "session_id")
            if not session_id:
                raise HttpError(400, INVALID_REQUEST, "Bad Request: session_id query parameter is required")
            session = self._sessions.get(session_id)
            if (
                session is None
                or session.token_id != principal.token_id
                or session.principal != principal.name
                or session.user != principal.user
            ):
                raise HttpError(404, -32001, "Session not found: open a new /sse stream")
            # Served what the principal sees as of this message (its stream's notifications too).
            session.visible_teams = principal.visible_teams
            session.user = principal.user
            # Size, JSON structure and batch length are bounded here, each before the next step runs.
            _batch, items = await read_messages(receive, headers, self.settings.limits)
        except HttpError as exc:
            await send_http_error(send, exc)
            return
        await send_bytes(send, 202, b"Accepted", "text/plain")
        for item in items:
            task = asyncio.create_task(self._handle(session, item, scope))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _handle(self, session: Session, item: Any, scope: Scope) -> None:
        try:
            message = parse_message(item, self.settings.limits)
        except JsonRpcError as exc:
            self.hub.publish(session.id, invalid_message_answer(exc))
            return
        if message.is_notification:
            await self.server.handle_notification(message, session)
            return
        if not message.is_request:
            # The client's answer to a request a tool call sent it on the stream.
            await self.client_requests.deliver(session.id, message)
            return

        async def related(notification: dict[str, Any]) -> None:
            self.hub.publish(session.id, notification)

        assert message.id is not None
        ask = self.client_requests.asker(session.id, related)
        ctx = RequestContext(client=session, send=related, session_id=session.id, ask=ask, scope=scope)
        task = asyncio.current_task()
        if task is not None:
            session.in_flight[message.id] = task
        try:
            answer = await self.server.handle_request(message, ctx)
        except asyncio.CancelledError:
            return
        finally:
            session.in_flight.pop(message.id, None)
        if message.method == "initialize" and "result" in answer and session.id not in self._recorded:
            await self._list(session)
        self.hub.publish(session.id, answer)
