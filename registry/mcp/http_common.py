"""What the HTTP transports share: header access, Origin/Host checks, authentication, framing."""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import sqlite3
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from types import CoroutineType
from typing import Any, Generic, Protocol, TypeVar
from urllib.parse import parse_qs, urlsplit

import psycopg
from sqlalchemy.exc import SQLAlchemyError

from registry.catalog.specs import LABEL_PATTERN
from registry.catalog.validation import PRODUCTION
from registry.config import LOOPBACK_HOSTS, Settings
from registry.db.diskfull import FULL_RETRY_AFTER_S, is_full
from registry.db.engine import DatabaseUnavailable, is_unavailable, warn_unavailable
from registry.limits import LimitExceeded, Limits
from registry.mcp.protocol import (
    CATALOG_UNAVAILABLE,
    CATALOG_UNAVAILABLE_MESSAGE,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    PARSE_ERROR,
    JsonRpcError,
    catalog_unavailable_error,
    check_batch,
    dumps,
    error_message,
    loads,
)
from registry.oidc import MCP_METADATA_PATH, public_base
from registry.tokens import ANONYMOUS_AGENT, Principal, TokenRejected, TokenService

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
SendFn = Callable[[MutableMapping[str, Any]], Awaitable[None]]

#: Bodies larger than this are parsed on a worker thread, so the event loop keeps serving others.
_SCAN_IN_THREAD_BYTES = 256 * 1024

log = logging.getLogger("registry.mcp")

_LABEL = re.compile(LABEL_PATTERN)

StreamT = TypeVar("StreamT", bound="PassWritable")

_JSON_CONTENT = (b"content-type", b"application/json")


