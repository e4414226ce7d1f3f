"""Streamable HTTP at ``/mcp``: sessions (spec 2025-03-26 ... 2025-11-25) and stateless 2026-07-28.

The era is chosen per request (basic/versioning, "dual-era"): an ``MCP-Protocol-Version`` header
naming no session-era version (or, without that header, a body whose ``_meta`` names a version
with no session to serve it) makes a stateless request, checked and answered by ``_modern``;
everything else takes the session path exactly as before.

A raw ASGI app rather than FastAPI routes: this is the agents' hot path, and per-request
framework objects are most of what a request costs. The protocol itself is in ``McpServer``.

A POST's answer starts as plain JSON; if the handler emits a related notification first
(progress, log) and the client accepts SSE, the answer switches to an SSE stream.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
from typing import TYPE_CHECKING, Any

from registry.config import Settings
from registry.mcp import modern
from registry.mcp.client_requests import ClientRequests, ForwardTooLarge
from registry.mcp.http_common import (
    HttpError,
    Receive,
    Scope,
    SendFn,
    SseStream,
    authenticate,
    check_origin_and_host,
    database_errors_as_503,
    header_map,
    known_principal,
    read_messages,
    send_bytes,
    send_http_error,
    send_json,
    served_label,
)
from registry.mcp.notifier import ChangeFeed, Notifier
from registry.mcp.protocol import (
    BATCH_VERSIONS,
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    SUPPORTED_VERSIONS,
    JsonRpcError,
    Message,
    error_message,
    invalid_message_answer,
    parse_message,
)
from registry.mcp.server import McpServer, RequestContext
from registry.mcp.sessions import STREAMABLE_HTTP, ClientState, Session, SessionBacklogFull, SessionStore
from registry.mcp.streams import StreamHub
from registry.streaming import serve_until_disconnect
from registry.tokens import Principal, TokenService

if TYPE_CHECKING:
    from registry.mcp.listen import ListenService

log = logging.getLogger("registry.mcp")

SESSION_HEADER = "mcp-session-id"
VERSION_HEADER = "mcp-protocol-version"


def _accepts(headers: dict[str, str]) -> tuple[bool, bool]:
    """(accepts JSON, accepts SSE). A missing Accept accepts anything."""
    accept = headers.get("accept")
    if accept is None:
        return True, True
    return _parse_accept(accept)


def _post_media(headers: dict[str, str]) -> tuple[bool, bool]:
    """A POST's ``_accepts``, once its Accept allows an answer (else 406) and its body is JSON
    (else 415; a missing Content-Type is taken as JSON)."""
    accepts_json, accepts_sse = _accepts(headers)
    if not (accepts_json or accepts_sse):
        raise HttpError(
            406, INVALID_REQUEST, "Not Acceptable: Accept must include application/json or text/event-stream"
        )
    if headers.get("content-type", "application/json").split(";")[0].strip().lower() != "application/json":
        raise HttpError(415, INVALID_REQUEST, "Unsupported Media Type: send application/json")
    return accepts_json, accepts_sse


@functools.lru_cache(maxsize=64)
def _parse_accept(accept: str) -> tuple[bool, bool]:
    types = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    anything = "*/*" in types
    return (
        anything or "application/json" in types or "application/*" in types,
        anything or "text/event-stream" in types or "text/*" in types,
    )


class StreamableHttpTransport:
    def __init__(
        self, server: McpServer, sessions: SessionStore, tokens: TokenService, settings: Settings, hub: StreamHub
    ) -> None:
        self.server = server
        self.sessions = sessions
        self.tokens = tokens
        self.settings = settings
        self.hub = hub
        #: Set by McpRuntime: the change feed and notifier, for stream resumption.
        self.feed: ChangeFeed | None = None
        self.notifier: Notifier | None = None
        #: Set by McpRuntime: ``subscriptions/listen`` streams (stateless era).
        self.listen: ListenService | None = None
        #: Requests sent to clients mid-call and their pending answers (the runtime shares it
        #: across replicas over PostgreSQL).
        self.client_requests = ClientRequests()

    async def __call__(self, scope: Scope, receive: Receive, send: SendFn) -> None:
        if scope["type"] != "http":
            return
        headers = header_map(scope)
        try:
            check_origin_and_host(headers, self.settings)
            principal = known_principal(headers, self.tokens, self.settings)  # nearly always: no await
            if principal is None:
                with database_errors_as_503(log, "MCP token lookup answers 503"):
                    principal = await authenticate(headers, self.tokens, self.settings, scope)
            # Absent, the version is taken to be 2025-03-26 (spec); a session-era value keeps the
            # session path; anything else is a stateless request (an unknown version is told so there).
            version = headers.get(VERSION_HEADER)
            if version is not None and version not in SUPPORTED_VERSIONS:
                await self._modern(scope, receive, send, headers, principal)
                return
            method = scope["method"]
            if method == "POST":
                await self._post(scope, receive, send, headers, principal)
            elif method == "GET":
                await self._get(scope, receive, send, headers, principal)
            elif method == "DELETE":
                await self._delete(send, headers, principal)
            else:
                raise HttpError(405, INVALID_REQUEST, "Method not allowed", {"Allow": "GET, POST, DELETE"})
        except HttpError as exc:
            await send_http_error(send, exc)

    def _known_session(self, headers: dict[str, str], principal: Principal) -> Session | None:
        """The request's session when this process has it (nearly every request: no await); None:
        ask ``_session``. Refuses a request without a session id, or with another caller's."""
        session_id = headers.get(SESSION_HEADER)
        if not session_id:
            raise HttpError(400, INVALID_REQUEST, "Bad Request: Mcp-Session-Id header is required")
        session = self.sessions.peek(session_id)
        return None if session is None else self._checked(session, principal)

    async def _session(self, headers: dict[str, str], principal: Principal) -> Session:
        session = self._known_session(headers, principal)
        if session is not None:
            return session
        with database_errors_as_503(log, "MCP session lookup answers 503"):
            session = await self.sessions.get(headers[SESSION_HEADER])
        if session is None:
            raise HttpError(404, -32001, "Session not found: initialize a new session")
        return self._checked(session, principal)

    def _checked(self, session: Session, principal: Principal) -> Session:
        if not _opened_by(session, principal):
            raise HttpError(404, -32001, "Session not found: initialize a new session")
        _as_seen_by(session, principal)
        self.sessions.touch(session)
        return session

    # ---------------------------------------------------------------- POST
    async def _post(
        self, scope: Scope, receive: Receive, send: SendFn, headers: dict[str, str], principal: Principal
    ) -> None:
        accepts_json, accepts_sse = _post_media(headers)
        # Size, JSON structure and batch length are bounded here, each before the next step runs.
        limits = self.settings.limits
        batch, items = await read_messages(receive, headers, limits)

        messages: list[Message] = []
        answers: list[dict[str, Any]] = []
        requests: list[Message] = []
        for item in items:
            try:
                message = parse_message(item, limits)
            except JsonRpcError as exc:
                answers.append(invalid_message_answer(exc))
                continue
            if message.method == "initialize":
                if batch:
                    raise HttpError(400, INVALID_REQUEST, "Bad Request: initialize must not be part of a batch")
                await self._initialize(scope, send, message, principal)
                return
            messages.append(message)
            if message.is_request:
                requests.append(message)

        if not messages:
            await send_json(send, 400, answers if batch else answers[0])
            return
        if not batch and SESSION_HEADER not in headers and modern.has_modern_meta(messages[0]):
            # A stateless request without its MCP-Protocol-Version header: say so (with its id),
            # rather than ask it for a session it should not have.
            request = messages[0]
            if request.is_request:
                error = JsonRpcError(HEADER_MISMATCH, "Header mismatch: missing MCP-Protocol-Version header")
                await send_json(send, 400, error_message(request.id, error))
                return
        try:
            session = self._known_session(headers, principal) or await self._session(headers, principal)
        except HttpError as exc:
            if not requests:
                raise
            # The body is parsed: each request is answered with its own id (a session this replica
            # has not cached, looked up during an outage, is -32003 for *this* request), not null.
            error = JsonRpcError(exc.code, exc.message)
            refused = [error_message(request.id, error) for request in requests]
            await send_json(send, exc.status, [*answers, *refused] if batch else refused[0], exc.headers)
            return
        if batch and session.protocol_version not in BATCH_VERSIONS:
            raise HttpError(
                400,
                INVALID_REQUEST,
                f"Bad Request: JSON-RPC batches are not part of protocol {session.protocol_version}",
            )

        if len(requests) != len(messages):  # notifications, or the client's answers to our requests
            for message in messages:
                if message.is_notification:
                    await self.server.handle_notification(message, session)
                elif message.is_response:
                    # The client's answer to a request a tool call sent it (registry/mcp/client_requests.py);
                    # one for a call running on another replica is forwarded there.
                    try:
                        await self.client_requests.deliver(session.id, message)
                    except ForwardTooLarge as exc:
                        raise HttpError(413, INVALID_REQUEST, f"Payload Too Large: {exc}") from None
            if not requests:
                if answers:
                    await send_json(send, 400, answers if batch else answers[0])
                else:
                    await send_bytes(send, 202, b"", None)
                return

        stream: SseStream | None = None

        async def related(message: dict[str, Any]) -> None:
            nonlocal stream
            if not accepts_sse:
                return  # no channel for it on a JSON-only POST
            if stream is None:
                stream = SseStream(send)
                await stream.start()
                if (session.protocol_version or "") >= "2025-11-25":
                    await stream.event(b"", event_id="p-" + secrets.token_hex(8), retry_ms=3000)
            await stream.message(message)

        # Server-to-client requests go on this POST's SSE stream: none without one.
        ask = self.client_requests.asker(session.id, related) if accepts_sse else None
        for request in requests:
            ctx = RequestContext(client=session, send=related, session_id=session.id, ask=ask, scope=scope)
            if self.server.may_wait(request.method, request.params, session):
                answers.append(await self._run_as_task(request, session, ctx))
            else:  # answered from memory: a task of its own would cost more than the answer
                answers.append(await self.server.handle_request(request, ctx))

        result: Any = answers if batch else answers[0]
        if stream is not None:
            for answer in answers if batch else [answers[0]]:
                await stream.message(answer)
            await stream.close()
        elif accepts_json:
            await send_json(send, 200, result)
        else:
            sse = SseStream(send)
            await sse.start()
            for answer in answers:
                await sse.message(answer)
            await sse.close()

    async def _run_as_task(self, request: Message, session: Session, ctx: RequestContext) -> dict[str, Any]:
        """A request that may wait (``McpServer.may_wait``) runs as a task of its own, so that
        ``notifications/cancelled`` can stop it."""
        assert request.id is not None
        task = asyncio.create_task(self.server.stopping.run(self.server.handle_request(request, ctx), request.id))
        session.in_flight[request.id] = task
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():
                current = asyncio.current_task()
                if current is None or not current.cancelling():
                    return error_message(request.id, JsonRpcError(INTERNAL_ERROR, "request cancelled by the client"))
            task.cancel()
            raise
        finally:
            session.in_flight.pop(request.id, None)

    async def _initialize(self, scope: Scope, send: SendFn, message: Message, principal: Principal) -> None:
        if not message.is_request:
            raise HttpError(400, INVALID_REQUEST, "Bad Request: initialize must be a request with an id")
        try:
            label = served_label(principal, scope, self.settings)
            session = Session(
                label=label,
                principal=principal.name,
                token_id=principal.token_id,
                user=principal.user,
                visible_teams=principal.visible_teams,
            )
            ctx = RequestContext(client=session, scope=scope)
            answer = await self.server.handle_request(message, ctx)
            if "error" in answer:
                await send_json(send, 200, answer)
                return
            session.initialized = False
            try:
                with database_errors_as_503(log, "MCP initialize answers 503"):
                    await self.sessions.create(session, transport=STREAMABLE_HTTP)
            except HttpError as exc:
                if isinstance(exc.__cause__, SessionBacklogFull):  # say which limit, not just "unavailable"
                    exc.message = str(exc.__cause__)
                raise
        except HttpError as exc:  # refused, or the session cannot be stored: answer this request's id
            await send_json(
                send, exc.status, error_message(message.id, JsonRpcError(exc.code, exc.message)), exc.headers
            )
            return
        await send_json(send, 200, answer, {"Mcp-Session-Id": session.id})

    # ---------------------------------------------------------------- stateless (2026-07-28)
    async def _modern(
        self, scope: Scope, receive: Receive, send: SendFn, headers: dict[str, str], principal: Principal
    ) -> None:
        """One stateless request: no session is read, made or named (an ``Mcp-Session-Id`` is ignored).

        HTTP-level refusals before the body is parsed answer ``id: null`` as ever; from the parsed
        request on, every error answers its id, as JSON, with the status the revision assigns.
        """
        if scope["method"] != "POST":
            raise HttpError(
                405, INVALID_REQUEST, "Method Not Allowed: protocol 2026-07-28 uses POST only", {"Allow": "POST"}
            )
        accepts_json, accepts_sse = _post_media(headers)
        batch, items = await read_messages(receive, headers, self.settings.limits)
        if batch:
            raise HttpError(400, INVALID_REQUEST, "Bad Request: protocol 2026-07-28 has no JSON-RPC batches")
        try:
            message = parse_message(items[0], self.settings.limits)
        except JsonRpcError as exc:
            await send_json(send, 400, invalid_message_answer(exc))
            return
        if not message.is_request:
            await send_bytes(send, 202, b"", None)  # notifications and stray responses: nothing to answer
            return
        assert message.id is not None and message.method is not None
        try:
            meta = modern.check_meta_http(message, headers)
            modern.check_headers(message, meta, headers, scope["headers"])
            modern.check_version(meta)
            try:
                label = served_label(principal, scope, self.settings)
            except HttpError as exc:
                await send_json(
                    send, exc.status, error_message(message.id, JsonRpcError(exc.code, exc.message)), exc.headers
                )
                return
            client = modern.client_state(
                meta,
                label=label,
                principal=principal.name,
                token_id=principal.token_id,
                visible_teams=principal.visible_teams,
                user=principal.user,
            )
            if message.method == "tools/call":
                await self._check_param_headers(message, client, headers)
            if message.method == "subscriptions/listen" and self.listen is not None:
                stream = await self.listen.open(message.id, message.params, client, _peer(scope))
                await self.listen.serve_sse(stream, receive, send)
                return
        except JsonRpcError as exc:
            await send_json(send, modern.ERROR_STATUS.get(exc.code, 200), error_message(message.id, exc))
            return

        stream_out: SseStream | None = None

        async def related(notification: dict[str, Any]) -> None:
            nonlocal stream_out
            if not accepts_sse:
                return
            if stream_out is None:  # no event ids, no priming: nothing is resumable in this era
                stream_out = SseStream(send)
                await stream_out.start()
            await stream_out.message(notification)

        ctx = RequestContext(client=client, send=related, modern=True, peer=_peer(scope), scope=scope)
        if self.server.may_wait(message.method, message.params, client):
            work = self.server.stopping.run(self.server.handle_request(message, ctx), message.id)
            answer = await serve_until_disconnect(work, receive)
            if answer is None:
                return  # the client closed the request: that is its cancellation
        else:
            answer = await self.server.handle_request(message, ctx)
        if stream_out is not None:
            await stream_out.message(answer)
            await stream_out.close()
        elif accepts_json:
            await send_json(send, modern.error_status(answer), answer)
        else:
            sse = SseStream(send)
            await sse.start()
            await sse.message(answer)
            await sse.close()

    async def _check_param_headers(self, message: Message, client: ClientState, headers: dict[str, str]) -> None:
        """A stateless ``tools/call`` of a tool whose schema annotates arguments with
        ``x-mcp-header``: the ``Mcp-Param-*`` headers must mirror them (-32020 otherwise)."""
        name = message.params.get("name")
        if not isinstance(name, str):
            return
        entry = (await self.server.snapshots.get(client.label)).tool(name, client.visible_teams)
        if entry is None:
            return  # the handler answers for an unknown tool (another team's is unknown too)
        annotations = modern.param_headers(entry.listing.get("inputSchema"))
        if annotations:
            modern.check_param_headers(annotations, message.params.get("arguments"), headers)

    # ---------------------------------------------------------------- GET
    async def _get(
        self, scope: Scope, receive: Receive, send: SendFn, headers: dict[str, str], principal: Principal
    ) -> None:
        _, accepts_sse = _accepts(headers)
        if not accepts_sse or "text/event-stream" not in headers.get("accept", ""):
            raise HttpError(406, INVALID_REQUEST, "Not Acceptable: GET needs Accept: text/event-stream")
        session = await self._session(headers, principal)
        feed, notifier = self.feed, self.notifier
        # Noted before serve_stream registers the stream (no await in between): later changes
        # arrive live, earlier ones come from the replay.
        position = feed.position if feed is not None else 0
        last_event_id = headers.get("last-event-id")
        replay = None
        if last_event_id and feed is not None and notifier is not None:

            async def replay() -> list[tuple[str, bytes]]:
                assert feed is not None and notifier is not None
                return await notifier.replay(feed, session, last_event_id, position)

        priming = str(position) if (session.protocol_version or "") >= "2025-11-25" else None
        await self.hub.serve_stream(
            session.id,
            session,
            receive,
            send,
            priming_id=priming,
            replay=replay,
            on_keepalive=lambda: self.sessions.touch(session),
            persistent=True,
        )

    # ---------------------------------------------------------------- DELETE
    async def _delete(self, send: SendFn, headers: dict[str, str], principal: Principal) -> None:
        session = await self._session(headers, principal)
        with database_errors_as_503(log, "MCP session end answers 503"):
            await self.sessions.end(session.id)
        self.hub.close_session(session.id)
        await send_bytes(send, 204, b"", None)


def _peer(scope: Scope) -> str | None:
    """The client's address (after trusted proxy headers): who an anonymous stateless caller is."""
    client = scope.get("client")
    return str(client[0]) if client else None


def _as_seen_by(session: Session, principal: Principal) -> None:
    """What the session sees is its principal's, as of this request (the session row keeps no
    teams: a session restored on another replica, or a token whose teams changed, is served right)."""
    session.visible_teams = principal.visible_teams
    session.user = principal.user


def _opened_by(session: Session, principal: Principal) -> bool:
    """A session belongs to the token that opened it; anyone else is told it does not exist."""
    return (session.token_id, session.user, session.principal) == (principal.token_id, principal.user, principal.name)


__all__ = ["StreamableHttpTransport"]
