"""The admin API's front door: who is calling, then how much they may send, before anything is read.

FastAPI reads and parses a request's whole body before it resolves the route's dependencies, so
the token check in ``registry/api/auth.py`` alone came after the body: a 300 MB body with no
token was held in memory (and parsed) before the 401. This ASGI middleware runs first, for
every path under its prefixes (``/api/``):

1. The bearer token is checked before one byte of the body is read: no token, or a wrong one,
   is answered 401 at once (the lookup runs on a worker thread, off the event loop). The
   principal found is left in ``request.state.principal`` for the route's scope check.
2. The body is bounded while it streams: a Content-Length over the limit is answered 413 before
   reading; otherwise bytes are counted as they arrive and the request is refused the moment the
   count passes the limit. The limit is ``limits.body_bytes``, or ``limits.bundle_bytes`` for the
   paths given as ``bundle_paths`` (bundle uploads: a zip, or the admin API's JSON document of files).
3. A JSON body (what FastAPI would parse: no Content-Type, or ``*/json``, ``*+json``) has its
   structure measured (``registry.boundedjson.check_structure``) before FastAPI parses it, so
   neither a deep nesting (``RecursionError``) nor a million tiny items reach ``json.loads``.

Refusals are RFC 9457 problem+json naming the limit (``REGISTRY_LIMIT_...``).

A client that leaves before its body is whole (a closed tab, a cancelled script) is nobody to
answer and nothing gone wrong: a debug line, no traceback (FastAPI turns a body it could not read
into a 400 that is sent to no one).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from fastapi import HTTPException, Request
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from registry.api.auth import authenticate, bearer_token
from registry.api.problems import problem
from registry.boundedjson import JsonStructureError, check_structure
from registry.limits import LimitExceeded, Limits, env_name
from registry.tokens import Principal, TokenService

log = logging.getLogger("registry.api")

#: Bodies larger than this have their JSON structure measured on a worker thread.
_SCAN_IN_THREAD_BYTES = 256 * 1024


class _BodyTooLarge(Exception):
    def __init__(self, error: LimitExceeded) -> None:
        super().__init__(str(error))
        self.error = error


class RequestGuard:
    """ASGI middleware: authenticate, then bound the body, for paths under ``prefixes``.

    ``bundle_paths(path)`` says whether a path takes bundle uploads (bounded by
    ``limits.bundle_bytes`` instead of ``limits.body_bytes``; a JSON one is read and its structure
    measured as any JSON body's, others are counted as they stream to the route).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        tokens: TokenService,
        limits: Limits,
        prefixes: Iterable[str] = ("/api/",),
        bundle_paths: Callable[[str], bool] = lambda _path: False,
    ) -> None:
        self.app = app
        self.tokens = tokens
        self.limits = limits
        self.prefixes = tuple(prefixes)
        self.bundle_paths = bundle_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefixes):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        try:
            principal = await self._authenticate(request)
        except HTTPException as exc:
            await _problem_for(exc)(scope, receive, send)
            return
        except Exception as exc:  # e.g. the database is unavailable: the app's own handler answers
            response = await _handled(request, exc)
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = principal

        bundle = self.bundle_paths(scope["path"])
        limit, name = (self.limits.bundle_bytes, "bundle_bytes") if bundle else (self.limits.body_bytes, "body_bytes")
        too_large = LimitExceeded(name, f"request body larger than {limit} bytes")
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await _too_large_response(too_large)(scope, receive, send)
            return

        if _is_json(request.headers):  # a bundle as JSON too: bounded by bundle_bytes, structure checked
            try:
                body = await _read_body(receive, limit, too_large)
            except _BodyTooLarge as exc:
                await _too_large_response(exc.error)(scope, receive, send)
                return
            if body is None:  # the client went away: nobody to answer
                _left(scope)
                return
            refusal = await self._check_json(body)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
            await self.app(scope, _replay(body, receive), send)
            return
        await self._stream_counted(scope, receive, send, limit, too_large)

    async def _authenticate(self, request: Request) -> Principal:
        token = bearer_token(request)
        cached = self.tokens.peek(token) if token is not None else None
        if cached is not None:
            return cached
        return await asyncio.to_thread(authenticate, self.tokens, request)

    async def _check_json(self, body: bytes) -> Response | None:
        """None if FastAPI may parse ``body``; else the refusal."""
        if not body:
            return None
        try:
            if len(body) > _SCAN_IN_THREAD_BYTES:
                await asyncio.to_thread(check_structure, body, self.limits)
            else:
                check_structure(body, self.limits)
        except JsonStructureError as exc:
            return problem(400, "Request too complex", str(exc), limit=env_name(exc.limit))
        except ValueError as exc:  # not UTF-8, unbalanced brackets: FastAPI would answer 422 too
            return problem(422, "Invalid request", f"JSON decode error: {exc}")
        return None

    async def _stream_counted(
        self, scope: Scope, receive: Receive, send: Send, limit: int, error: LimitExceeded
    ) -> None:
        """Pass a non-JSON body through as it arrives, refusing it once it passes ``limit``."""
        received = 0
        started = False
        whole = False

        async def counted_receive() -> Message:
            nonlocal received, whole
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                whole = not message.get("more_body", False)
                if received > limit:
                    raise _BodyTooLarge(error)
            elif message["type"] == "http.disconnect" and not whole:
                _left(scope)
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, watched_send)
        except _BodyTooLarge as exc:
            if started:
                raise
            await _too_large_response(exc.error)(scope, receive, send)


def _left(scope: Scope) -> None:
    log.debug("client left during %s %s before its body was read", scope.get("method"), scope.get("path"))


def _is_json(headers: Headers) -> bool:
    """Whether FastAPI would parse the body as JSON (it does so when there is no Content-Type too)."""
    content_type = headers.get("content-type")
    if not content_type:
        return True
    subtype = content_type.split(";", 1)[0].strip().lower().rpartition("/")[2]
    return subtype == "json" or subtype.endswith("+json")


async def _read_body(receive: Receive, limit: int, error: LimitExceeded) -> bytes | None:
    """The whole body, never holding more than ``limit`` bytes; None if the client disconnected."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _BodyTooLarge(error)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the already-read body to the app, then waits on the client as before."""
    pending = True

    async def replayed() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def _too_large_response(error: LimitExceeded) -> Response:
    # The rest of the body is never read by the app: the server discards it as it arrives.
    return problem(413, "Request body too large", str(error), limit=env_name(error.limit))


def _problem_for(exc: HTTPException) -> Response:
    title = {401: "Unauthorized", 403: "Forbidden"}.get(exc.status_code, "Error")
    return problem(exc.status_code, title, str(exc.detail), headers=dict(exc.headers or {}))


async def _handled(request: Request, exc: Exception) -> Response:
    """Answer ``exc`` with the handler the app registered for it (FastAPI's own handlers run inside
    this middleware, so they would not see it); with none, let it propagate as before."""
    app: Any = request.scope.get("app")
    handlers: dict[Any, Any] = getattr(app, "exception_handlers", None) or {}
    handler = next((handlers[cls] for cls in type(exc).__mro__ if cls in handlers), None)
    if handler is None:
        raise exc
    if asyncio.iscoroutinefunction(handler):
        response = await handler(request, exc)
    else:
        response = await run_in_threadpool(handler, request, exc)
    assert isinstance(response, Response)
    return response