class HttpError(Exception):
    def __init__(self, status: int, code: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


#: Seconds a client is told to wait (Retry-After) while the database cannot be reached.
RETRY_AFTER_S = 2


def catalog_unavailable(exc: BaseException | None = None) -> HttpError:
    """503 with -32003: the database cannot be reached, or (``exc`` says so) it is full."""
    if exc is not None and is_full(exc):
        error = catalog_unavailable_error(full=True)
        return HttpError(503, error.code, error.message, {"Retry-After": str(FULL_RETRY_AFTER_S)})
    return HttpError(503, CATALOG_UNAVAILABLE, CATALOG_UNAVAILABLE_MESSAGE, {"Retry-After": str(RETRY_AFTER_S)})


#: Errors of the database layer (a fault of the database or in what was sent to it).
DATABASE_ERRORS = (DatabaseUnavailable, SQLAlchemyError, psycopg.Error, sqlite3.Error)


class database_errors_as_503:
    """Around a token or session lookup or write: "the database cannot be reached" (or is full)
    becomes a 503 answer with a JSON-RPC error saying so; any other database error a 500 with a
    JSON-RPC internal error (its traceback logged), never uvicorn's plain-text 500. Other errors
    propagate.

    A class rather than ``@contextmanager``: it wraps every MCP request twice, and a generator
    context manager costs several times as much to enter and leave."""

    __slots__ = ("logger", "where")

    def __init__(self, logger: logging.Logger, where: str) -> None:
        self.logger = logger
        self.where = where

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc is None or not isinstance(exc, DATABASE_ERRORS):
            return
        if is_unavailable(exc):
            warn_unavailable(self.logger, self.where, exc)
            raise catalog_unavailable(exc) from exc
        self.logger.error("database error in %s", self.where.removesuffix(" answers 503"), exc_info=exc)
        raise HttpError(500, INTERNAL_ERROR, "Internal error: the server could not complete the request (see its log)")


#: Header names as text, each decoded once: requests carry the same few names over and over. Bounded
#: in count and in length, since clients choose the names (others are decoded each time).
_HEADER_NAMES: dict[bytes, str] = {}
_HEADER_NAMES_MAX = 256
_HEADER_NAME_MAX_BYTES = 64


def header_map(scope: Scope) -> dict[str, str]:
    """ASGI's header pairs (names already lower-case) as a dict: the last of a repeated name wins."""
    names = _HEADER_NAMES
    headers: dict[str, str] = {}
    for key, value in scope["headers"]:
        name = names.get(key)
        if name is None:
            name = key.decode("latin-1")
            if len(key) <= _HEADER_NAME_MAX_BYTES and len(names) < _HEADER_NAMES_MAX:
                names[key] = name
        headers[name] = value.decode("latin-1")
    return headers


def query_param(scope: Scope, name: str) -> str | None:
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get(name)
    return values[0] if values else None


@functools.lru_cache(maxsize=256)
def _hostname(netloc: str) -> str:
    """The host name of a ``Host`` header's value, lower-case; "" for one that does not parse
    (``[x``: no host name at all, so never an allowed one)."""
    try:
        return (urlsplit("//" + netloc).hostname or "").lower()
    except ValueError:
        return ""


def check_origin_and_host(headers: dict[str, str], settings: Settings) -> None:
    """DNS-rebinding defence: foreign Origins are refused; on loopback binds, so are foreign Hosts."""
    loopback_bind = settings.host in LOOPBACK_HOSTS
    host = headers.get("host", "")
    if loopback_bind and host and _hostname(host) not in LOOPBACK_HOSTS:
        raise HttpError(403, -32000, f"Forbidden: Host {host!r} is not allowed on a loopback-bound server")
    origin = headers.get("origin")
    if origin is None:
        return
    if origin in settings.allowed_origins or "*" in settings.allowed_origins:
        return
    try:
        parsed = urlsplit(origin)
        origin_host = (parsed.hostname or "").lower()
    except ValueError:  # not an origin at all (``http://[x``): refused like a foreign one
        parsed, origin_host = None, ""
    if parsed is not None and parsed.netloc and parsed.netloc.lower() == host.lower():
        return
    if loopback_bind and origin_host in LOOPBACK_HOSTS:
        return
    raise HttpError(403, -32000, f"Forbidden: Origin {origin!r} is not allowed (see REGISTRY_ALLOWED_ORIGINS)")


def _resource_metadata(headers: dict[str, str], settings: Settings, scope: Scope | None) -> str:
    """With single sign-on: where a 401 tells the client to find the issuer (RFC 9728)."""
    if not settings.oidc_bearer_enabled:
        return ""
    base = public_base(settings, scope.get("scheme", "http") if scope else "http", headers.get("host"))
    return f', resource_metadata="{base}{MCP_METADATA_PATH}"'


def known_principal(headers: dict[str, str], tokens: TokenService, settings: Settings) -> Principal | None:
    """The caller, when that is known without waiting: an anonymous agent where they are allowed,
    or a bearer token verified lately (``TokenService.peek``) that may use MCP. None: ask
    ``authenticate``, which verifies the token and says why one is refused."""
    header = headers.get("authorization")
    if not header:
        return ANONYMOUS_AGENT if settings.anonymous_agents_enabled else None
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    principal = tokens.peek(token)
    return principal if principal is not None and principal.may_use_mcp else None


async def authenticate(
    headers: dict[str, str], tokens: TokenService, settings: Settings, scope: Scope | None = None
) -> Principal:
    known = known_principal(headers, tokens, settings)
    if known is not None:
        return known
    header = headers.get("authorization")
    if not header:
        if settings.anonymous_agents_enabled:
            return ANONYMOUS_AGENT
        raise HttpError(
            401,
            -32001,
            "Unauthorized: send Authorization: Bearer <agent token>",
            {"WWW-Authenticate": 'Bearer realm="mcp-registry"' + _resource_metadata(headers, settings, scope)},
        )
    scheme, _, token = header.partition(" ")
    token = token.strip()
    principal = None
    reason = "invalid or revoked token"
    if scheme.lower() == "bearer" and token:
        try:
            principal = tokens.peek(token) or await asyncio.to_thread(tokens.verify, token)
        except TokenRejected as exc:
            reason = exc.reason  # "token expired" tells the operator what to do
    if principal is None or not principal.may_use_mcp:
        raise HttpError(
            401,
            -32001,
            f"Unauthorized: {reason}",
            {
                "WWW-Authenticate": f'Bearer realm="mcp-registry", error="invalid_token", error_description="{reason}"'
                + _resource_metadata(headers, settings, scope)
            },
        )
    return principal


def served_label(principal: Principal, scope: Scope, settings: Settings) -> str:
    """The label a new connection is served: its agent token's, else ``?label=``, else production.

    ``?label=`` lets a caller read unreleased versions, so agents whose token names no label (and
    anonymous agents) may only pick the labels in ``settings.agent_selectable_labels``; admin-API
    tokens may pick any (they can read every version through the admin API anyway).
    """
    if principal.label:
        return principal.label
    requested = query_param(scope, "label")
    if not requested:
        return PRODUCTION
    if requested not in settings.agent_selectable_labels and not principal.may_read_any_label:
        allowed = ", ".join(settings.agent_selectable_labels) or "none"
        raise HttpError(
            403,
            -32001,
            f"Forbidden: agents may not select label {requested[:64]!r}; selectable labels: {allowed} "
            "(setting REGISTRY_AGENT_LABELS)",
        )
    if not _LABEL.fullmatch(requested):  # an admin's pick, kept in the session row: it must fit there
        raise HttpError(
            400,
            INVALID_REQUEST,
            "Bad Request: ?label= must be a label name: lower-case letters, digits, '_', '.' and '-', "
            "at most 64 characters",
        )
    return requested


def _raw_headers(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


async def send_bytes(
    send: SendFn, status: int, body: bytes, content_type: str | None, headers: dict[str, str] | None = None
) -> None:
    raw = _raw_headers(headers) if headers else []
    if content_type:
        raw.append(_JSON_CONTENT if content_type == "application/json" else (b"content-type", content_type.encode()))
    raw.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def send_json(send: SendFn, status: int, message: Any, headers: dict[str, str] | None = None) -> Awaitable[None]:
    """``await send_json(...)``: the message as a JSON answer (``send_bytes``'s coroutine itself,
    not one more around it: every request answers through here)."""
    return send_bytes(send, status, dumps(message), "application/json", headers)


async def send_http_error(send: SendFn, error: HttpError) -> None:
    await send_json(send, error.status, error_message(None, JsonRpcError(error.code, error.message)), error.headers)


def _body_too_large(limit: int) -> HttpError:
    return HttpError(413, INVALID_REQUEST, str(LimitExceeded("body_bytes", f"Request body larger than {limit} bytes")))


async def read_messages(receive: Receive, headers: dict[str, str], limits: Limits) -> tuple[bool, list[Any]]:
    """Read and parse a POSTed JSON-RPC body under ``limits``: (was it a batch, its messages).

    Every bound is checked before the next step costs anything: the body size while reading (by
    its Content-Length before anything is read, else by the bytes counted so far; never more than
    ``limits.body_bytes`` are held), the JSON structure before parsing, the batch length before any
    message is looked at. A refusal is an ``HttpError`` (413 for the size, 400 otherwise) whose
    message names the limit. Large bodies are parsed on a worker thread.
    """
    limit = limits.body_bytes
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _body_too_large(limit)
    message = await receive()
    body: bytes = message.get("body", b"")
    if message.get("more_body", False) or message["type"] == "http.disconnect":
        body = await _rest_of_body(receive, message, body, limit)
    elif len(body) > limit:
        raise _body_too_large(limit)
    if len(body) > _SCAN_IN_THREAD_BYTES:
        return await asyncio.to_thread(parse_messages, body, limits)
    return parse_messages(body, limits)


async def _rest_of_body(receive: Receive, message: MutableMapping[str, Any], first: bytes, limit: int) -> bytes:
    """A body that comes in several ASGI messages (``first`` is the first one's), bounded by ``limit``."""
    chunks = [first]
    size = len(first)
    while True:
        if message["type"] == "http.disconnect":
            raise HttpError(400, INVALID_REQUEST, "client disconnected")
        if size > limit:
            raise _body_too_large(limit)
        if not message.get("more_body", False):
            return b"".join(chunks)
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        chunks.append(chunk)


def parse_messages(body: bytes, limits: Limits) -> tuple[bool, list[Any]]:
    """A complete body (``read_body`` bounded its size) parsed under ``limits``: (was it a batch,
    its messages), or an ``HttpError`` (400) naming the limit or the parse error."""
    try:
        payload = loads(body, limits)
    except JsonRpcError as exc:  # over json_depth or json_elements
        raise HttpError(400, exc.code, exc.message) from None
    except ValueError:  # UnicodeDecodeError included
        raise HttpError(400, PARSE_ERROR, "Parse error: invalid JSON") from None
    try:
        return isinstance(payload, list), check_batch(payload, limits)
    except JsonRpcError as exc:
        raise HttpError(400, exc.code, exc.message) from None


def sse_frame(
    data: bytes, *, event_id: str | None = None, event: str | None = None, retry_ms: int | None = None
) -> bytes:
    """One server-sent event, as written: a fan-out encodes it once and writes it to many streams."""
    parts = []
    if event_id is not None:
        parts.append(b"id: " + event_id.encode())
    if event is not None:
        parts.append(b"event: " + event.encode())
    if retry_ms is not None:
        parts.append(b"retry: " + str(retry_ms).encode())
    parts.append(b"data: " + data)
    return b"\n".join(parts) + b"\n\n"


#: An SSE comment that keeps proxies from closing an idle stream.
KEEPALIVE_FRAME = b": keep-alive\n\n"


async def _finish_send(send: Coroutine[Any, Any, None], waiting_on: Any) -> None:
    """Go on with an ASGI ``send`` that ``SseStream.try_write`` started outside any task and that
    suspended (the server waits for the client to take earlier bytes): what a task would do with
    it. Each time, what it waits on (a future, or None for a bare yield) is awaited here, then the
    send is resumed; it reads the outcome of that future itself. Cancelled (the stream is dropped),
    the send is closed: nothing more of it is written."""
    task = asyncio.current_task()
    try:
        while True:
            try:
                if waiting_on is None:
                    await asyncio.sleep(0)
                else:
                    # As a task does: the future is awaited anew here, so it is no longer
                    # "blocking" the send's own await of it (asyncio refuses that otherwise).
                    waiting_on._asyncio_future_blocking = False
                    await waiting_on
            except asyncio.CancelledError:
                if task is None or task.cancelling():
                    raise  # this task is cancelled, not just the future the send waited on
            except Exception:
                pass  # the send reads the future's outcome itself when resumed
            waiting_on = send.send(None)
    except StopIteration:
        return
    finally:
        send.close()


async def _awaited(awaitable: Awaitable[None]) -> None:
    await awaitable


async def _raise(error: Exception) -> None:
    raise error


class SseStream:
    """Server-sent events on an ASGI response."""

    HEADERS = [
        (b"content-type", b"text/event-stream"),
        (b"cache-control", b"no-cache, no-transform"),
        (b"x-accel-buffering", b"no"),
    ]

    def __init__(self, send: SendFn) -> None:
        self._send = send
        self.started = False
        self.closed = False

    async def start(self, status: int = 200, headers: dict[str, str] | None = None) -> None:
        await self._send(
            {"type": "http.response.start", "status": status, "headers": self.HEADERS + _raw_headers(headers or {})}
        )
        self.started = True

    async def event(
        self, data: bytes, *, event_id: str | None = None, event: str | None = None, retry_ms: int | None = None
    ) -> None:
        frame = sse_frame(data, event_id=event_id, event=event, retry_ms=retry_ms)
        await self._send({"type": "http.response.body", "body": frame, "more_body": True})

    def try_write(self, frame: bytes) -> Coroutine[Any, Any, None] | None:
        """Write an encoded event (``sse_frame``) now, from outside the stream's task, if the server
        takes it without waiting: None when it did. Otherwise (the client has not taken earlier
        bytes; uvicorn waits before it writes) the rest of the write, for the stream's own task to
        await before it writes anything else; an error of the send is raised there too.

        This is what lets one fan-out pass write an idle stream's event with no wake-up of its task.
        It relies only on ASGI: ``send`` is a coroutine, run here step by step as a task would.
        """
        awaitable = self._send({"type": "http.response.body", "body": frame, "more_body": True})
        send = awaitable if type(awaitable) is CoroutineType else _awaited(awaitable)
        try:
            waiting_on = send.send(None)
        except StopIteration:
            return None
        except Exception as exc:
            return _raise(exc)
        return _finish_send(send, waiting_on)

    async def message(self, message: Any, event_id: str | None = None) -> None:
        await self.event(dumps(message), event_id=event_id, event="message")

    async def comment(self, text: str = "keep-alive") -> None:
        await self._send({"type": "http.response.body", "body": b": " + text.encode() + b"\n\n", "more_body": True})

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await self._send({"type": "http.response.body", "body": b"", "more_body": False})


class PassWritable(Protocol):
    """A stream ``WritePass`` writes: it writes what it holds, or is dropped when that fails."""

    def flush(self, frames: dict[Any, bytes]) -> None: ...

    def drop(self, reason: str) -> None: ...


class WritePass(Generic[StreamT]):
    """The idle streams offered something during one loop turn, written in one pass after it.

    A fan-out offers a change to every stream; each idle one is ``note``d (once) and a single
    ``call_soon`` writes them all, so one change costs one pass of socket writes, not a task wake-up
    per stream, and what the turn offered (a burst of changes) is coalesced first. ``frames`` is
    shared by the streams of one pass, so an event they all get is encoded once. A stream whose
    write raises is dropped and logged; the others are still written.
    """

    def __init__(self, what: str, initial_frames: dict[Any, bytes] | None = None) -> None:
        #: What a stream is, in the log line of a failed write ("GET stream", "listen stream").
        self.what = what
        self._initial_frames = initial_frames or {}
        self._noted: list[StreamT] = []

    def note(self, stream: StreamT) -> None:
        self._noted.append(stream)
        if len(self._noted) == 1:  # one pass after this loop turn, however many streams
            asyncio.get_running_loop().call_soon(self.run)

    def run(self) -> None:
        streams, self._noted = self._noted, []
        frames = dict(self._initial_frames)
        for stream in streams:
            try:
                stream.flush(frames)
            except Exception:  # one stream's failure must not leave the others unwritten
                log.exception("writing to %s %r failed", self.what, stream)
                stream.drop("writing to it failed")
